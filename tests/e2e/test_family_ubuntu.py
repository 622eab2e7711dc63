"""
The Ubuntu family run by its real package manager: Ubuntu 22.04 and 24.04 nodes (tests/family_apt.py:
the bookworm node image with Ubuntu's os-release and apt sources file; apt is Debian's, the same apt
Ubuntu runs) takes the driver and toolkit stages through pyinfra's default mode and then with
``-y``, from a local signed archive with Ubuntu's layout on 127.0.0.1 holding STAND-IN debs under
the real names and versions of Ubuntu's ``nvidia-graphics-drivers-550-server`` packages, and the
STAND-IN toolkit repository (tests/standin_toolkit.py). ``ubuntu-drivers`` is a STAND-IN answering
``list --gpgpu`` in the real tool's format.

apt, gpgv's signature checks, apt-mark holds and systemd are real; the packages are stand-ins (no
driver is built or loaded). Ubuntu's sources point at the local archive and its real hosts resolve
to 127.0.0.1 on the node, so nothing leaves this machine.

What the run shows wrong in the deploy is marked ``xfail(strict=True)`` with the finding.
"""

from __future__ import annotations

import family_apt
import pytest
import standin_toolkit
from family_apt import BRANCH, JAMMY, NOBLE, OLDER_UPSTREAM, PINNED_UPSTREAM, UPDATE_UPSTREAM
from family_images import family_node
from harness import assert_no_change, ensure_docker

from deploy.distros.families import UBUNTU_DRIVER
from deploy.planning.driver_plan import detect_branch
from deploy.tasks.toolkit import TOOLKIT_PACKAGES

PINNED_TOOLKIT = standin_toolkit.VERSIONS[1]  # 1.17.8-1, while 1.20.0-1 is offered
DRIVER_PACKAGES = (f"nvidia-headless-{BRANCH}-server", f"nvidia-utils-{BRANCH}-server", f"nvidia-dkms-{BRANCH}-server")
PERSISTENCED_PACKAGE = f"nvidia-compute-utils-{BRANCH}-server"
OPEN_PACKAGES = (f"nvidia-headless-{BRANCH}-server-open", f"nvidia-dkms-{BRANCH}-server-open")


@pytest.fixture(scope="module", params=[JAMMY, NOBLE], ids=["ubuntu2204", "ubuntu2404"])
def archive(request, tmp_path_factory):
    """The local archive of one Ubuntu release (22.04, 24.04), served on 127.0.0.1."""
    ensure_docker()
    with family_apt.served(request.param, tmp_path_factory.mktemp("ubuntu-archive") / "root") as served:
        yield served


@pytest.fixture(scope="module")
def toolkit_repo(tmp_path_factory):
    with standin_toolkit.served(tmp_path_factory.mktemp("standin-toolkit") / "stable") as repo:
        yield repo


def start_node(archive, tampered: bool = False):
    node = family_node(archive.release.image()).start()
    archive.node_setup(node, tampered=tampered)
    return node


def recommended_branch(node) -> str | None:
    """The branch the deploy's own pattern finds in the stand-in ubuntu-drivers' answer (None: none)."""
    node.sh("apt-get update -qq")
    lines = node.sh("ubuntu-drivers list --gpgpu").stdout.splitlines()
    return detect_branch(UBUNTU_DRIVER.branch_detect, lines)


def settings_data(
    toolkit_repo,
    *,
    driver_version: str,
    branch: str | None,
    stages: str = "driver,toolkit",
    toolkit_base: str | None = None,
) -> dict:
    data = {
        "stages": stages,
        "nvidia_driver_version": driver_version,
        **toolkit_repo.data(version=PINNED_TOOLKIT, repo_url=toolkit_base),
    }
    if branch:
        data["nvidia_driver_branch"] = branch
    return data


def pinned(archive) -> str:
    """Ubuntu's version of the pinned driver in this release: 550.144.03-0ubuntu0.22.04.1."""
    return archive.release.driver_version(PINNED_UPSTREAM)


def installed(node, names) -> dict[str, str]:
    out = node.sh(
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n' " + " ".join(names) + " 2>/dev/null",
        check=False,
    ).stdout
    return {
        name: version for name, version, status in (line.split() for line in out.splitlines()) if status == "installed"
    }


