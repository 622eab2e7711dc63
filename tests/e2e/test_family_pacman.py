"""
The Arch family run by its real package manager: an Arch node (tests/family_pacman.py: Debian's
pacman 6.0.2 with pacman-key's keyring, Arch's os-release and a pacman.conf whose ``core`` and
``extra`` repositories say ``SigLevel = Required DatabaseRequired``) takes the kernel, driver and
toolkit stages through pyinfra's default mode and then with ``-y``, from local signed repositories
on 127.0.0.1 holding STAND-IN packages under Arch's real names, built with the real makepkg and
indexed with repo-add --sign.

pacman, its database and package signature checks, IgnorePkg and ``pacman -Syu`` are real; the
packages are stand-ins (no driver is built or loaded). The node's kernel is the machine's: each node
gets ``/usr/lib/modules/$(uname -r)/pkgbase`` saying ``linux`` when it starts, so the driver stage
picks Arch's prebuilt module package for the ``linux`` kernel (``nvidia``). Arch ships the toolkit
in its own repository (no repository is added) and pacman cannot pin: nothing is pinned, the driver
is held with IgnorePkg. Arch's mirror and key server hosts resolve to 127.0.0.1 on the node.

What the run shows wrong in the commands is marked ``xfail(strict=True)`` with the finding.
"""

from __future__ import annotations

import family_pacman
import pytest
from harness import assert_no_change, ensure_docker

DRIVER_PACKAGES = ("nvidia-utils", "nvidia")  # ARCH_DRIVER for pkgbase linux, proprietary modules
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "libnvidia-container")
DATA = {"stages": "kernel,driver,toolkit"}  # no versions: pacman installs the repository's


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    ensure_docker()
    with family_pacman.served(tmp_path_factory.mktemp("pacman-repos") / "root") as served:
        yield served


def start_arch_node(repos, tree: str = "main"):
    node = family_pacman.arch_node().start()
    try:
        repos.node_setup(node, tree)
    except BaseException:
        node.remove()
        raise
    return node


def installed(node, names) -> dict[str, str]:
    out = node.sh("pacman -Q " + " ".join(names) + " 2>/dev/null", check=False).stdout
    return dict(line.split() for line in out.splitlines())


def ignored(node) -> list[str]:
    """IgnorePkg of pacman.conf as pacman itself reads it."""
    return node.sh("pacman-conf IgnorePkg").stdout.split()


@pytest.fixture(scope="module")
def deployed(repos):
    """One Arch node after its first run, in pyinfra's default mode: (node, result)."""
    node = start_arch_node(repos)
    try:
        yield node, node.deploy(data=DATA, default_mode=True, json_output=False)
    finally:
        node.remove()


def test_arch_pacman_standin_packages_node_checks_database_and_package_signatures(deployed, repos):
    """STAND-IN repositories: pacman reads both repositories with signatures required on the
    databases and the packages, from the node's one mirror on 127.0.0.1, and trusts the key that
    signed them through pacman-key's keyring (locally signed)."""
    node, first = deployed
    assert first.returncode == 0, first.explain()
    for repo in ("core", "extra"):
        levels = node.sh(f"pacman-conf --repo {repo} SigLevel").stdout.split()
        assert {"PackageRequired", "DatabaseRequired"} <= set(levels), levels
        assert node.sh(f"pacman-conf --repo {repo} Server").stdout.strip() == repos.mirror("main").replace(
            "$repo", repo
        ).replace("$arch", family_pacman.ARCH)
    # the signer's user id is fully valid in pacman's keyring (locally signed by its master key)
    listing = node.sh(f"gpg --homedir /etc/pacman.d/gnupg --with-colons --list-keys {repos.key.fingerprint}").stdout
    assert any(line.startswith("uid:f:") for line in listing.splitlines()), listing


