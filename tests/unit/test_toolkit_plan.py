"""Plan tests of the toolkit stage for every family (pyinfra's @fake connector)."""

from __future__ import annotations

import os

import pytest
from plan import DEFAULT, file_digests_lines, gpu_node, node_lines, run_deploy, run_plan, settings_for
from test_download import apt_guard, run_shell, served  # noqa: F401 (fixtures)

from deploy.distros.families import detect_platform
from deploy.facts.files import FileDigests
from deploy.facts.packages import RpmPackageStates
from deploy.operations.download import source_read
from deploy.operations.packages import deb_states_read
from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES, toolkit

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

# What the nodes do not state (the packages pyinfra's package operations find installed, the
# toolkit's files and packages unless a test states them) reads as nothing: the facts' defaults.


# RpmPackageStates' read of the toolkit's packages (deploy/operations/packages.py)
RPM_STATES = (RpmPackageStates, {"packages": sorted(TOOLKIT_PACKAGES)})


def platform(distro_id: str, arch: str = "x86_64"):
    return detect_platform({"name": distro_id, "major": None, "release_meta": {"ID": distro_id}}, arch)


def test_debian_adds_a_signed_by_source_downloads_the_key_and_installs_and_holds_the_pinned_four():
    settings = settings_for(nvidia_toolkit_version="1.17.8-1")
    plan = run_plan(toolkit, settings, platform("debian"), unstated=DEFAULT)
    fetches = plan.matching("curl -fsSL")
    assert len(fetches) == 1 and "https://nvidia.github.io/libnvidia-container/gpgkey" in fetches[0]
    assert APT_KEYRING in fetches[0]
    assert plan.ran(APT_SOURCE)
    assert plan.ran("apt-get update")
    install = plan.matching(" install ")[-1]
    for name in TOOLKIT_PACKAGES:
        assert f"{name}=1.17.8-1" in install
    assert "--allow-change-held-packages" in install
    hold = plan.matching("apt-mark hold")
    assert hold and all(name in hold[0] for name in TOOLKIT_PACKAGES)
    assert not plan.ran("apt-key"), "apt-key is deprecated: the key goes to a signed-by keyring"
    assert not plan.ran("trusted=yes")


def test_debian_source_line_uses_signed_by_and_nvidias_flat_layout():
    from deploy.tasks.toolkit import apt_source_text

    text = apt_source_text(settings_for(), platform("debian"))
    assert f"deb [signed-by={APT_KEYRING}] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /" in text


def test_debian_with_everything_installed_and_held_changes_nothing_and_skips_apt_update():
    states = "\n".join(f"{name} 1.17.8-1 hold ok installed" for name in TOOLKIT_PACKAGES)
    settings = settings_for(nvidia_toolkit_version="1.17.8-1")
    plan = run_plan(
        toolkit,
        settings,
        platform("debian"),
        facts=[
            (
                deb_states_read(TOOLKIT_PACKAGES),
                states + "\ncurl 7.88.1-10 install ok installed\nca-certificates 20230311 install ok installed",
            ),
            *_source_and_key_present(settings),
        ],
        unstated=DEFAULT,
    )
    assert not plan.ran("apt-get update")
    assert not plan.ran("apt-get install")
    assert not plan.ran("apt-mark hold")


def test_unpinned_toolkit_is_installed_without_a_hold():
    plan = run_plan(toolkit, settings_for(), platform("ubuntu"), unstated=DEFAULT)
    install = plan.matching(" install ")[-1]
    assert "nvidia-container-toolkit " in install + " "
    packages = install.split(" --allow-downgrades ", 1)[1]
    assert "=" not in packages and "nvidia-container-toolkit" in packages
    assert not plan.ran("apt-mark hold")


@pytest.mark.parametrize("family_id", ["rocky", "fedora", "amzn"])
def test_dnf_families_get_nvidias_repo_file_pinned_packages_and_versionlock(family_id):
    plan = run_plan(toolkit, settings_for(nvidia_toolkit_version="1.17.8-1"), platform(family_id), unstated=DEFAULT)
    install = plan.matching("dnf install")
    assert install, plan.commands
    for name in TOOLKIT_PACKAGES:
        assert f"{name}-1.17.8-1" in install[0]
    assert plan.ran("dnf versionlock add")


def test_rpm_repo_file_checks_the_repository_signature():
    from deploy.tasks.toolkit import rpm_repo_text

    text = rpm_repo_text(settings_for(), platform("rocky"))
    assert "baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch" in text
    assert "repo_gpgcheck=1" in text
    # dnf reads the checked copy of NVIDIA's key, never the URL (which dnf -y would import unchecked)
    assert "gpgkey=file:///etc/pki/rpm-gpg/gpu-node-nvidia-container-toolkit.asc" in text
    assert (
        "# signing key: https://nvidia.github.io/libnvidia-container/gpgkey (C95B321B61E88C1809C4F759DDCAE044F796ECB0)"
        in text
    )
    # NVIDIA's install guide: curl ... | sudo tee /etc/yum.repos.d/nvidia-container-toolkit.repo
    plan = run_plan(toolkit, settings_for(), platform("rocky"), unstated=DEFAULT)
    assert plan.ran("/etc/yum.repos.d/nvidia-container-toolkit.repo"), plan.commands


