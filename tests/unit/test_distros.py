"""
Distro detection from pyinfra's facts into the per-family table, and the table against real
sources: Debian's archive, NVIDIA's published repository files (from the real-world corpus,
GPU_NODE_CORPUS: tests/corpus.py) and install guides. Ubuntu's, Fedora's, RHEL's, SUSE's and
Arch's archives cannot be reached here: their package names are covered only by the plan tests
(tests/unit/test_driver_plans.py and the Docker golden below).
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import debian_archive
import pytest
from corpus import corpus_file, read_text
from plan import DEFAULT, SITE_DRIVER_KEY, run_plan, settings_for

from deploy.distros.families import FAMILIES, UnsupportedPlatform, detect_platform
from deploy.planning.driver_plan import DriverPlanError, driver_plan
from deploy.tasks.docker import docker_runtime
from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, apt_source_text, rpm_repo_text, toolkit


def distribution(distro_id: str, id_like: str = "", **meta):
    return {
        "name": distro_id,
        "major": None,
        "minor": None,
        "release_meta": {"ID": distro_id, "ID_LIKE": id_like, **meta},
    }


@pytest.mark.parametrize(
    ("distro_id", "family"),
    [
        ("debian", "debian"),
        ("ubuntu", "ubuntu"),
        ("rhel", "rhel"),
        ("rocky", "rhel"),
        ("almalinux", "rhel"),
        ("centos", "rhel"),
        ("fedora", "fedora"),
        ("amzn", "amazon"),
        ("opensuse-leap", "suse"),
        ("opensuse-tumbleweed", "suse"),
        ("sles", "suse"),
        ("arch", "arch"),
    ],
)
def test_each_supported_distro_maps_to_its_family(distro_id, family):
    assert detect_platform(distribution(distro_id), "x86_64").family.name == family


def test_derivatives_follow_id_like():
    assert detect_platform(distribution("linuxmint", "ubuntu debian"), "x86_64").family.name == "ubuntu"


def test_arm64_maps_to_nvidias_sbsa_repository_arch():
    platform = detect_platform(distribution("ubuntu", VERSION_CODENAME="noble"), "aarch64")
    assert (platform.deb_arch, platform.cuda_arch, platform.codename) == ("arm64", "sbsa", "noble")


def test_unsupported_distro_names_itself_and_what_is_supported():
    with pytest.raises(UnsupportedPlatform) as raised:
        detect_platform(distribution("alpine"), "x86_64")
    message = str(raised.value)
    assert "'alpine'" in message and "debian" in message and "arch" in message


def test_unsupported_arch_is_refused():
    with pytest.raises(UnsupportedPlatform, match="'ppc64le'"):
        detect_platform(distribution("debian"), "ppc64le")


def test_every_family_names_its_initramfs_tool_and_containerd_package():
    for family in FAMILIES:
        assert family.initramfs_command.split()[0] in ("update-initramfs", "dracut", "mkinitcpio")
        assert family.containerd_package


# The table against real sources: what a family's plan names must exist where it points.

OS_RELEASE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia" / "os-release"


def platform_of(fixture: str, arch: str = "x86_64"):
    """The Platform of a stored os-release file (tests/fixtures/nvidia/os-release/<fixture>)."""
    meta = dict(
        shlex.split(line)[0].split("=", 1) for line in (OS_RELEASE / fixture).read_text().splitlines() if "=" in line
    )
    version = meta.get("VERSION_ID", "")
    major = int(version.split(".")[0]) if version[:1].isdigit() else None
    return detect_platform({"name": meta["ID"], "major": major, "release_meta": meta}, arch)


def debian_plan_names(**settings) -> list[str]:
    """Every package the driver, toolkit-free stages of a Debian 12 amd64 host can install."""
    platform = platform_of("debian-12")
    plan = driver_plan(
        settings_for(cuda_toolkit_install="true", **settings), platform, {"kernel": "6.1.0-18-cloud-amd64"}
    )
    family = platform.family
    return [
        *plan.packages,
        *plan.extra_packages,
        *plan.headers[1:],
        *plan.cuda_packages,
        family.containerd_package,
        family.docker_package,
    ]


@pytest.mark.parametrize("settings", [{}, {"nvidia_driver_branch": "535"}], ids=["default", "branch-535"])
def test_debian_12_plan_names_only_packages_in_debians_real_bookworm_archive(settings):
    """Debian's archive (deb.debian.org, bookworm with -updates and -security, every component,
    amd64): a renamed or misspelt package in the table fails here. The exact-kernel header
    package is left out: its name follows the kernel of the day."""
    try:
        absent = debian_archive.missing("bookworm", debian_plan_names(**settings))
    except RuntimeError as error:
        pytest.skip(f"Debian's archive unreachable (set GPU_NODE_DEBIAN_MIRROR to a mirror): {error}")
    assert absent == [], f"not in Debian bookworm: {absent}"


def repository_sections(text: str) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {name: dict(parser[name]) for name in parser.sections()}


@pytest.mark.parametrize("fixture", ["rocky-9", "fedora-40", "amzn-2023", "opensuse-leap-15.5", "sles-15.5"])
def test_rpm_toolkit_repository_is_nvidias_published_stable_repository(fixture):
    """NVIDIA's own repository file (from the real-world corpus, GPU_NODE_CORPUS), which its install
    guide puts in /etc/yum.repos.d/ (zypper: /etc/zypp/repos.d/ through `zypper ar`), but for its
    gpgkey: ours names the checked copy of the key at that URL (its fingerprint pinned), never the URL."""
    published = repository_sections(read_text(corpus_file("nvidia-container-toolkit/nvidia-container-toolkit.repo")))
    published = published["nvidia-container-toolkit"]
    platform = platform_of(fixture)
    text = rpm_repo_text(settings_for(), platform)
    ours = repository_sections(text)["nvidia-container-toolkit"]
    assert {key: ours.get(key) for key in published if key != "gpgkey"} == {
        key: value for key, value in published.items() if key != "gpgkey"
    }
    key_file = platform.family.package_manager.key_file.format(name="nvidia-container-toolkit")
    assert ours["gpgkey"] == f"file://{key_file}"
    assert f"# signing key: {published['gpgkey']} (" in text
    folder = {"dnf": "/etc/yum.repos.d", "zypper": "/etc/zypp/repos.d"}[platform.family.package_manager.name]
    plan = run_plan(toolkit, settings_for(), platform, unstated=DEFAULT)  # a node with nothing of it yet
    assert plan.ran(f"{folder}/nvidia-container-toolkit.repo"), plan.commands


@pytest.mark.parametrize("fixture", ["debian-12", "ubuntu-22.04"])
def test_apt_toolkit_source_is_nvidias_published_list_with_signed_by(fixture):
    """NVIDIA's own apt source (from the real-world corpus, GPU_NODE_CORPUS), which its install guide
    puts in /etc/apt/sources.list.d/ with signed-by added."""
    published = read_text(corpus_file("nvidia-container-toolkit/nvidia-container-toolkit.list")).splitlines()[0]
    ours = [
        line for line in apt_source_text(settings_for(), platform_of(fixture)).splitlines() if line.startswith("deb ")
    ]
    assert ours == [published.replace("deb ", f"deb [signed-by={APT_KEYRING}] ", 1)]
    assert APT_SOURCE == "/etc/apt/sources.list.d/nvidia-container-toolkit.list"


# NVIDIA's driver repositories as its install guides give them (CUDA installation guide for Linux,
# network repositories: developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/, RPM key
# D42D0685; NVIDIA's SUSE driver repositories: download.nvidia.com/opensuse/leap/<version>,
# .../opensuse/tumbleweed, .../suse/sle<major>sp<minor>), written out by hand.
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
DRIVER_REPOSITORIES = {
    ("rocky-9", "x86_64"): ("cuda-rhel9-x86_64", f"{CUDA}/rhel9/x86_64", f"{CUDA}/rhel9/x86_64/D42D0685.pub"),
    ("fedora-40", "x86_64"): (
        "cuda-fedora40-x86_64",
        f"{CUDA}/fedora40/x86_64",
        f"{CUDA}/fedora40/x86_64/D42D0685.pub",
    ),
    ("amzn-2023", "aarch64"): ("cuda-amzn2023-sbsa", f"{CUDA}/amzn2023/sbsa", f"{CUDA}/amzn2023/sbsa/D42D0685.pub"),
    ("opensuse-leap-15.5", "x86_64"): (
        "nvidia-opensuse-leap",
        "https://download.nvidia.com/opensuse/leap/15.5",
        "https://download.nvidia.com/opensuse/leap/15.5/repodata/repomd.xml.key",
    ),
    ("sles-15.5", "x86_64"): (
        "nvidia-sles",
        "https://download.nvidia.com/suse/sle15sp5",
        "https://download.nvidia.com/suse/sle15sp5/repodata/repomd.xml.key",
    ),
}
# NVIDIA's CUDA repository keys, 3bf863cc and D42D0685, as NVIDIA prints them (cuda-repo-management's SIGNATURES.md)
NVIDIA_CUDA_KEYS = ("EB693B3035CD5710E231E123A4B469963BF863CC", "610C7B14E068A878070DA4E99CD0A493D42D0685")
CUDA_REPOSITORIES = {
    "opensuse-leap-15.5": f"{CUDA}/opensuse15/x86_64",
    "sles-15.5": f"{CUDA}/sles15/x86_64",
}


@pytest.mark.parametrize(("fixture", "arch"), sorted(DRIVER_REPOSITORIES))
def test_driver_repository_is_the_one_nvidias_install_guide_names(fixture, arch):
    plan = driver_plan(
        settings_for(cuda_toolkit_install="true", **SITE_DRIVER_KEY),
        platform_of(fixture, arch),
        {"kernel": "6.4.0-150600.23.7-default"},
    )
    name, baseurl, gpgkey = DRIVER_REPOSITORIES[(fixture, arch)]
    assert {key: plan.repository[key] for key in ("name", "baseurl", "gpgkey")} == {
        "name": name,
        "baseurl": baseurl,
        "gpgkey": gpgkey,
    }
    suse = fixture in CUDA_REPOSITORIES
    # NVIDIA's CUDA keys (D42D0685 on RPM families) pin the CUDA repository; the site's key the SUSE one
    assert (
        plan.repository["pin"].fingerprints == (SITE_DRIVER_KEY["nvidia_driver_gpgkey_fingerprint"],)
        if suse
        else NVIDIA_CUDA_KEYS
    )
    if suse:
        assert plan.cuda_repository["baseurl"] == CUDA_REPOSITORIES[fixture]
        assert plan.cuda_repository["gpgkey"] == CUDA_REPOSITORIES[fixture] + "/D42D0685.pub"
        assert plan.cuda_repository["pin"].fingerprints == NVIDIA_CUDA_KEYS


def test_nvidias_suse_driver_repository_is_refused_until_its_key_is_pinned():
    """NVIDIA publishes no fingerprint for its SUSE repository's key: nothing trusts it on first sight."""
    with pytest.raises(
        DriverPlanError,
        match="nvidia_driver_gpgkey_fingerprint is unset: the key at "
        "https://download.nvidia.com/opensuse/leap/15.5/repodata/repomd.xml.key",
    ):
        driver_plan(settings_for(), platform_of("opensuse-leap-15.5"), {"kernel": "6.4.0-150600.23.7-default"})