def test_arch_pacman_standin_driver_for_the_linux_pkgbase_installed_and_held_with_ignorepkg(deployed):
    """STAND-IN driver packages: the node's kernel pkgbase is ``linux`` (written at node start), so
    the userspace and Arch's prebuilt module package for that kernel come in (not DKMS, not the open
    modules), at the repository's version; both are in IgnorePkg; nvidia-persistenced (nvidia-utils
    carries it) is enabled; the stand-in nvidia-smi exits 9 as on a node without a driver."""
    node, first = deployed
    assert first.returncode == 0, first.explain()
    version = family_pacman.DRIVER_VERSION
    assert installed(node, DRIVER_PACKAGES) == {name: version for name in DRIVER_PACKAGES}
    assert installed(node, ["nvidia-dkms", "nvidia-open", "nvidia-open-dkms", "linux-headers", "dkms"]) == {}
    assert set(DRIVER_PACKAGES) <= set(ignored(node)), ignored(node)
    assert node.sh("systemctl is-enabled nvidia-persistenced.service").stdout.strip() == "enabled"
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode == 9 and f"STAND-IN {version.rsplit('-', 1)[0]}" in smi.stderr, smi


def test_arch_pacman_standin_toolkit_from_archs_own_repository_unpinned_and_unheld(deployed):
    """STAND-IN toolkit: Arch's nvidia-container-toolkit (and its libnvidia-container) from the
    ``extra`` repository at its version; no repository file is added; it is not held (the toolkit is
    held only when pinned, and pacman cannot pin)."""
    node, first = deployed
    assert first.returncode == 0, first.explain()
    version = family_pacman.TOOLKIT_VERSION
    assert installed(node, TOOLKIT_PACKAGES) == {name: version for name in TOOLKIT_PACKAGES}
    assert node.sh("nvidia-ctk --version").stdout.startswith(
        f"NVIDIA Container Toolkit CLI version {version.split('-')[0]}"
    )
    assert node.sh("pacman -Qi nvidia-container-toolkit").stdout.count("STAND-IN") == 1
    assert not set(TOOLKIT_PACKAGES) & set(ignored(node))


def test_arch_pacman_standin_second_run_with_y_changes_nothing(deployed):
    """STAND-IN packages: the same settings again, with -y: nothing changes (IgnorePkg is not added twice)."""
    node, first = deployed
    assert first.returncode == 0, first.explain()
    before = node.read("/etc/pacman.conf")
    assert_no_change(node.deploy(data=DATA, json_output=False))
    assert node.read("/etc/pacman.conf") == before


def test_arch_pacman_standin_plain_pacman_syu_leaves_the_held_driver(deployed, repos):
    """STAND-IN packages: once the mirror has moved on (driver 550.90.07-1, toolkit 1.20.0-1), the
    node's own `pacman -Syu` upgrades what is not held (the toolkit) and leaves the driver in IgnorePkg."""
    node, first = deployed
    assert first.returncode == 0, first.explain()
    repos.point(node, "moved")
    upgrade = node.sh("pacman --noconfirm -Syu 2>&1", check=False)
    assert upgrade.returncode == 0, upgrade.stdout
    assert (
        f"ignoring package upgrade ({family_pacman.DRIVER_VERSION} => {family_pacman.DRIVER_UPDATE})" in upgrade.stdout
    ), upgrade.stdout
    assert installed(node, DRIVER_PACKAGES) == {name: family_pacman.DRIVER_VERSION for name in DRIVER_PACKAGES}
    assert installed(node, TOOLKIT_PACKAGES) == {name: family_pacman.TOOLKIT_UPDATE for name in TOOLKIT_PACKAGES}


def test_arch_pacman_standin_undo_takes_the_driver_out_of_ignorepkg(deployed):
    """deploy/undo.py on the deployed node (its last use here): IgnorePkg no longer holds the driver's
    packages; the STAND-IN packages stay (undo_remove_packages is false)."""
    node, first = deployed
    assert first.returncode == 0, first.explain()
    undone = node.deploy(deploy_file="deploy/undo.py", json_output=False)
    assert undone.returncode == 0, undone.explain()
    assert not set(DRIVER_PACKAGES) & set(ignored(node)), ignored(node)
    assert set(installed(node, DRIVER_PACKAGES)) == set(DRIVER_PACKAGES)


