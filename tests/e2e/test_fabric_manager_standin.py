"""
Fabric Manager on NVSwitch nodes and IMEX on the hosts of a multi-node NVLink domain, end to end on
bookworm node containers, with STAND-IN Fabric Manager and IMEX packages (tests/standin_fabricmanager.py:
NVIDIA's package names, versions, paths and unit names; our own content) from a local signed repository
laid out like NVIDIA's CUDA repository and pointed at with ``nvidia_cuda_repo_url``. Fabric Manager's
driver is Debian's real one (535.261.03). Its kernel module is not the subject here: after the
open-module file in one pytest (tests/shards.py SAME_SHARD), the node's DKMS loads the module that
file's DKMS built for the same kernel (DKMS's prebuilt-module tarball, tests/harness.py
load_dkms_builds) instead of compiling it again; run alone, DKMS builds it. The IMEX domain's nodes have
a STAND-IN driver module (tests/standin_kmod.py, 550.163.01: IMEX is packaged from 550 on) and run the
driver stage without installing a driver (nvidia_driver_install=false), so no DKMS build.

A container cannot be given PCI devices: the node's PCI answer comes from our sysfs fixture of a
real topology (tests/fixtures/fabric/, written by tests/pci_tree.py) bind-mounted read-only over
``/sys/bus/pci/devices``, the folder NodeSurvey reads. Everything else (apt, signatures, pins,
holds, systemd) is real.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pci_tree
import pytest
import standin_fabricmanager
import standin_kmod
from harness import REPO, SAFE_DATA, DeployResult, assert_no_change, run, wait_for

# deploy/reports/exit_status.py's REBOOT_REQUIRED: the fixture's node has GPUs, and the driver's change awaits a reboot
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
    out = node.sh(
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n' "
        + " ".join(shlex.quote(package) for package in packages)
        + " 2>/dev/null || true"
    ).stdout
    return {
        name: version for name, version, status in (line.split() for line in out.splitlines()) if status == "installed"
    }


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
    result = node.deploy(
        data={**STAGES, **fabric_repo.data()}, json_output=False, default_mode=True, extra_args=["--dry"]
    )
    assert result.returncode == 0, result.explain()
    planned = result.output
    assert "Install the NVIDIA driver" in planned, planned[-4000:]
    for name in (*standin_fabricmanager.package_names(), "nvlsm", "CUDA repository", fabric_repo.url):
        assert name not in planned, (name, planned[-4000:])
    assert installed_versions(node, "nvidia-driver") == {}  # --dry: nothing ran
    # The same plan on an NVSwitch node does name them: the check above can fail.
    nvswitch = start_topology_node("hgx-h100").deploy(
        data={**STAGES, **fabric_repo.data()}, json_output=False, default_mode=True, extra_args=["--dry"]
    )
    assert "CUDA repository" in nvswitch.output, nvswitch.output[-4000:]


def test_driver_version_without_matching_fabric_manager_is_refused_before_any_change_standin_fabric_manager(
    start_topology_node, tmp_path_factory
):
    """STAND-IN repository holding Fabric Manager 535.247.01 and 535.274.02 but not the pinned
    Debian driver's 535.261.03, HGX A100 PCI fixture: the run is refused with one line naming Fabric
    Manager and the driver's version, before any change (no package, no repository file)."""
    node = start_topology_node("hgx-a100")
    before = {
        "sources": node.sh(f"ls -l {SOURCES}; cat /etc/apt/sources.list.d/*").stdout,
        "packages": node.sh("dpkg-query -W -f '${Package} ${Version}\\n'").stdout,
        "held": node.sh("apt-mark showhold").stdout,
    }
    root = tmp_path_factory.mktemp("standin-cuda-mismatch") / "repos"
    with standin_fabricmanager.served(root, fabric_versions=("535.247.01-1", "535.274.02-1")) as repo:
        result = node.deploy(data={**STAGES, **DRIVER_PIN, **repo.data()}, json_output=False)
    assert result.returncode != 0
    assert "Traceback" not in result.output
    lines = {
        line.strip() for line in result.run_output.splitlines() if "gpu-node:" in line and "Fabric Manager" in line
    }
    assert len(lines) == 1, result.output[-4000:]
    line = lines.pop()
    # names the driver's version and what the repository does offer: it was read, and did not match
    assert standin_fabricmanager.DRIVER_VERSION in line and "535.274.02" in line, line
    after = {
        "sources": node.sh(f"ls -l {SOURCES}; cat /etc/apt/sources.list.d/*").stdout,
        "packages": node.sh("dpkg-query -W -f '${Package} ${Version}\\n'").stdout,
        "held": node.sh("apt-mark showhold").stdout,
    }
    assert after == before


# --- an IMEX domain of three nodes -----------------------------------------------------------------

IMEX_DATA = {
    "stages": "driver",
    "nvidia_driver_install": "false",
    "first_boot_unit": "false",
    "imex_domain": "rack-e2e",
}
IMEX_ADDRESSES = ("127.0.0.12", "127.0.0.13", "127.0.0.14")  # loopback: node containers share the machine's


def put_standin_driver(node, version: str) -> None:
    """The STAND-IN nvidia.ko of ``version`` indexed by the node's own depmod for the running kernel (the
    machine's: a container has none of its own), what NodeSurvey reads as the built driver (modinfo); never
    loaded (kernel_modules_load=false)."""
    kernel = os.uname().release
    folder = f"/lib/modules/{kernel}/updates/dkms"
    run(
        ["docker", "exec", "-i", node.id, "sh", "-c", f"mkdir -p {folder} && cat > {folder}/nvidia.ko"],
        input=standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, version),
        text=False,
    )
    node.sh(f"depmod {shlex.quote(kernel)} 2>/dev/null")


