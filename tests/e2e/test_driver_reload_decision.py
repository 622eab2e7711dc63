"""
Reload or reboot after a driver upgrade, decided from the node's real ``fuser -v`` (Debian's psmisc)
over STAND-IN device nodes: /dev/nvidia0 and /dev/nvidiactl made with mknod with the null device's
numbers (a node container has no GPU, and a process can only hold a device node that opens). The
loaded nvidia module is a stand-in too (the fact reads the machine's own /sys/module, which has
none): the reading's modules are set to ["nvidia"]. Nothing is unloaded or loaded here.
"""

from __future__ import annotations

import time

from deploy.driver_updates import reload_plan
from deploy.facts.gpu_holders import DeviceHolders


def decision(node):
    reading = DeviceHolders().process(node.sh(DeviceHolders().command()).stdout.splitlines())
    return reload_plan({**reading, "modules": ["nvidia"]})


def holder(node, program: str, device: str) -> int:
    """Start ``program`` holding ``device`` open in the node; its PID."""
    node.sh(f"nohup {program} 600 3<{device} >/dev/null 2>&1 & echo $! > /run/holder-{program}")
    return int(node.read(f"/run/holder-{program}").strip())


def test_reload_unless_a_process_holds_a_standin_device_by_the_nodes_real_fuser(node):
    started = time.monotonic()
    node.sh("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends psmisc")
    node.sh("mknod /dev/nvidia0 c 1 3 && mknod /dev/nvidiactl c 1 3")
    assert decision(node).steps == (("unload", "nvidia"), ("load", "nvidia"))

    # DCGM's host engine holding a device is the driver's own client: stopped by the reload, no blocker
    node.sh("cp /bin/sleep /usr/local/bin/nv-hostengine")
    holder(node, "nv-hostengine", "/dev/nvidiactl")
    assert decision(node).steps == (("unload", "nvidia"), ("load", "nvidia"))

    pid = holder(node, "sleep", "/dev/nvidia0")
    assert decision(node).line == (f"reboot required: sleep (pid {pid}, root) holds /dev/nvidia0: stop it (or drain "
                                   "the node) and rerun, or reboot")
    node.sh(f"kill {pid}")
    assert decision(node).steps, "the holder gone, the reload is back"
    print(f"reload decision e2e: {time.monotonic() - started:.0f} s")