def test_a_key_beside_an_http_mirror_is_refused_until_a_key_url_that_is_not_http_is_set():
    mirror = {"nvidia_cuda_repo_url": "http://mirror.internal/cuda", "allow_insecure_repositories": "true"}
    with pytest.raises(
        DriverPlanError,
        match="refusing to fetch the signing key http://mirror.internal/cuda/rhel9/"
        "x86_64/D42D0685.pub over http.*set nvidia_cuda_gpgkey_url",
    ):
        driver_plan(settings_for(**mirror), platform_of("rocky-9"), {"kernel": "5.14.0-427.el9.x86_64"})
    key_url = "https://mirror.internal/keys/cuda.asc"
    plan = driver_plan(
        settings_for(**mirror, nvidia_cuda_gpgkey_url=key_url),
        platform_of("rocky-9"),
        {"kernel": "5.14.0-427.el9.x86_64"},
    )
    assert (
        plan.repository["baseurl"] == "http://mirror.internal/cuda/rhel9/x86_64"
        and plan.repository["gpgkey"] == key_url
    )


def test_tumbleweed_takes_nvidias_tumbleweed_repository():
    platform = detect_platform(distribution("opensuse-tumbleweed", VERSION_ID="20240601"), "x86_64")
    plan = driver_plan(settings_for(**SITE_DRIVER_KEY), platform, {"kernel": "6.9.3-1-default"})
    assert plan.repository["baseurl"] == "https://download.nvidia.com/opensuse/tumbleweed"