def held(node) -> set[str]:
    return set(node.sh("apt-mark showhold").stdout.split())


@pytest.fixture(scope="module")
def deployed(archive, toolkit_repo):
    """One Ubuntu node (22.04, 24.04) after its first run of the driver and toolkit stages in pyinfra's default
    mode: (node, result, data). The branch is left to the deploy's detection when its pattern finds
    one in ubuntu-drivers' answer, else set (the finding of the detection test)."""
    node = start_node(archive)
    try:
        detected = recommended_branch(node)
        data = settings_data(toolkit_repo, driver_version=pinned(archive), branch=None if detected else BRANCH)
        yield node, node.deploy(data=data, default_mode=True, json_output=False), data
    finally:
        node.remove()


def test_ubuntu_apt_standin_driver_branch_detected_from_ubuntu_drivers_list_gpgpu(archive, toolkit_repo):
    """STAND-IN ubuntu-drivers answering in the real format and STAND-IN driver debs: with no
    nvidia_driver_branch and no driver installed, the run takes the branch ubuntu-drivers recommends
    (550) and installs its -server packages."""
    node = start_node(archive)
    try:
        answer = node.sh("apt-get update -qq && ubuntu-drivers list --gpgpu").stdout
        assert (
            f"nvidia-headless-no-dkms-{BRANCH}-server, (kernel modules provided by nvidia-dkms-{BRANCH}-server)"
            in answer.splitlines()
        ), answer
        result = node.deploy(
            data=settings_data(toolkit_repo, driver_version=pinned(archive), branch=None, stages="driver"),
            json_output=False,
        )
        assert "nvidia_driver_branch is required" not in result.output, result.output[-3000:]
        assert result.returncode == 0, result.explain()
        assert installed(node, DRIVER_PACKAGES) == {name: pinned(archive) for name in DRIVER_PACKAGES}
    finally:
        node.remove()


def test_ubuntu_apt_standin_driver_installed_at_its_pin_and_held_by_apt_mark(deployed, archive):
    """STAND-IN driver debs: the three -server packages of the proprietary module type (branch 550's
    default) at the pinned 550.144.03-0ubuntu0.22.04.1 (550.127.05-0ubuntu0.22.04.1 is offered too),
    each held with apt-mark; their exact-version dependencies (persistenced's
    nvidia-compute-utils-550-server) at the same version; linux-headers-generic (the machine's
    kernel has no Ubuntu headers); the open module type's packages not installed; nvidia-smi exits 9."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    assert installed(node, DRIVER_PACKAGES) == {name: pinned(archive) for name in DRIVER_PACKAGES}
    assert set(DRIVER_PACKAGES) <= held(node), held(node)
    assert installed(node, [PERSISTENCED_PACKAGE, f"nvidia-headless-no-dkms-{BRANCH}-server"]) == {
        PERSISTENCED_PACKAGE: pinned(archive),
        f"nvidia-headless-no-dkms-{BRANCH}-server": pinned(archive),
    }
    assert installed(node, OPEN_PACKAGES) == {}
    assert "linux-headers-generic" in installed(node, ["linux-headers-generic"])
    assert node.sh("systemctl is-enabled nvidia-persistenced.service", check=False).stdout.strip() == "enabled"
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode == 9 and f"STAND-IN {PINNED_UPSTREAM}" in smi.stderr, smi


def test_ubuntu_apt_standin_driver_pinned_to_an_older_release_than_the_lists_newest_installs_it(archive, toolkit_repo):
    """STAND-IN driver debs with Ubuntu's exact-version dependencies: pinned to 550.127.05-0ubuntu0.22.04.1
    while 550.144.03-0ubuntu0.22.04.1 is the candidate, with -y: every package of the driver at the pin."""
    node = start_node(archive)
    try:
        older = archive.release.driver_version(OLDER_UPSTREAM)
        result = node.deploy(
            data=settings_data(toolkit_repo, driver_version=older, branch=BRANCH, stages="driver"), json_output=False
        )
        assert "held broken packages" not in result.output, result.output[-3000:]
        assert result.returncode == 0, result.explain()
        assert installed(node, [*DRIVER_PACKAGES, PERSISTENCED_PACKAGE]) == {
            name: older for name in [*DRIVER_PACKAGES, PERSISTENCED_PACKAGE]
        }
    finally:
        node.remove()


def test_ubuntu_apt_standin_toolkit_installed_at_its_pin_and_held_by_apt_mark(deployed):
    """STAND-IN toolkit debs: all four at the pinned 1.17.8-1 although 1.20.0-1 is offered, held."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    assert installed(node, TOOLKIT_PACKAGES) == {name: PINNED_TOOLKIT for name in TOOLKIT_PACKAGES}
    assert set(TOOLKIT_PACKAGES) <= held(node), held(node)
    assert node.sh("dpkg-query -W -f '${Description}' nvidia-container-toolkit").stdout.startswith("STAND-IN")


