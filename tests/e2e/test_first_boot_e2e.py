"""
The first-boot unit (deploy/first_boot.py, deploy/tasks/boot.py) in a bookworm node container with
real systemd, booted again with ``docker restart``. A container cannot be given PCI devices nor load
a module: the GPUs are our sysfs fixture of two H100 PCIe (tests/fixtures/fabric/pcie-only.json)
bind-mounted over ``/sys/bus/pci/devices``, and the driver's module is a STAND-IN nvidia.ko
(tests/standin_kmod.py: an ELF whose .modinfo the real modinfo reads) listed in the running
kernel's modules.dep; kernel_modules_load=false, so the boot says it skips the load.
"""

from __future__ import annotations

import json
import shlex
import time

import standin_kmod
from harness import assert_no_change, run, wait_for

# The driver stage without installing a driver: the first-boot unit only (and the kernel stage).
DATA = {"stages": "kernel,driver", "nvidia_driver_install": "false"}
REPORT = "/var/lib/gpu-node/boot-report.json"


def reboot(node) -> None:
    run(["docker", "restart", "-t", "5", node.id])
    state = wait_for(node._booted_state, timeout=120, what=f"systemd in node {node.id[:12]} after a restart")
    assert state in ("running", "degraded"), state


def test_the_target_is_reached_at_boot_on_a_good_node_and_not_after_a_failed_step_standin_module(start_topology_node):
    """STAND-IN module and PCI fixture: the run installs and enables the unit without starting it, a
    re-run changes nothing; a boot reaches gpu-node-ready.target with a passing report; with the module
    gone, the next boot fails at "kernel module", named in the journal and the report, target unreached."""
    started = time.monotonic()
    node = start_topology_node("pcie-only")
    kernel = node.sh("uname -r").stdout.strip()
    modules = f"/lib/modules/{kernel}"
    node.sh(f"mkdir -p {shlex.quote(modules)}/updates/dkms")
    module = standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, "535.261.03")
    run(["docker", "exec", "-i", node.id, "sh", "-c", f"cat > {shlex.quote(modules)}/updates/dkms/nvidia.ko"],
        input=module, text=False)
    node.sh(f"printf 'updates/dkms/nvidia.ko:\\n' >> {shlex.quote(modules)}/modules.dep")

    first = node.deploy(data=DATA)
    assert first.returncode == 0, first.explain()
    assert node.sh("systemctl is-enabled gpu-node-boot.service gpu-node-ready.target").stdout.split() == [
        "enabled", "enabled"]
    assert not node.is_active("gpu-node-boot.service")  # enabled, not started: the next boot runs it
    assert_no_change(node.deploy(data=DATA))

    reboot(node)
    assert node.is_active("gpu-node-ready.target")
    times = node.service("gpu-node-boot.service")  # ActiveEnter; the exec start and exit, below
    run_times = dict(line.split("=", 1) for line in node.sh(
        "systemctl show gpu-node-boot.service -p ExecMainStartTimestampMonotonic -p ExecMainExitTimestampMonotonic"
    ).stdout.splitlines())
    seconds = (int(run_times["ExecMainExitTimestampMonotonic"]) - int(run_times["ExecMainStartTimestampMonotonic"])) / 1e6
    print(f"first-boot unit at boot: {seconds:.2f} s wall ({times['ActiveState']})")
    report = json.loads(node.read(REPORT))
    assert report["ok"] is True, report
    steps = {step["name"]: step for step in report["nodes"][0]["steps"]}
    assert steps["kernel module"]["status"] == "pass" and "proprietary module 535.261.03" in steps["kernel module"]["reason"]
    assert steps["module load"] == {"name": "module load", "status": "skip",
                                    "reason": "kernel_modules_load=false: modules not loaded by this boot"}

    node.sh(f"sed -i '/nvidia.ko/d' {shlex.quote(modules)}/modules.dep")
    reboot(node)
    assert not node.is_active("gpu-node-ready.target")
    assert node.sh("systemctl is-failed gpu-node-boot.service", check=False).stdout.strip() == "failed"
    journal = node.sh("journalctl -b -u gpu-node-boot.service --no-pager -o cat").stdout
    assert f"gpu-node boot: kernel module: fail: no nvidia module for the running kernel {kernel}" in journal, journal
    assert "failed at step 'kernel module': gpu-node-ready.target not reached" in journal
    report = json.loads(node.read(REPORT))
    assert report["ok"] is False and report["nodes"][0]["steps"][-1]["name"] == "kernel module"
    print(f"first-boot e2e: {time.monotonic() - started:.1f} s")