def test_rhel_9_enables_nvidias_latest_dkms_module_stream():
    # The CUDA guide: `dnf module install nvidia-driver:latest-dkms` (RHEL 8/9).
    plan = driver_plan(settings_for(), platform_of("rocky-9"), {"kernel": "5.14.0-427.el9.x86_64"})
    assert plan.module == ("nvidia-driver", "latest-dkms")


# What the Docker stage runs per family with docker_install=true on a host without Docker: the
# distribution's own package through its package manager (commands as pyinfra's operations write them).
DOCKER_INSTALLS = {
    "debian-12": 'DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" -o Dpkg::Options::="--force-confold" install'
    " -o DPkg::Lock::Timeout=120 --allow-change-held-packages --allow-downgrades docker.io",
    "ubuntu-22.04": 'DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" -o Dpkg::Options::="--force-confold" install'
    " -o DPkg::Lock::Timeout=120 --allow-change-held-packages --allow-downgrades docker.io",
    "fedora-40": "dnf install -y moby-engine",
    "amzn-2023": "dnf install -y docker",
    "opensuse-leap-15.5": "zypper --non-interactive install -y docker",
    "arch": "pacman --noconfirm -Syu --needed docker",
}


@pytest.mark.parametrize("fixture", sorted(DOCKER_INSTALLS))
def test_docker_install_runs_the_familys_package_manager_with_its_package(fixture):
    plan = run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker", docker_install="true"),
        platform_of(fixture).family,
        unstated=DEFAULT,
    )  # no Docker, nothing installed
    installs = [
        command
        for command in plan.commands
        if re.search(r"^(DEBIAN_FRONTEND=\S+ )?(apt-get|dnf|zypper|pacman)( .*)? (install|-S|-Syu) ", command)
    ]
    assert installs == [DOCKER_INSTALLS[fixture]], plan.commands