def test_opensuse_installs_with_zypper_and_locks_a_pin():
    plan = run_plan(
        toolkit, settings_for(nvidia_toolkit_version="1.17.8-1"), platform("opensuse-leap"), unstated=DEFAULT
    )
    install = plan.matching("zypper")
    assert any("install" in command and "nvidia-container-toolkit=1.17.8-1" in command for command in install)
    assert plan.ran("zypper --non-interactive addlock")


def test_arch_installs_the_distro_package_and_refuses_a_pin():
    plan = run_plan(toolkit, settings_for(), platform("arch"), unstated=DEFAULT)
    assert plan.ran("pacman") and plan.matching("nvidia-container-toolkit")
    with pytest.raises(Exception, match="cannot be pinned"):
        run_plan(toolkit, settings_for(nvidia_toolkit_version="1.17.8-1"), platform("arch"), unstated=DEFAULT)


def test_a_mirror_replaces_nvidias_urls():
    settings = settings_for(
        nvidia_toolkit_repo_url="https://mirror.example.internal/nvidia/stable",
        nvidia_toolkit_gpgkey_url="https://mirror.example.internal/nvidia/gpgkey",
    )
    plan = run_plan(toolkit, settings, platform("debian"), unstated=DEFAULT)
    assert "https://mirror.example.internal/nvidia/gpgkey" in plan.matching("curl -fsSL")[0]
    assert not plan.ran("nvidia.github.io")


def test_dnf_moving_a_locked_pin_releases_the_lock_installs_and_locks_again():
    installed = "\n".join(f"installed {name} 1.17.7-1" for name in TOOLKIT_PACKAGES)
    locks = "\n".join(f"lock {name}-0:1.17.7-1.*" for name in TOOLKIT_PACKAGES)
    plan = run_plan(
        toolkit,
        settings_for(nvidia_toolkit_version="1.17.8-1"),
        platform("rocky"),
        facts=[(RPM_STATES, installed + "\n" + locks)],
        unstated=DEFAULT,
    )
    delete = plan.matching("dnf versionlock delete")
    install = plan.matching("dnf install")
    add = plan.matching("dnf versionlock add")
    assert delete and install and add
    assert plan.commands.index(delete[0]) < plan.commands.index(install[0]) < plan.commands.index(add[0])
    assert all(name in add[0] for name in TOOLKIT_PACKAGES)


def test_dnf_locked_at_the_pin_does_nothing():
    installed = "\n".join(f"installed {name} 1.17.8-1" for name in TOOLKIT_PACKAGES)
    locks = "\n".join(f"lock {name}-0:1.17.8-1.*" for name in TOOLKIT_PACKAGES)
    plan = run_plan(
        toolkit,
        settings_for(nvidia_toolkit_version="1.17.8-1"),
        platform("rocky"),
        facts=[(RPM_STATES, installed + "\n" + locks)],
        unstated=DEFAULT,
    )
    assert not plan.ran("dnf install") and not plan.starting("dnf versionlock")


def _source_and_key_present(settings, key_present=True, source_text=None):
    import hashlib

    from deploy.tasks.toolkit import apt_source_text

    text = source_text if source_text is not None else apt_source_text(settings, platform("debian"))
    digest = hashlib.sha256(text.encode()).hexdigest()
    key = ["644 root:root", f"{'0' * 64}  {APT_KEYRING}"] if key_present else "absent"
    lines = file_digests_lines({APT_SOURCE: ["644 root:root", f"{digest}  {APT_SOURCE}"], APT_KEYRING: key})
    return [(source_read(APT_SOURCE, APT_KEYRING), lines)]


def test_source_and_key_in_place_cost_one_read_and_fetch_nothing():
    settings = settings_for()
    plan = run_plan(toolkit, settings, platform("debian"), facts=_source_and_key_present(settings), unstated=DEFAULT)
    assert not plan.ran("download-file") and not plan.starting("chown root:root")
    assert plan.commands.count(FileDigests().command([APT_SOURCE, APT_KEYRING])) == 1


def test_a_missing_key_is_fetched_though_the_source_is_unchanged():
    settings = settings_for()
    plan = run_plan(
        toolkit,
        settings,
        platform("debian"),
        facts=_source_and_key_present(settings, key_present=False),
        unstated=DEFAULT,
    )
    assert len(plan.matching("apt-helper")) == 1
    assert plan.matching(f"mv -f {APT_KEYRING}.gpu-node-new {APT_KEYRING}")


def test_a_changed_key_url_rewrites_the_source_and_fetches_the_key_again():
    old = settings_for(nvidia_toolkit_gpgkey_url="https://old-mirror.example.internal/gpgkey")
    from deploy.tasks.toolkit import apt_source_text

    new = settings_for()
    plan = run_plan(
        toolkit,
        new,
        platform("debian"),
        facts=_source_and_key_present(new, source_text=apt_source_text(old, platform("debian"))),
        unstated=DEFAULT,
    )
    fetch = plan.matching("download-file")
    assert len(fetch) == 1 and "https://nvidia.github.io/libnvidia-container/gpgkey" in fetch[0]
    assert plan.matching(f"mv -f {APT_SOURCE}.gpu-node-new {APT_SOURCE}")