def imex_run(inventory: Path, data: dict, deploy_file: str = "deploy/gpu_node.py") -> DeployResult:
    args = [sys.executable, "-m", "pyinfra", "-y", "--json", str(inventory), deploy_file]
    for key, value in {**SAFE_DATA, **data}.items():
        args += ["--data", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPU_NODES", None)
    result = run(args, check=False, cwd=REPO, env=env, timeout=1500)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def write_imex_inventory(path: Path, nodes, addresses) -> Path:
    hosts = [(node.target, {"imex_address": address}) for node, address in zip(nodes, addresses)]
    path.write_text(f"gpu_nodes = {hosts!r}\n")
    return path


def imex_steps(report: Path) -> dict[str, dict]:
    return {
        record["host"]: {step["name"]: step for step in record["steps"]}["imex_domain"]
        for record in json.loads(report.read_text())["nodes"]
    }


def imex_events(node, index: int) -> list[tuple[int, str, int]]:
    """The stand-in daemon's log on node ``index``: (monotonic ns, start/stop, index)."""
    lines = node.sh(f"cat {standin_fabricmanager.IMEX_LOG} 2>/dev/null || true").stdout.splitlines()
    return [(int(time), event, index) for time, event, *_ in (line.split() for line in lines)]


def test_a_three_node_imex_domain_gets_imex_at_the_drivers_version_its_members_and_a_serial_restart_standin_imex(
    start_node, fabric_repo, tmp_path
):
    """STAND-IN IMEX, three GB200 NVL72 compute trays (PCI fixture) with a STAND-IN 550.163.01 driver module:
    each gets nvidia-imex-550 at exactly 550.163.01-1 (the repository has a newer 550 too), held, the
    channel option, nodes_config.cfg listing the three, IMEX enabled and running; verify passes the domain
    on each, and names the member whose IMEX is stopped; a second run changes nothing; a member's new
    address restarts IMEX on the three, one host at a time (the stand-in daemons' stop/start log, one
    kernel clock for all containers, never interleaves)."""
    tree = tmp_path / "pci"
    nodes = []
    for index in range(3):
        devices = pci_tree.write(pci_tree.load("gb200-nvl72-compute-tray"), tree / str(index) / "devices")
        for path in [tree, *tree.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        nodes.append(start_node(["-v", f"{devices}:/sys/bus/pci/devices:ro"]))
    for node, address in zip(nodes, IMEX_ADDRESSES):
        put_standin_driver(node, standin_fabricmanager.IMEX_DRIVER_VERSION)
        node.write(standin_fabricmanager.IMEX_ADDRESS_FILE, address + "\n")
    inventory = write_imex_inventory(tmp_path / "inventory.py", nodes, IMEX_ADDRESSES)
    data = {**IMEX_DATA, **fabric_repo.data(), "fleet_report_path": str(tmp_path / "fleet.json")}

    first = imex_run(inventory, data)
    assert first.returncode == 0, first.explain()
    members = "".join(f"{address}\n" for address in IMEX_ADDRESSES)
    for node in nodes:
        assert installed_versions(node, "nvidia-imex-550") == {"nvidia-imex-550": "550.163.01-1"}
        assert "nvidia-imex-550" in node.sh("apt-mark showhold").stdout.split()
        assert node.read("/etc/nvidia-imex/nodes_config.cfg") == members
        assert "NVreg_CreateImexChannel0=1" in node.read("/etc/modprobe.d/gpu-node-imex-channel.conf")
        assert node.sh(f"systemctl is-enabled {standin_fabricmanager.IMEX_UNIT}").stdout.strip() == "enabled"
        wait_for(lambda node=node: node.is_active(standin_fabricmanager.IMEX_UNIT), what="the stand-in IMEX daemon")

    report = tmp_path / "verify.json"
    verify_data = {**data, "verify_report_path": str(report)}
    imex_run(inventory, verify_data, "deploy/verify.py")
    steps = imex_steps(report)
    assert {step["status"] for step in steps.values()} == {"pass"}, steps
    assert steps[nodes[0].target]["reason"] == (
        f"IMEX domain rack-e2e UP: 3/3 members READY ({', '.join(IMEX_ADDRESSES)})"
    )

    nodes[2].sh(f"systemctl stop {standin_fabricmanager.IMEX_UNIT}")
    imex_run(inventory, verify_data, "deploy/verify.py")
    missing = imex_steps(report)[nodes[0].target]
    assert missing["status"] == "fail"
    assert f"{nodes[2].target} ({IMEX_ADDRESSES[2]}) UNAVAILABLE" in missing["reason"], missing
    nodes[2].sh(f"systemctl start {standin_fabricmanager.IMEX_UNIT}")

    assert_no_change(imex_run(inventory, data))

    moved = (*IMEX_ADDRESSES[:2], "127.0.0.15")
    for node in nodes:
        node.sh(f"cat /dev/null > {standin_fabricmanager.IMEX_LOG}")
    nodes[2].write(standin_fabricmanager.IMEX_ADDRESS_FILE, moved[2] + "\n")
    changed = imex_run(write_imex_inventory(tmp_path / "inventory.py", nodes, moved), data)
    assert changed.returncode == 0, changed.explain()
    events = sorted(event for index, node in enumerate(nodes) for event in imex_events(node, index))
    # each member stopped and started again, the next one only after: stop, start, stop, start, stop, start
    assert [event for _, event, _ in events] == ["stop", "start"] * 3, events
    stopped, started = [index for _, _, index in events[::2]], [index for _, _, index in events[1::2]]
    assert stopped == started and sorted(stopped) == [0, 1, 2], events
    for node in nodes:
        assert node.read("/etc/nvidia-imex/nodes_config.cfg") == "".join(f"{address}\n" for address in moved)
