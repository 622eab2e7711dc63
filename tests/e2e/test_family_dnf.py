"""
The RHEL family run by its real package manager: a Rocky Linux 9 node (tests/family_images.py:
Debian's dnf 4.14, rpm 4.18 and dnf-plugins-core' versionlock, Rocky's os-release and dnf.conf)
takes the kernel, driver and toolkit stages through pyinfra's default mode and then with ``-y``,
from local signed repositories on 127.0.0.1 (tests/rpm_repo.py) holding STAND-IN rpms under the
real names and versions (tests/standin_rpms.py): NVIDIA's CUDA repository for RHEL 9 with the
``nvidia-driver`` module streams, NVIDIA's toolkit repository, and Rocky's own packages.

dnf, its signature checks (gpgcheck on packages, repo_gpgcheck on the toolkit's metadata), module
streams and versionlock are real; the packages are stand-ins (no driver is built or loaded). The
runtimes stages are left out: containerd.io comes from Docker's repository, which no local
stand-in serves yet. The real hosts of the family's repositories resolve to 127.0.0.1 on the node,
so nothing leaves this machine whatever the deploy writes.

What the run shows wrong in the commands is marked ``xfail(strict=True)`` with the finding.
"""

from __future__ import annotations

import pytest
import rpm_repo
import standin_rpms
from family_images import ROCKY9_DNF, family_node, rpm_installed
from harness import SAFE_DATA, assert_no_change, ensure_docker

from deploy.distros.families import detect_platform
from deploy.distros.package_managers import DNF
from deploy.planning import driver_plan
from deploy.settings import parse_settings
from deploy.tasks.toolkit import REPOSITORY_NAME, TOOLKIT_PACKAGES

DRIVER_PACKAGES = ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms")
PINNED_DRIVER = standin_rpms.DRIVER_VERSIONS[0]  # the older of the two published
PINNED_TOOLKIT = standin_rpms.TOOLKIT_VERSIONS[0]
RELEASE = standin_rpms.DRIVER_RELEASE
CUDA_REPO_FILE = f"/etc/yum.repos.d/cuda-{rpm_repo.CUDA_DIST}-{standin_rpms.ARCH}.repo"
CUDA_KEY_FILE = DNF.key_file.format(name=f"cuda-{rpm_repo.CUDA_DIST}-{standin_rpms.ARCH}")
TOOLKIT_REPO_FILE = f"/etc/yum.repos.d/{REPOSITORY_NAME}.repo"
AUTOMATIC_CONF = (
    "[commands]\nupgrade_type = default\nrandom_sleep = 0\ndownload_updates = yes\napply_updates = yes\n"
    "[emitters]\nemit_via = stdio\n"
)
TOOLKIT_KEY_FILE = DNF.key_file.format(name=REPOSITORY_NAME)
REAL_HOSTS = (
    "developer.download.nvidia.com",
    "nvidia.github.io",
    "download.docker.com",
    "dl.rockylinux.org",
    "mirrors.rockylinux.org",
    "mirrors.fedoraproject.org",
)


def cuda_repository_follows(url: str, key_data: dict) -> bool:
    """Whether the driver stage's NVIDIA repository for Rocky 9 is taken from nvidia_cuda_repo_url (its
    key from ``key_data``'s)."""
    settings = parse_settings(
        {**SAFE_DATA, "nvidia_cuda_repo_url": url, "allow_insecure_repositories": "true", **key_data}
    )
    platform = detect_platform(
        {"name": "Rocky Linux", "major": 9, "release_meta": {"ID": "rocky", "VERSION_ID": "9.3"}}, "x86_64"
    )
    plan = driver_plan.driver_plan(settings, platform, {"kernel": "5.14.0-362.8.1.el9_3.x86_64", "gpus": []})
    return bool(plan.repository) and plan.repository["baseurl"].startswith(url)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    ensure_docker()
    with rpm_repo.served(tmp_path_factory.mktemp("rpm-repos") / "root") as served:
        yield served


@pytest.fixture(scope="module")
def driver_stage(repos) -> bool:
    """Whether the driver stage can run here: only once its NVIDIA repository follows
    nvidia_cuda_repo_url (else it would name NVIDIA's real host)."""
    return cuda_repository_follows(repos.cuda_url(), repos.cuda_key_data())


def needs_driver(driver_stage: bool) -> None:
    # Never run a deploy that would name NVIDIA's real host: fail instead.
    assert driver_stage, (
        "the driver's NVIDIA repository does not follow nvidia_cuda_repo_url (deploy/distros/families.py CUDA_REPO)"
    )