def test_dnf_a_pin_without_its_release_matches_the_installed_release():
    """A driver pinned as 550.54.15 is installed as 550.54.15-1.el9: nothing to do, no lock moved
    (found by the Rocky 9 node running the real dnf, tests/e2e/test_family_dnf.py)."""
    installed = "\n".join(f"installed {name} 1.17.8-1.el9" for name in TOOLKIT_PACKAGES)
    locks = "\n".join(f"lock {name}-0:1.17.8-1.el9.*" for name in TOOLKIT_PACKAGES)
    plan = run_plan(
        toolkit,
        settings_for(nvidia_toolkit_version="1.17.8"),
        platform("rocky"),
        facts=[(RPM_STATES, installed + "\n" + locks)],
        unstated=DEFAULT,
    )
    assert not plan.ran("dnf install") and not plan.starting("dnf versionlock")
    moved = run_plan(
        toolkit,
        settings_for(nvidia_toolkit_version="1.17.9"),
        platform("rocky"),
        facts=[(RPM_STATES, installed + "\n" + locks)],
        unstated=DEFAULT,
    )
    assert moved.ran("dnf install")


def test_dnf_checks_the_repository_file_before_it_goes_where_dnf_reads_it():
    """A repository dnf refuses must not stay in /etc/yum.repos.d: every later dnf command would fail
    on it (found by the Rocky 9 node, tests/e2e/test_family_dnf.py)."""
    plan = run_plan(toolkit, settings_for(nvidia_toolkit_version="1.17.8-1"), platform("rocky"), unstated=DEFAULT)
    (check,) = plan.matching("makecache")
    (swap,) = plan.matching("mv -f /etc/yum.repos.d/nvidia-container-toolkit.repo")
    assert plan.commands.index(check) < plan.commands.index(swap)
    assert "--setopt=reposdir=" in check and "if ! (" in check and "xargs -r rpm -e; exit 1; fi" in check


def test_a_changed_pin_checks_the_key_again():
    """A mirror's new key (or NVIDIA's rotated one) is pinned: the key in place was checked against the
    old pin, so the source changes and the key is fetched and checked again."""
    from deploy.tasks.toolkit import apt_source_text

    new = settings_for(nvidia_toolkit_gpgkey_fingerprint="A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699")
    plan = run_plan(
        toolkit,
        new,
        platform("debian"),
        facts=_source_and_key_present(new, source_text=apt_source_text(settings_for(), platform("debian"))),
        unstated=DEFAULT,
    )
    (fetch,) = plan.matching("download-file")
    assert 'case " A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699 " in' in fetch


def test_through_the_toolkit_stage_a_key_whose_fingerprint_is_not_pinned_is_refused(served, apt_guard, tmp_path):  # noqa: F811 (the fixtures)
    """The toolkit stage's own command for a new source, run for real (real gpg; its key URL pointed
    at the key served on 127.0.0.1, tests/unit/test_download.py, and its paths under tmp_path;
    apt-get a guard that fails): a key other than the one nvidia_toolkit_gpgkey_fingerprint pins
    stops it in one line, before apt is asked to trust it."""
    url, key, other = served
    key_url = "https://keys.example.invalid/other"
    plan = run_plan(
        toolkit,
        settings_for(nvidia_toolkit_gpgkey_url=key_url, nvidia_toolkit_gpgkey_fingerprint=key.fingerprint),
        platform("debian"),
        unstated=DEFAULT,
    )
    (command,) = [command for command in plan.commands if "stage=$(mktemp -d)" in command]
    script = (
        command.replace(key_url, f"{url}/other")
        .replace(APT_SOURCE, str(tmp_path / "toolkit.list"))
        .replace(APT_KEYRING, str(tmp_path / "key.asc"))
    )
    result = run_shell(script, env={"PATH": f"{apt_guard}:{os.environ['PATH']}"})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"refusing the signing key from {url}/other: its fingerprint is {other.fingerprint}; "
        f"{key.fingerprint} is pinned (nvidia_toolkit_gpgkey_fingerprint)"
    )
    assert not (apt_guard / "called").exists(), "apt was asked to use the key"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["guard"]


def test_through_the_deploy_a_pin_arch_cannot_honour_is_refused_in_preflight_before_the_kernel_stage():
    """deploy/gpu_node.py with the kernel and toolkit stages on Arch, whose toolkit is the distribution's
    one current package: nvidia_toolkit_version fails the host in preflight, so not even the kernel
    stage (which runs first) changes anything."""
    run = run_deploy(
        gpu_node("arch", node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"]), unstated=DEFAULT),
        data={"stages": "kernel,toolkit", "nvidia_toolkit_version": "1.17.8-1"},
    )
    assert run.refusal.startswith("nvidia_toolkit_version='1.17.8-1' cannot be pinned on arch"), run.failures
    assert [name for name in run.op_names() if not name.startswith(("Preflight", "Refuse this host"))] == []