def test_arch_pacman_standin_first_run_after_the_mirror_moved_on_installs_its_current_driver(repos):
    """STAND-IN packages: a node whose databases were synced before its mirror moved on (the usual
    state of an Arch node) gets the driver and toolkit the mirror has now, with -y."""
    node = start_arch_node(repos)
    try:
        repos.point(node, "moved")
        result = node.deploy(data=DATA, json_output=False)
        assert result.returncode == 0, result.explain()
        assert installed(node, DRIVER_PACKAGES) == {name: family_pacman.DRIVER_UPDATE for name in DRIVER_PACKAGES}
    finally:
        node.remove()


def test_arch_pacman_standin_package_whose_signature_does_not_verify_is_refused_and_nothing_installed(repos):
    """STAND-IN ``extra`` repository whose nvidia-container-toolkit package was rebuilt after signing
    (its signature no longer verifies; the signed database names the new file), with -y: pacman
    refuses it with one line naming the package and the bad signature, and installs nothing."""
    node = start_arch_node(repos, "tampered")
    try:
        refused = node.deploy(data={"stages": "toolkit"}, json_output=False)
        assert refused.returncode != 0, refused.explain()
        refusal = [
            line for line in refused.run_output.splitlines() if "signature from" in line and "is invalid" in line
        ]
        assert len(refusal) == 1 and "nvidia-container-toolkit" in refusal[0], refused.explain()
        assert "Traceback" not in refused.output
        assert installed(node, TOOLKIT_PACKAGES) == {}
    finally:
        node.remove()


def test_arch_pacman_standin_open_kernel_modules_for_the_linux_pkgbase_installed_and_held(repos):
    """STAND-IN driver packages, nvidia_kernel_modules=open with -y: Arch's prebuilt open module
    package for the ``linux`` kernel (``nvidia-open``) with the userspace, both in IgnorePkg; the
    proprietary ``nvidia`` (which conflicts with it) is not installed."""
    node = start_arch_node(repos)
    try:
        result = node.deploy(data={"stages": "driver", "nvidia_kernel_modules": "open"}, json_output=False)
        assert result.returncode == 0, result.explain()
        version = family_pacman.DRIVER_VERSION
        assert installed(node, ["nvidia-utils", "nvidia-open", "nvidia"]) == {
            "nvidia-utils": version,
            "nvidia-open": version,
        }
        assert {"nvidia-utils", "nvidia-open"} <= set(ignored(node)), ignored(node)
    finally:
        node.remove()


def test_arch_pacman_standin_open_node_switched_to_proprietary_replaces_the_module_and_moves_ignorepkg(repos):
    """STAND-IN driver packages, with -y, on an open node: switching to proprietary removes nvidia-open
    (pacman -Rdd, after the bounded wait for pacman's lock), installs nvidia, moves IgnorePkg with it,
    and a re-run changes nothing."""
    node = start_arch_node(repos)
    try:
        opened = node.deploy(data={"stages": "driver", "nvidia_kernel_modules": "open"}, json_output=False)
        assert opened.returncode == 0, opened.explain()
        data = {"stages": "driver", "nvidia_kernel_modules": "proprietary"}
        switched = node.deploy(data=data, json_output=False)
        assert switched.returncode == 0, switched.explain()
        version = family_pacman.DRIVER_VERSION
        assert installed(node, ["nvidia-utils", "nvidia-open", "nvidia"]) == {
            "nvidia-utils": version,
            "nvidia": version,
        }
        now_ignored = set(ignored(node))
        assert {"nvidia-utils", "nvidia"} <= now_ignored and "nvidia-open" not in now_ignored, now_ignored
        assert_no_change(node.deploy(data=data, json_output=False))
    finally:
        node.remove()