def settings_data(repos, driver_stage: bool, *, tampered: bool = False, stages: str | None = None) -> dict:
    return {
        "stages": stages or ("kernel,driver,toolkit" if driver_stage else "kernel,toolkit"),
        "nvidia_cuda_repo_url": repos.cuda_url(tampered),
        **repos.cuda_key_data(tampered),  # keys over https, pinned to the stand-in repositories' own
        "nvidia_driver_branch": standin_rpms.DRIVER_BRANCH,
        "nvidia_driver_version": PINNED_DRIVER,
        "nvidia_toolkit_repo_url": repos.toolkit_url(tampered),
        **repos.toolkit_key_data(tampered),
        "nvidia_toolkit_version": PINNED_TOOLKIT,
        "allow_insecure_repositories": "true",  # http:// on 127.0.0.1; signatures are still checked
    }


def start_rocky_node(repos):
    node = family_node(ROCKY9_DNF).start()
    node.sh(f"printf '127.0.0.1 %s\\n' {' '.join(REAL_HOSTS)} >> /etc/hosts")
    repos.node_setup(node)
    return node


def version_locks(node) -> list[str]:
    return [line for line in node.sh("dnf -q versionlock list").stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def deployed(repos, driver_stage):
    """One Rocky 9 node after its first run, in pyinfra's default mode: (node, result, data)."""
    node = start_rocky_node(repos)
    try:
        data = settings_data(repos, driver_stage)
        yield node, node.deploy(data=data, default_mode=True, json_output=False), data
    finally:
        node.remove()


def test_rocky9_dnf_standin_packages_first_run_in_default_mode_adds_repositories_with_signature_checks(
    deployed, repos, driver_stage
):
    """STAND-IN packages: the toolkit's repository file checks the metadata's signature with the
    key at the URL given; the CUDA repository's checks its packages' (the key dnf imported into
    rpm's database is the CUDA repository's own)."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    toolkit_repo = node.read(TOOLKIT_REPO_FILE)
    assert f"baseurl={repos.toolkit_url()}/rpm/$basearch\n" in toolkit_repo
    # the key dnf reads is the checked copy of the one at the key URL, never the URL
    assert "repo_gpgcheck=1\n" in toolkit_repo and f"gpgkey=file://{TOOLKIT_KEY_FILE}\n" in toolkit_repo
    assert node.read(TOOLKIT_KEY_FILE) == repos.toolkit_key.armored_public_key()
    assert node.sh("dnf -q repolist --enabled").returncode == 0
    imported = node.sh("rpm -q gpg-pubkey --qf '%{VERSION}\\n'").stdout.split()
    assert repos.toolkit_key.fingerprint[-8:].lower() in imported, imported
    if driver_stage:
        cuda_repo = node.read(CUDA_REPO_FILE)
        assert f"baseurl={repos.cuda_url()}/{rpm_repo.CUDA_DIST}/{standin_rpms.ARCH}\n" in cuda_repo, cuda_repo
        assert "gpgcheck=1\n" in cuda_repo and f"gpgkey=file://{CUDA_KEY_FILE}\n" in cuda_repo, cuda_repo
        assert repos.cuda_key.fingerprint[-8:].lower() in imported, imported
    # every key rpm's database holds is one this run checked (or Rocky's own, there before it)
    own = {key.fingerprint[-8:].lower() for key in (repos.toolkit_key, repos.cuda_key, repos.rocky_key)}
    assert set(imported) <= own, imported


def test_rocky9_dnf_standin_packages_toolkit_installed_at_its_pin_and_versionlocked(deployed):
    """STAND-IN toolkit rpms: all four at the pinned 1.17.8-1 although 1.20.0-1 is offered, each
    held by a versionlock entry at that version; the installed nvidia-ctk answers with it."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {name: PINNED_TOOLKIT for name in TOOLKIT_PACKAGES}
    locks = version_locks(node)
    for name in TOOLKIT_PACKAGES:
        assert f"{name}-0:{PINNED_TOOLKIT}.*" in locks, locks
    ctk = node.sh("nvidia-ctk --version").stdout
    assert ctk.startswith(f"NVIDIA Container Toolkit CLI version {PINNED_TOOLKIT.split('-')[0]}"), ctk
    assert node.sh("rpm -q --qf '%{SUMMARY}' nvidia-container-toolkit").stdout.startswith("STAND-IN")


def test_rocky9_dnf_standin_packages_driver_from_the_module_stream_at_its_pin_and_versionlocked(deployed, driver_stage):
    """STAND-IN driver rpms: the branch's module stream enabled (dnf shows their packages only
    then), the stream's three packages at the pinned 550.54.15 although 550.90.07 is offered, held;
    EPEL's release package and the fallback kernel-devel (the container runs the machine's kernel)
    from Rocky's repository; the stand-in nvidia-smi exits 9 as on a node without a driver."""
    needs_driver(driver_stage)
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    enabled = node.sh("dnf -q module list --enabled").stdout
    assert any(
        line.split()[:2] == ["nvidia-driver", f"{standin_rpms.DRIVER_BRANCH}-dkms"] and "[e]" in line
        for line in enabled.splitlines()
    ), enabled
    assert rpm_installed(node, DRIVER_PACKAGES) == {name: f"{PINNED_DRIVER}-{RELEASE}" for name in DRIVER_PACKAGES}
    locks = version_locks(node)
    for name in DRIVER_PACKAGES:
        assert f"{name}-{standin_rpms.DRIVER_EPOCH}:{PINNED_DRIVER}-{RELEASE}.*" in locks, locks
    assert set(rpm_installed(node, ["epel-release", "kernel-devel"])) == {"epel-release", "kernel-devel"}
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode == 9 and f"STAND-IN {PINNED_DRIVER}" in smi.stderr, smi


def test_rocky9_dnf_standin_packages_persistenced_at_the_pinned_drivers_version_and_held(deployed, driver_stage):
    """STAND-IN nvidia-persistenced: at the driver's pinned version, held with it."""
    needs_driver(driver_stage)
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    assert rpm_installed(node, ["nvidia-persistenced"]) == {"nvidia-persistenced": f"{PINNED_DRIVER}-{RELEASE}"}
    assert any(line.startswith("nvidia-persistenced-") for line in version_locks(node))


def test_rocky9_dnf_standin_packages_stay_at_their_pins_through_a_plain_dnf_upgrade(deployed, repos, driver_stage):
    """STAND-IN packages: once a newer driver (550.127.05) and toolkit (1.20.1-1) are published,
    the node's own `dnf upgrade` sees them and leaves the held packages where they were, and so
    does dnf-automatic (Debian's real code) applying updates."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    repos.publish_toolkit(standin_rpms.TOOLKIT_UPDATE)
    names = list(TOOLKIT_PACKAGES)
    if driver_stage:
        repos.publish_driver(standin_rpms.DRIVER_UPDATE)
        names += DRIVER_PACKAGES
    before = rpm_installed(node, names)
    offered = node.sh("dnf -q --refresh list --showduplicates " + " ".join(names)).stdout
    assert standin_rpms.TOOLKIT_UPDATE in offered, offered
    if driver_stage:
        assert f"{standin_rpms.DRIVER_EPOCH}:{standin_rpms.DRIVER_UPDATE}-{RELEASE}" in offered, offered
    upgrade = node.sh("dnf -y upgrade", check=False)
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert rpm_installed(node, names) == before
    # The family's automatic updater: dnf-automatic's own code from Debian's python3-dnf (its
    # three-line launcher is not packaged there), told to download and apply every update.
    node.write("/tmp/automatic.conf", AUTOMATIC_CONF)
    automatic = node.sh(
        "python3 -c 'import sys; from dnf.automatic.main import main; sys.exit(main(sys.argv[1:]))' "
        "/tmp/automatic.conf",
        check=False,
    )
    assert automatic.returncode == 0, automatic.stdout + automatic.stderr
    assert rpm_installed(node, names) == before


def test_rocky9_dnf_standin_packages_second_run_with_y_changes_nothing(deployed):
    """STAND-IN packages: the same settings again, with -y: nothing changes (a pin without its release,
    550.54.15, matches the installed 550.54.15-1.el9)."""
    node, first, data = deployed
    assert first.returncode == 0, first.explain()
    assert_no_change(node.deploy(data=data, json_output=False))


def test_rocky9_dnf_standin_packages_undo_releases_the_versionlocks_repositories_and_keys_gpu_node_added(
    deployed, repos, driver_stage
):
    """deploy/undo.py on the deployed node (its last use here): the versionlock entries, the repository
    files and key copies gpu-node added and the keys it imported into rpm's database are gone; the
    STAND-IN packages stay (undo_remove_packages is false)."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    undone = node.deploy(deploy_file="deploy/undo.py", json_output=False)
    assert undone.returncode == 0, undone.explain()
    assert not [lock for lock in version_locks(node) if lock.startswith(tuple(TOOLKIT_PACKAGES + DRIVER_PACKAGES))]
    added = [TOOLKIT_REPO_FILE, TOOLKIT_KEY_FILE] + ([CUDA_REPO_FILE, CUDA_KEY_FILE] if driver_stage else [])
    assert [path for path in added if node.exists(path)] == []
    imported = node.sh("rpm -q gpg-pubkey --qf '%{VERSION}\\n'", check=False).stdout.split()
    assert repos.toolkit_key.fingerprint[-8:].lower() not in imported, imported
    assert set(rpm_installed(node, TOOLKIT_PACKAGES)) == set(TOOLKIT_PACKAGES)


@pytest.fixture
def rocky_node(repos):
    node = start_rocky_node(repos)
    yield node
    node.remove()


@pytest.fixture(scope="module")
def toolkit_refused(repos, driver_stage):
    """A Rocky 9 node after a -y run of the toolkit stage against the toolkit repository whose
    repomd.xml was altered after signing: (node, result)."""
    node = start_rocky_node(repos)
    try:
        data = settings_data(repos, driver_stage, tampered=True, stages="toolkit")
        yield node, node.deploy(data=data, json_output=False)
    finally:
        node.remove()


def test_rocky9_dnf_standin_toolkit_repository_whose_signature_does_not_verify_is_refused_and_nothing_installed(
    toolkit_refused,
):
    """STAND-IN toolkit repository, its repomd.xml altered after signing (repo_gpgcheck): the run
    fails with dnf's one line naming the repository and the bad signature; no toolkit package is in."""
    node, refused = toolkit_refused
    assert refused.returncode != 0, refused.explain()
    refusal = [line for line in refused.run_output.splitlines() if "GPG signature verification error" in line]
    assert len(refusal) == 1 and f"'{REPOSITORY_NAME}'" in refusal[0], refused.explain()
    assert "Traceback" not in refused.output
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {}


def test_rocky9_dnf_standin_toolkit_repository_refused_leaves_the_nodes_own_dnf_working(toolkit_refused):
    """STAND-IN toolkit repository whose signature does not verify: after the refused run the
    node's own dnf still reads its repositories (as apt-get update does after the apt refusal), and
    neither the repository file, its key copy nor the key imported for the check are left."""
    node, refused = toolkit_refused
    assert refused.returncode != 0, refused.explain()
    assert not node.exists(TOOLKIT_REPO_FILE) and not node.exists(TOOLKIT_KEY_FILE)
    assert "gpg-pubkey-" not in node.sh("rpm -q gpg-pubkey", check=False).stdout
    own = node.sh("dnf -q makecache", check=False)
    assert own.returncode == 0, own.stdout + own.stderr


def packages_and_trust(node) -> str:
    """What a run could change of the node's software and what it trusts: dnf's repository files and
    the key folder (checksums), rpm's database (every package, every imported key)."""
    return node.sh("find /etc/yum.repos.d /etc/pki/rpm-gpg -type f -exec sha256sum {} + | sort; rpm -qa | sort").stdout


def test_rocky9_dnf_standin_toolkit_key_url_serving_another_valid_key_that_signed_the_repository_is_refused(
    rocky_node, repos, driver_stage
):
    """STAND-IN toolkit repository copy whose repomd.xml another valid key signed, that key served at the
    key URL (a hijacked mirror or key URL): dnf -y would import it and verify the repository with it.
    With -y the pinned fingerprint refuses it first, in one line naming both fingerprints: nothing
    installed, no key imported, no repository file left."""
    node = rocky_node
    before = packages_and_trust(node)
    impostor = f"{rpm_repo.IMPOSTOR}/{rpm_repo.TOOLKIT_PATH}"
    key_url = f"{repos.keys_url}/{impostor}/gpgkey"
    data = {
        **settings_data(repos, driver_stage, stages="toolkit"),
        "nvidia_toolkit_repo_url": f"{repos.url}/{impostor}",
        "nvidia_toolkit_gpgkey_url": key_url,
    }
    refused = node.deploy(data=data, json_output=False)
    assert refused.returncode != 0, refused.explain()
    refusal = (
        f"refusing the signing key from {key_url}: its fingerprint is {repos.other_key.fingerprint}; "
        f"{repos.toolkit_key.fingerprint} is pinned (nvidia_toolkit_gpgkey_fingerprint)"
    )
    assert len(refused.run_lines(refusal)) == 1, refused.explain()
    assert "Traceback" not in refused.output
    assert packages_and_trust(node) == before


def test_rocky9_dnf_standin_cuda_repository_whose_rpms_are_signed_by_another_key_is_refused_and_nothing_installed(
    rocky_node, repos, driver_stage
):
    """STAND-IN CUDA repository whose rpms are signed by a key that is not the one its gpgkey
    names (gpgcheck), with -y: the run fails with dnf's one line, and none of the driver's packages
    is installed."""
    needs_driver(driver_stage)
    node = rocky_node
    refused = node.deploy(data=settings_data(repos, driver_stage, tampered=True, stages="driver"), json_output=False)
    assert refused.returncode != 0, refused.explain()
    refusal = [line for line in refused.run_output.splitlines() if "GPG check FAILED" in line]
    assert len(refusal) == 1, refused.explain()
    assert "Traceback" not in refused.output
    assert rpm_installed(node, [*DRIVER_PACKAGES, "nvidia-persistenced"]) == {}


def test_rocky9_dnf_standin_driver_proprietary_node_switched_to_open_replaces_the_module_and_moves_the_versionlock(
    repos, driver_stage
):
    """STAND-IN driver rpms, with -y, on a proprietary node: switching to open enables the branch's open
    stream, removes kmod-nvidia-latest-dkms (rpm -e, after the bounded wait for dnf's lock), installs
    kmod-nvidia-open-dkms at the pinned version, moves the versionlock with it, and a re-run changes
    nothing."""
    needs_driver(driver_stage)
    node = start_rocky_node(repos)
    try:
        data = {**settings_data(repos, driver_stage, stages="driver"), "nvidia_kernel_modules": "proprietary"}
        first = node.deploy(data=data, json_output=False)
        assert first.returncode == 0, first.explain()
        data = {**data, "nvidia_kernel_modules": "open"}
        switched = node.deploy(data=data, json_output=False)
        assert switched.returncode == 0, switched.explain()
        modules = ["kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms"]
        assert list(rpm_installed(node, modules)) == ["kmod-nvidia-open-dkms"]
        locks = " ".join(version_locks(node))
        assert "kmod-nvidia-open-dkms-" in locks and "kmod-nvidia-latest-dkms-" not in locks, locks
        enabled = node.sh("dnf -q module list --enabled").stdout
        assert any(
            line.split()[:2] == ["nvidia-driver", f"{standin_rpms.DRIVER_BRANCH}-open"] for line in enabled.splitlines()
        ), enabled
        assert_no_change(node.deploy(data=data, json_output=False))
    finally:
        node.remove()


@pytest.mark.parametrize("direction", ["upgraded", "downgraded"])
def test_rocky9_dnf_standin_driver_and_toolkit_moved_to_another_pin_move_and_versionlock_again(
    repos, driver_stage, direction
):
    """STAND-IN driver and toolkit rpms, with -y: a node at one driver and toolkit, then pinned to the
    other versions, newer (an update) or older (the way the driver stage's refusal of a silent
    downgrade tells the operator to go back): all move to their pins, are versionlocked at them,
    and a re-run changes nothing."""
    needs_driver(driver_stage)
    versions = {"upgraded": (0, 1), "downgraded": (1, 0)}[direction]
    toolkits, drivers = standin_rpms.TOOLKIT_VERSIONS, standin_rpms.DRIVER_VERSIONS
    node = start_rocky_node(repos)
    try:

        def pinned(index: int) -> dict:
            return {
                **settings_data(repos, driver_stage, stages="driver,toolkit"),
                "nvidia_driver_version": drivers[index],
                "nvidia_toolkit_version": toolkits[index],
            }

        first = node.deploy(data=pinned(versions[0]), json_output=False)
        assert first.returncode == 0, first.explain()
        moved = node.deploy(data=pinned(versions[1]), json_output=False)
        assert moved.returncode == 0, moved.explain()
        assert rpm_installed(node, TOOLKIT_PACKAGES) == {name: toolkits[versions[1]] for name in TOOLKIT_PACKAGES}
        assert rpm_installed(node, DRIVER_PACKAGES) == {
            name: f"{drivers[versions[1]]}-{RELEASE}" for name in DRIVER_PACKAGES
        }
        locks = " ".join(version_locks(node))
        for name in DRIVER_PACKAGES:
            assert f"{name}-{standin_rpms.DRIVER_EPOCH}:{drivers[versions[1]]}-{RELEASE}.*" in locks, locks
            assert f"{name}-{standin_rpms.DRIVER_EPOCH}:{drivers[versions[0]]}-" not in locks, locks
        assert_no_change(node.deploy(data=pinned(versions[1]), json_output=False))
    finally:
        node.remove()