def test_ubuntu_apt_standin_packages_stay_at_their_pins_through_a_plain_apt_get_upgrade(deployed, archive):
    """STAND-IN packages: once a newer driver (550.163.01-0ubuntu0.22.04.1) is published in
    <release>-updates, the node's own `apt-get update && apt-get upgrade` is offered it (and the toolkit's
    1.20.0-1) and leaves every package of the driver and toolkit where it was."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    update = archive.publish_driver(UPDATE_UPSTREAM)
    names = [
        *DRIVER_PACKAGES,
        PERSISTENCED_PACKAGE,
        f"nvidia-headless-no-dkms-{BRANCH}-server",
        f"libnvidia-compute-{BRANCH}-server",
        f"nvidia-kernel-common-{BRANCH}-server",
        *TOOLKIT_PACKAGES,
    ]
    before = installed(node, names)
    refresh = node.sh("apt-get update -q --error-on=any", check=False)
    assert refresh.returncode == 0, refresh.stdout + refresh.stderr
    policy = node.sh(f"apt-cache policy nvidia-utils-{BRANCH}-server nvidia-container-toolkit").stdout
    # Offered (the driver's apt preference keeps its candidate at the pin; the hold keeps the toolkit)
    assert f"     {update} 500" in policy and f"Candidate: {standin_toolkit.NEWEST}" in policy, policy
    upgrade = node.sh("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade", check=False)
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert installed(node, names) == before


def test_ubuntu_apt_standin_second_run_with_y_changes_nothing(deployed):
    """STAND-IN packages: the same settings again, with -y: nothing changes."""
    node, first, data = deployed
    assert first.returncode == 0, first.explain()
    assert_no_change(node.deploy(data=data, json_output=False))


PROPRIETARY_MODULE_PACKAGES = (f"nvidia-headless-{BRANCH}-server", f"nvidia-dkms-{BRANCH}-server")


def open_node(archive, toolkit_repo):
    """A node after a -y run with nvidia_kernel_modules=open: (node, its settings without the module type)."""
    node = start_node(archive)
    data = settings_data(toolkit_repo, driver_version=pinned(archive), branch=BRANCH, stages="driver")
    opened = node.deploy(data={**data, "nvidia_kernel_modules": "open"}, json_output=False)
    assert opened.returncode == 0, opened.explain()
    return node, data


def test_ubuntu_apt_standin_open_module_type_installed_at_its_pin_held_and_rerun_unchanged(archive, toolkit_repo):
    """STAND-IN driver debs of both module types, with -y: nvidia_kernel_modules=open installs the -open
    headless and dkms packages at the pin and holds them, no proprietary module package; a re-run
    changes nothing. apt and apt-mark are real; no module is built (stand-in packages)."""
    node, data = open_node(archive, toolkit_repo)
    try:
        assert installed(node, OPEN_PACKAGES) == {name: pinned(archive) for name in OPEN_PACKAGES}
        assert installed(node, PROPRIETARY_MODULE_PACKAGES) == {}
        assert set(OPEN_PACKAGES) <= held(node), held(node)
        assert_no_change(node.deploy(data={**data, "nvidia_kernel_modules": "open"}, json_output=False))
    finally:
        node.remove()


def test_ubuntu_apt_standin_open_node_switched_to_proprietary_replaces_the_packages_and_moves_the_holds(
    archive, toolkit_repo
):
    """STAND-IN driver debs of both module types, with -y, on an open node: switching to proprietary
    replaces the module packages in one transaction, moves the holds, reports "reboot required", and
    a re-run changes nothing."""
    node, data = open_node(archive, toolkit_repo)
    try:
        switched = node.deploy(data={**data, "nvidia_kernel_modules": "proprietary"}, json_output=False)
        assert switched.returncode == 0, switched.explain()
        assert installed(node, PROPRIETARY_MODULE_PACKAGES) == {
            name: pinned(archive) for name in PROPRIETARY_MODULE_PACKAGES
        }
        assert installed(node, OPEN_PACKAGES) == {}
        now_held = held(node)
        assert set(PROPRIETARY_MODULE_PACKAGES) <= now_held and not set(OPEN_PACKAGES) & now_held, now_held
        assert "reboot required: the NVIDIA driver changed (" in switched.output, switched.output[-3000:]
        assert_no_change(node.deploy(data={**data, "nvidia_kernel_modules": "proprietary"}, json_output=False))
    finally:
        node.remove()


def refusal_lines(output: str, says: str) -> list[str]:
    return [line for line in output.splitlines() if says in line]


def test_ubuntu_apt_standin_toolkit_repository_whose_signature_does_not_verify_is_refused_and_nothing_installed(
    archive, toolkit_repo
):
    """STAND-IN toolkit repository whose InRelease was altered after signing, with -y: the run fails
    with one line naming the bad signature; no toolkit package is in, no source is left."""
    node = start_node(archive)
    try:
        base = f"{toolkit_repo.url}/{standin_toolkit.TAMPERED}"
        refused = node.deploy(
            data=settings_data(
                toolkit_repo, driver_version=pinned(archive), branch=BRANCH, stages="toolkit", toolkit_base=base
            ),
            json_output=False,
        )
        assert refused.returncode != 0, refused.explain()
        assert len(refusal_lines(refused.run_output, "BADSIG")) == 1, refused.output[-4000:]
        assert "Traceback" not in refused.output
        assert installed(node, TOOLKIT_PACKAGES) == {}
        assert node.sh("apt-get update -q --error-on=any", check=False).returncode == 0
    finally:
        node.remove()


@pytest.fixture(scope="module")
def archive_refused(archive, toolkit_repo):
    """A node whose Ubuntu sources point at the archive copy whose <release>-updates InRelease was altered
    after signing, after a -y run of the driver stage: (node, result)."""
    node = start_node(archive, tampered=True)
    try:
        yield (
            node,
            node.deploy(
                data=settings_data(toolkit_repo, driver_version=pinned(archive), branch=BRANCH, stages="driver"),
                json_output=False,
            ),
        )
    finally:
        node.remove()


def test_ubuntu_apt_standin_archive_whose_signature_does_not_verify_fails_the_run_and_no_driver_installed(
    archive_refused,
):
    """STAND-IN Ubuntu archive whose -updates InRelease was altered after signing (the node's own
    sources name it), with -y: the driver stage fails, apt names the bad signature, and none of the
    driver's packages is installed."""
    node, refused = archive_refused
    assert refused.returncode != 0, refused.explain()
    assert "BADSIG" in refused.output, refused.output[-4000:]
    assert "Traceback" not in refused.output
    assert installed(node, [*DRIVER_PACKAGES, PERSISTENCED_PACKAGE, *OPEN_PACKAGES]) == {}


def test_ubuntu_apt_standin_archive_whose_signature_does_not_verify_is_refused_with_one_line(archive_refused):
    """STAND-IN Ubuntu archive whose signature does not verify: the run says so in one gpu-node: line
    naming the bad signature (as the toolkit's repository refusal does)."""
    node, refused = archive_refused
    assert refused.returncode != 0, refused.explain()
    said = refusal_lines(refused.run_output, "gpu-node:")
    assert len(said) == 1 and ("BADSIG" in said[0] or "is not signed" in said[0]), refused.output[-4000:]
    assert len(refusal_lines(refused.run_output, "BADSIG")) == 1, refused.output[-4000:]
