"""
Reload or reboot after a driver upgrade, decided with the node's real ``fuser`` (Debian's psmisc) and
real systemd over STAND-IN device nodes: /dev/nvidia0 and /dev/nvidiactl made with mknod with the null
device's numbers (a node container has no GPU, and a process can only hold a device node that opens).
The driver's services are STAND-IN units of the driver's names (a copy of sleep, named
nvidia-persistenced, holding a device as the daemon does). The loaded modules are STAND-INs too:
folders on a tmpfs mounted over /sys/module inside the node container only (the machine's kernel has
no nvidia module), and a STAND-IN modprobe in /usr/local/sbin that removes and makes those folders
(and fails to unload a module named in /run/standin-in-use). Nothing is unloaded or loaded here.

All cases share one node (module scope): each leaves it as it found it.
"""

from __future__ import annotations

import shlex
import time

import pytest
from harness import Node

from deploy.driver.reload import reload_plan
from deploy.facts.gpu_holders import DeviceHolders
from deploy.operations.driver_reload import reload_command

PERSISTENCED = "nvidia-persistenced.service"
DCGM = "nvidia-dcgm.service"
STANDIN_MODPROBE = """#!/bin/sh
# STAND-IN modprobe: a loaded module is a folder on the tmpfs over /sys/module
echo "$*" >> /run/standin-modprobe.log
if [ "$1" = -r ]; then
    [ -e "/run/standin-in-use/$2" ] && { echo "modprobe: FATAL: Module $2 is in use." >&2; exit 1; }
    rmdir "/sys/module/$2"
else
    mkdir "/sys/module/$1"
fi
"""
# persistenced's stand-in holds nvidiactl in its main process; DCGM's, in a forked child (not its MainPID)
UNITS = {
    PERSISTENCED: "[Service]\nExecStart=/bin/sh -c 'exec /usr/local/bin/nvidia-persistenced infinity 3</dev/nvidiactl'\n",
    DCGM: "[Service]\nExecStart=/bin/sh -c 'sleep infinity 3</dev/nvidia0 & exec sleep infinity'\n",
}


@pytest.fixture(scope="module")
def reload_node(image):
    node = Node(image=image).start()
    try:
        node.sh(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends psmisc"
        )
        node.sh("mknod -m 666 /dev/nvidia0 c 1 3 && mknod -m 666 /dev/nvidiactl c 1 3")
        node.sh("mount -t tmpfs standin-modules /sys/module && mkdir /sys/module/nvidia_uvm /sys/module/nvidia")
        node.write("/usr/local/sbin/modprobe", STANDIN_MODPROBE, mode="755")
        node.sh("cp /bin/sleep /usr/local/bin/nvidia-persistenced")
        yield node
    finally:
        node.remove()


def decision(node):
    return reload_plan(DeviceHolders().process(node.sh(DeviceHolders().command()).stdout.splitlines()))


def holder(node, program: str, device: str, uid: int = 0) -> int:
    """Start ``program`` as ``uid`` holding ``device`` open in the node; its PID."""
    node.sh(
        f"nohup setpriv --reuid={uid} --regid={uid} --clear-groups sh -c "
        f"{shlex.quote(f'exec {program} 600 3<{device}')} >/dev/null 2>&1 & echo $! > /run/holder"
    )
    return int(node.read("/run/holder").strip())


def services(node, *units: str) -> None:
    """The stand-in services started (written and started on first use)."""
    for unit in units:
        if not node.exists(f"/etc/systemd/system/{unit}"):
            node.write(f"/etc/systemd/system/{unit}", UNITS[unit])
            node.sh("systemctl daemon-reload")
        node.sh(f"systemctl start {unit}")


def reload(node) -> tuple[int, str]:
    """The reload's one command run in the node: (its exit status, the last line it printed)."""
    done = node.sh(reload_command().get_raw_value(), check=False)
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()[-1]


def test_reload_unless_a_process_holds_a_standin_device_by_the_nodes_real_fuser(reload_node):
    node = reload_node
    started = time.monotonic()
    assert decision(node).steps == (
        ("unload", "nvidia_uvm"),
        ("unload", "nvidia"),
        ("load", "nvidia"),
        ("load", "nvidia_uvm"),
    )

    # DCGM's child holding a device is the driver's own: stopped by the reload, no blocker
    services(node, DCGM)
    assert decision(node).steps[0] == ("stop", DCGM)

    pid = holder(node, "sleep", "/dev/nvidia0")
    assert decision(node).line == (
        f"reboot required: sleep (pid {pid}, user root) holds /dev/nvidia0: stop it (or "
        "drain the node) and rerun, or reboot"
    )
    node.sh(f"kill {pid}")
    assert decision(node).steps, "the holder gone, the reload is back"
    node.sh(f"systemctl stop {DCGM}")
    print(f"reload decision e2e: {time.monotonic() - started:.0f} s")


def test_a_non_root_process_named_nvidia_persistenced_stops_nothing_and_is_named(reload_node):
    """Red before: its command name passed as persistenced's own and the plan stopped the services."""
    node = reload_node
    services(node, PERSISTENCED, DCGM)
    before = {unit: node.service(unit)["MainPID"] for unit in (PERSISTENCED, DCGM)}
    node.sh("cp /bin/sleep /tmp/nvidia-persistenced")
    pid = holder(node, "/tmp/nvidia-persistenced", "/dev/nvidia0", uid=65534)  # nobody
    line = (
        f"reboot required: nvidia-persiste (pid {pid}, user nobody) holds /dev/nvidia0: stop it (or drain the "
        "node) and rerun, or reboot"
    )
    assert decision(node).line == line
    assert reload(node) == (3, line)
    assert {unit: node.service(unit)["MainPID"] for unit in (PERSISTENCED, DCGM)} == before, "no service was stopped"
    assert not node.exists("/run/standin-modprobe.log")
    node.sh(f"kill {pid}")


def test_a_failed_unload_leaves_the_services_running_started_again(reload_node):
    node = reload_node
    services(node, PERSISTENCED, DCGM)
    before = {unit: node.service(unit)["MainPID"] for unit in (PERSISTENCED, DCGM)}
    node.sh("mkdir -p /run/standin-in-use && touch /run/standin-in-use/nvidia")
    assert reload(node) == (
        1,
        "driver reload failed: modprobe -r nvidia: modprobe: FATAL: Module nvidia is in use.; "
        f"loaded again: nvidia_uvm; started again: {DCGM} {PERSISTENCED}",
    )
    after = {unit: node.service(unit) for unit in (PERSISTENCED, DCGM)}
    assert all(state["ActiveState"] == "active" for state in after.values()), after
    assert all(after[unit]["MainPID"] != before[unit] for unit in before), "stopped, then started again"
    assert node.read("/run/standin-modprobe.log").split("\n")[:3] == ["-r nvidia_uvm", "-r nvidia", "nvidia_uvm"]
    node.sh("rm -r /run/standin-in-use /run/standin-modprobe.log")

    # the module free: stopped, unloaded, loaded, started
    assert reload(node) == (0, "nothing else held /dev/nvidia*: reloaded without a reboot: nvidia_uvm nvidia")
    assert node.read("/run/standin-modprobe.log").split() == [
        "-r",
        "nvidia_uvm",
        "-r",
        "nvidia",
        "nvidia",
        "nvidia_uvm",
    ]
    assert all(node.is_active(unit) for unit in (PERSISTENCED, DCGM))
    node.sh(f"rm /run/standin-modprobe.log && systemctl stop {PERSISTENCED} {DCGM}")
