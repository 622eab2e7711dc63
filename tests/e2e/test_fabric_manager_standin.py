"""
Fabric Manager on NVSwitch nodes, end to end on bookworm node containers, with STAND-IN Fabric
Manager packages (tests/standin_fabricmanager.py: NVIDIA's package names, versions, paths and
unit name; our own content) from a local signed repository laid out like NVIDIA's CUDA repository
and pointed at with ``nvidia_cuda_repo_url``. The driver is Debian's real one (535.261.03). Its kernel
module is not the subject here: after the open-module file in one pytest (tests/shards.py SAME_SHARD),
the node's DKMS loads the module that file's DKMS built for the same kernel (DKMS's prebuilt-module
tarball, tests/harness.py load_dkms_builds) instead of compiling it again; run alone, DKMS builds it.

A container cannot be given PCI devices: the node's PCI answer comes from our sysfs fixture of a
real topology (tests/fixtures/fabric/, written by tests/pci_tree.py) bind-mounted read-only over
``/sys/bus/pci/devices``, the folder NodeSurvey reads. Everything else (apt, signatures, pins,
holds, systemd) is real.
"""

from __future__ import annotations

import shlex

import pytest
import standin_fabricmanager
from harness import assert_no_change

# deploy/exit_status.py's REBOOT_REQUIRED: the fixture's node has GPUs, and the driver's change awaits a reboot
REBOOT_REQUIRED = 3
# nvidia-persistenced off: the fixture's GPUs are PCI IDs only, there is no GPU for it to hold
STAGES = {"stages": "kernel,driver", "nvidia_persistenced": "false"}
# Debian's driver release the stand-in repository has Fabric Manager for (bookworm's own; its
# security suite carries a newer 535, which a pin keeps out)
DRIVER_PIN = {"nvidia_driver_version": standin_fabricmanager.DRIVER_PACKAGE_VERSION}
SOURCES = "/etc/apt/sources.list.d"


@pytest.fixture(scope="module")
def fabric_repo(tmp_path_factory):
    """The STAND-IN CUDA repository with Fabric Manager 535.247.01, 535.261.03 (Debian's driver),
    535.274.02 and 580.95.05, and nvlsm, served on 127.0.0.1."""
    with standin_fabricmanager.served(tmp_path_factory.mktemp("standin-cuda") / "repos") as repo:
        yield repo


def installed_versions(node, *packages: str) -> dict[str, str]:
    """package -> version, for those of ``packages`` dpkg has installed."""
    out = node.sh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n' "
                  + " ".join(shlex.quote(package) for package in packages) + " 2>/dev/null || true").stdout
    return {name: version for name, version, status in (line.split() for line in out.splitlines())
            if status == "installed"}


def driver_upstream_version(node) -> str:
    version = node.sh("dpkg-query -W -f '${Version}' nvidia-driver").stdout.strip()
    return version.split("-", 1)[0]


def test_nvswitch_node_gets_fabric_manager_at_the_drivers_version_held_enabled_rerun_unchanged_standin_fabric_manager(
    start_topology_node, fabric_repo
):
    """STAND-IN Fabric Manager packages, HGX H100 PCI fixture (four NVSwitches 10de:22a3): the
    deploy installs nvidia-fabricmanager-535 at exactly the driver's version (not the newer one the
    repository also has) with NSCQ, holds them, enables its service; no NVLSM (not NVLink5); a second run
    changes nothing."""
    node = start_topology_node("hgx-h100")
    data = {**STAGES, **DRIVER_PIN, **fabric_repo.data()}
    first = node.deploy(data=data)
    # a GPU node whose driver changed awaits its reboot (reboot_allowed=false): exit 3, done
    assert first.returncode == REBOOT_REQUIRED, first.explain()

    driver = driver_upstream_version(node)
    assert driver == standin_fabricmanager.DRIVER_VERSION
    fabric_manager, nscq = standin_fabricmanager.fabric_package(driver), standin_fabricmanager.nscq_package(driver)
    assert installed_versions(node, fabric_manager, nscq) == {fabric_manager: f"{driver}-1", nscq: f"{driver}-1"}
    held = node.sh("apt-mark showhold").stdout.split()
    assert {fabric_manager, nscq, "nvidia-driver"} <= set(held), held
    assert node.sh(f"systemctl is-enabled {standin_fabricmanager.UNIT}", check=False).stdout.strip() == "enabled"
    assert installed_versions(node, "nvlsm") == {}
    assert not node.exists("/etc/modules-load.d/gpu-node-nvlink5.conf")

    assert_no_change(node.deploy(data=data), status=REBOOT_REQUIRED)
    assert installed_versions(node, fabric_manager) == {fabric_manager: f"{driver}-1"}


def test_node_without_nvswitch_gets_no_fabric_manager_nor_its_repository_standin_fabric_manager(
    start_topology_node, fabric_repo
):
    """STAND-IN Fabric Manager repository offered, PCIe-only PCI fixture (two H100 PCIe, no
    NVSwitch): the run planned on the node (pyinfra --dry: its facts read for real, nothing
    executed; the driver's install is the H100 test's) installs the driver, and none of Fabric
    Manager, NSCQ, NVLSM or the CUDA repository comes with it."""
    node = start_topology_node("pcie-only")
    result = node.deploy(data={**STAGES, **fabric_repo.data()}, json_output=False, default_mode=True,
                         extra_args=["--dry"])
    assert result.returncode == 0, result.explain()
    planned = result.output
    assert "Install the NVIDIA driver" in planned, planned[-4000:]
    for name in (*standin_fabricmanager.package_names(), "nvlsm", "CUDA repository", fabric_repo.url):
        assert name not in planned, (name, planned[-4000:])
    assert installed_versions(node, "nvidia-driver") == {}  # --dry: nothing ran
    # The same plan on an NVSwitch node does name them: the check above can fail.
    nvswitch = start_topology_node("hgx-h100").deploy(data={**STAGES, **fabric_repo.data()}, json_output=False,
                                                     default_mode=True, extra_args=["--dry"])
    assert "CUDA repository" in nvswitch.output, nvswitch.output[-4000:]


def test_driver_version_without_matching_fabric_manager_is_refused_before_any_change_standin_fabric_manager(
    start_topology_node, tmp_path_factory
):
    """STAND-IN repository holding Fabric Manager 535.247.01 and 535.274.02 but not the pinned
    Debian driver's 535.261.03, HGX A100 PCI fixture: the run is refused with one line naming Fabric
    Manager and the driver's version, before any change (no package, no repository file)."""
    node = start_topology_node("hgx-a100")
    before = {"sources": node.sh(f"ls -l {SOURCES}; cat /etc/apt/sources.list.d/*").stdout,
              "packages": node.sh("dpkg-query -W -f '${Package} ${Version}\\n'").stdout,
              "held": node.sh("apt-mark showhold").stdout}
    root = tmp_path_factory.mktemp("standin-cuda-mismatch") / "repos"
    with standin_fabricmanager.served(root, fabric_versions=("535.247.01-1", "535.274.02-1")) as repo:
        result = node.deploy(data={**STAGES, **DRIVER_PIN, **repo.data()}, json_output=False)
    assert result.returncode != 0
    assert "Traceback" not in result.output
    lines = {line.strip() for line in result.run_output.splitlines() if "gpu-node:" in line and "Fabric Manager" in line}
    assert len(lines) == 1, result.output[-4000:]
    line = lines.pop()
    # names the driver's version and what the repository does offer: it was read, and did not match
    assert standin_fabricmanager.DRIVER_VERSION in line and "535.274.02" in line, line
    after = {"sources": node.sh(f"ls -l {SOURCES}; cat /etc/apt/sources.list.d/*").stdout,
             "packages": node.sh("dpkg-query -W -f '${Package} ${Version}\\n'").stdout,
             "held": node.sh("apt-mark showhold").stdout}
    assert after == before
