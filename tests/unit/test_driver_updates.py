"""
A driver upgrade reloads the modules instead of rebooting where nothing but the driver's own services
holds /dev/nvidia*. The services' processes are told by systemd (MainPID, control group), never by a
process name. Here: the holders read's real output (tests/facts/gpu_holders.DeviceHolders/), the plan's
decision and order, the operation as a plan test, and the node's one-command reload
(deploy/shell/driver_reload.sh) run for real in a scratch root (tests/shell_sandbox.py) with STAND-IN
fuser, systemctl and modprobe written here (module loading never runs in a test).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from plan import DEFAULT, PCI_WITH_GPU, Output, carrying, every, gpu_node, node_lines, run_deploy, run_plan
from pyinfra.api import deploy
from shell_sandbox import Sandbox, build_template
from test_driver_plans import DEBIAN_FILES

from deploy.driver.reload import Holder, ReloadPlan, parse_holder, reload_plan
from deploy.facts.gpu_holders import DeviceHolders
from deploy.facts.nvidia import PackagesAvailable
from deploy.operations.driver_reload import reload_command, reload_driver

FACT_CASES = Path(__file__).resolve().parents[1] / "facts" / "gpu_holders.DeviceHolders"


def fact_case(name: str) -> list[str]:
    return json.loads((FACT_CASES / f"{name}.json").read_text())["output"]


def reading(holders=(), modules=("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"), active=(), fuser=True):
    return {"fuser": fuser, "holders": list(holders), "modules": list(modules), "active": list(active)}


# --- the plan (what a run plans and --dry shows) ---------------------------------------------------


def test_a_process_named_as_the_drivers_daemon_is_not_the_service_reboot_required_names_it():
    """Red before: a holder whose command was nvidia-persiste passed as the driver's own, and the plan
    stopped the services under a process that keeps the module in use."""
    found = DeviceHolders().process(fact_case("services-and-an-impostor"))
    plan = reload_plan(found)
    assert plan.steps == ()
    assert plan.line == (
        "reboot required: nvidia-persiste (pid 1165, user nobody) holds /dev/nvidia0: stop it (or "
        "drain the node) and rerun, or reboot"
    )


def test_the_services_own_processes_main_or_in_their_control_group_reload_services_first_modules_users_first():
    plan = reload_plan(
        reading(
            holders=[
                Holder(11, "root", "nvidia-persiste", "/dev/nvidia0", unit="nvidia-persistenced.service"),
                Holder(12, "root", "nvvs", "/dev/nvidiactl", unit="nvidia-dcgm.service"),
            ],
            active=["nvidia-persistenced.service", "nvidia-dcgm.service"],
        )
    )
    assert plan.steps == (
        ("stop", "nvidia-persistenced.service"),
        ("stop", "nvidia-dcgm.service"),
        ("unload", "nvidia_drm"),
        ("unload", "nvidia_modeset"),
        ("unload", "nvidia_uvm"),
        ("unload", "nvidia"),
        ("load", "nvidia"),
        ("load", "nvidia_uvm"),
        ("load", "nvidia_modeset"),
        ("load", "nvidia_drm"),
        ("start", "nvidia-dcgm.service"),
        ("start", "nvidia-persistenced.service"),
    )


def test_a_holder_line_with_another_unit_or_no_pid_is_no_service_of_the_driver():
    assert parse_holder("42 nvidia-imex.service root /dev/nvidia0 x").unit is None
    assert parse_holder("42 - bob\x07 /dev/nvidia0 a b\x1b[2K") == Holder(42, "bob\\x07", "a b\\x1b[2K", "/dev/nvidia0")
    assert parse_holder("x - bob /dev/nvidia0 a") is None and parse_holder("42") is None


def test_without_fuser_or_without_a_loaded_module():
    assert reload_plan(reading(fuser=False)).line.startswith("reboot required: fuser (psmisc) is not installed")
    assert reload_plan(reading(modules=())) == ReloadPlan()


# --- the operation ---------------------------------------------------------------------------------


@deploy("reload")
def reload(load):
    reload_driver(load=load)


RELOAD_MARK = "driver reload failed"  # a phrase of driver_reload.sh: its command ran


def reload_runs(plan) -> list[str]:
    return plan.matching(RELOAD_MARK)


@pytest.mark.usefixtures("both_modes")
def test_the_operation_runs_the_nodes_one_command_reload_where_nothing_else_holds_the_gpu():
    plan = run_plan(reload, True, facts=[(DeviceHolders, fact_case("no-gpu") + ["module nvidia"])])
    assert reload_runs(plan) == [reload_command().get_raw_value()] and not plan.failed


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("load", [True, False])
def test_the_operation_never_reloads_when_a_process_holds_the_gpu_or_loading_is_off(load):
    output = fact_case("services-and-an-impostor") if load else fact_case("no-gpu") + ["module nvidia"]
    plan = run_plan(reload, load, facts=[(DeviceHolders, output)])
    assert not reload_runs(plan) and not plan.failed


@pytest.mark.usefixtures("both_modes")
def test_a_failed_reload_fails_the_host_in_the_nodes_one_line_its_control_characters_escaped():
    line = (
        "driver reload failed: modprobe -r nvidia: modprobe: FATAL: Module nvidia is in use.; started again: "
        "nvidia-persistenced.service"
    )
    plan = run_plan(
        reload,
        True,
        facts=[(DeviceHolders, fact_case("no-gpu") + ["module nvidia"])],
        commands={
            RELOAD_MARK: Output(
                stdout=["x"], stderr=["modprobe: FATAL: Module nvidia is in use.", line + "\x1b]0;x\x07"], success=False
            )
        },
    )
    assert plan.failures == [line + "\\x1b]0;x\\x07"]


@pytest.mark.usefixtures("both_modes")
def test_a_holder_the_node_finds_at_the_reload_is_reboot_required_not_a_failure(caplog):
    line = "reboot required: python3 (pid 7, user bob) holds /dev/nvidia0: stop it (or drain the node) and rerun, or reboot"
    plan = run_plan(
        reload,
        True,
        facts=[(DeviceHolders, fact_case("no-gpu") + ["module nvidia"])],
        commands={RELOAD_MARK: Output(stdout=[line])},
    )
    assert not plan.failed and line in caplog.text


@pytest.mark.parametrize("holders, reloads", [("services-and-an-impostor", False), ("no-gpu", True)])
def test_the_driver_stage_runs_the_reload_only_where_its_holders_read_finds_no_other_process(
    both_modes, holders, reloads
):
    """Through the driver stage (deploy/gpu_node.py: the driver installed, so changed, with
    kernel_modules_load=true): its holders read decides whether the reload's command runs at all."""
    node = gpu_node(
        "debian-12",
        node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU),
        unstated=DEFAULT,
        facts=[
            *DEBIAN_FILES,
            (every(PackagesAvailable), carrying("linux-headers-6.1.0-18-amd64")),
            (DeviceHolders, fact_case(holders) + ["module nvidia"]),
        ],
    )
    run = run_deploy(node, data={"kernel_modules_load": True})
    assert run.error is None, run.refusal
    assert run.ran("apt-get -y") and bool(reload_runs(run)) is reloads


# --- the node's reload, for real, with stand-in fuser, systemctl and modprobe ----------------------

FUSER = """#!/bin/sh
# STAND-IN fuser: the PIDs in /standin/holders/<device's name> whose /proc entry exists, as psmisc prints them
found=1
for pid in $(cat "/standin/holders/$(basename "$1")" 2>/dev/null); do
    [ -d "/proc/$pid" ] && { printf ' %sm' "$pid"; found=0; }
done
exit $found
"""
SYSTEMCTL = """#!/bin/sh
# STAND-IN systemctl: units as folders /standin/units/<unit> (active, enabled, MainPID, KillMode,
# ControlGroup); a stop ends the processes of its control group (/proc/<pid>/cgroup), unless the unit
# "lingers"; the unit is the last word, a show's property the word after -p
echo "systemctl $*" >> /standin/log
verb=$1 property=$3
for unit in "$@"; do :; done
folder=/standin/units/$unit
stop() {
    echo inactive > "$folder/active"
    [ -e "$folder/lingers" ] && return
    group=$(cat "$folder/ControlGroup")
    for proc in /proc/*; do grep -qx "0::$group" "$proc/cgroup" 2>/dev/null && rm -r "$proc"; done
}
case $verb in
is-active) state=$(cat "$folder/active" 2>/dev/null); echo "${state:-inactive}"; [ "$state" = active ];;
is-enabled) state=$(cat "$folder/enabled" 2>/dev/null); echo "${state:-not-found}"; [ -n "$state" ];;
show) cat "$folder/$property" 2>/dev/null;;
stop) [ -e "$folder/fails" ] && { echo "Job for $unit failed." >&2; exit 1; }; stop;;
start) echo active > "$folder/active";;
mask) echo masked > "$folder/enabled"; [ "$2" = --now ] && stop;;
esac
exit 0
"""
MODPROBE = """#!/bin/sh
# STAND-IN modprobe: a loaded module is a folder /sys/module/<name>; one in /standin/in-use cannot unload
echo "modprobe $*" >> /standin/log
if [ "$1" = -r ]; then
    [ -e "/standin/in-use/$2" ] && { echo "modprobe: FATAL: Module $2 is in use." >&2; exit 1; }
    rmdir "/sys/module/$2"
else
    mkdir "/sys/module/$1"
fi
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory.mktemp("sandbox") / "template")


class Node:
    """A scratch root laid out as a node: stand-in tools, /sys/module, /proc entries, device nodes."""

    def __init__(self, box: Sandbox):
        self.box = box
        for path, text in (("usr/bin/fuser", FUSER), ("usr/bin/systemctl", SYSTEMCTL), ("usr/sbin/modprobe", MODPROBE)):
            self.write(path, text, 0o755)
        passwd = box.root / "etc/passwd"
        text = passwd.read_text()
        passwd.unlink()  # the template's file is shared (hard links): a new one
        passwd.write_text(text + "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
        for device in ("nvidia0", "nvidiactl"):
            os.mknod(box.root / "dev" / device, 0o20666, os.makedev(1, 3))
        self.write("standin/log", "")

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        target = self.box.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    def module(self, *names: str) -> None:
        for name in names:
            (self.box.root / "sys/module" / name).mkdir(parents=True)

    def process(
        self, pid: int, command: str, device: str, cgroup: str = "/user.slice/session-1.scope", uid: int = 0
    ) -> None:
        self.write(f"proc/{pid}/comm", command + "\n")
        self.write(f"proc/{pid}/cgroup", f"0::{cgroup}\n")
        os.chown(self.box.root / "proc" / str(pid), uid, uid)
        holders = self.box.root / "standin/holders" / device
        holders.parent.mkdir(parents=True, exist_ok=True)
        holders.write_text((holders.read_text() if holders.exists() else "") + f"{pid}\n")

    def service(self, unit: str, main: int, kill: str = "control-group", *flags: str) -> None:
        values = {
            "active": "active",
            "enabled": "enabled",
            "MainPID": str(main),
            "KillMode": kill,
            "ControlGroup": f"/system.slice/{unit}",
            **{flag: "" for flag in flags},
        }
        for name, value in values.items():
            self.write(f"standin/units/{unit}/{name}", value + "\n")

    def log(self) -> list[str]:
        """What the stand-ins were asked to change, in order (their reads left out)."""
        return [
            line
            for line in (self.box.root / "standin/log").read_text().splitlines()
            if not re.match(r"systemctl (is-active|is-enabled|show) ", line)
        ]

    def active(self, unit: str) -> str:
        return (self.box.root / "standin/units" / unit / "active").read_text().strip()


@pytest.fixture
def node(template, tmp_path) -> Node:
    if os.geteuid() != 0:
        pytest.skip("the scratch root is a chroot, and device nodes need root")
    return Node(Sandbox.clone(template, tmp_path / "root"))


def run_reload(node: Node) -> tuple[int, str]:
    """The reload run in the root: (its exit status, the last line it printed)."""
    wrapped = "(\n" + reload_command().get_raw_value() + "\n) > /standin/out 2>&1; echo $? > /standin/status"
    ran = node.box.run(wrapped)
    assert ran.status == 0 and not ran.syntax_error, (ran.stderr, ran.syntax_error)
    out = (node.box.root / "standin/out").read_text().strip().splitlines()
    return int((node.box.root / "standin/status").read_text()), out[-1] if out else ""


def with_driver_services(node: Node) -> None:
    """persistenced's main process holds nvidiactl, DCGM's forked child (not its MainPID) nvidia0."""
    node.module("nvidia_uvm", "nvidia")
    node.service("nvidia-persistenced.service", 100)
    node.process(100, "nvidia-persiste", "nvidiactl", "/system.slice/nvidia-persistenced.service")
    node.service("nvidia-dcgm.service", 200)
    node.process(201, "nvvs", "nvidia0", "/system.slice/nvidia-dcgm.service")


def test_the_node_reloads_when_only_the_services_own_processes_hold_a_device(node):
    with_driver_services(node)
    status, line = run_reload(node)
    assert (status, line) == (0, "nothing else held /dev/nvidia*: reloaded without a reboot: nvidia_uvm nvidia")
    assert node.log() == [
        "systemctl stop nvidia-persistenced.service",
        "systemctl stop nvidia-dcgm.service",
        "modprobe -r nvidia_uvm",
        "modprobe -r nvidia",
        "modprobe nvidia",
        "modprobe nvidia_uvm",
        "systemctl start nvidia-dcgm.service",
        "systemctl start nvidia-persistenced.service",
    ]


def test_a_non_root_process_named_nvidia_persistenced_stops_nothing_reboot_required_names_it(node):
    """Red before (in the plan, whose rule the node now applies too): the name passed as the driver's own."""
    with_driver_services(node)
    node.process(4242, "nvidia-persiste", "nvidia0", uid=65534)
    status, line = run_reload(node)
    assert status == 3
    assert line == (
        "reboot required: nvidia-persiste (pid 4242, user nobody) holds /dev/nvidia0: stop it (or drain "
        "the node) and rerun, or reboot"
    )
    assert node.log() == [], "nothing stopped, nothing unloaded"


@pytest.mark.parametrize("device", ["nvidia-caps/nvidia-cap1", "nvidia-caps-imex-channels/channel0"])
def test_a_holder_of_a_mig_or_imex_capability_device_keeps_the_module_too(node, device):
    with_driver_services(node)
    (node.box.root / "dev" / device).parent.mkdir()
    os.mknod(node.box.root / "dev" / device, 0o20666, os.makedev(1, 3))
    node.process(4343, "python3", Path(device).name, uid=65534)
    status, line = run_reload(node)
    assert (status, node.log()) == (3, []) and f"python3 (pid 4343, user nobody) holds /dev/{device}" in line


def test_a_child_of_a_service_whose_stop_leaves_it_running_is_not_the_services(node):
    """KillMode=process: a stop ends the main process only, so a child holding a device keeps the module."""
    with_driver_services(node)
    node.service("nvidia-dcgm.service", 200, "process")
    status, line = run_reload(node)
    assert status == 3 and "nvvs (pid 201, user root) holds /dev/nvidia0" in line and node.log() == []


def test_a_failed_unload_starts_every_stopped_service_again_and_names_the_module(node):
    with_driver_services(node)
    node.write("standin/in-use/nvidia", "")
    status, line = run_reload(node)
    assert status == 1
    assert line == (
        "driver reload failed: modprobe -r nvidia: modprobe: FATAL: Module nvidia is in use.; loaded "
        "again: nvidia_uvm; started again: nvidia-dcgm.service nvidia-persistenced.service"
    )
    assert node.active("nvidia-persistenced.service") == node.active("nvidia-dcgm.service") == "active"
    assert node.log()[-2:] == ["systemctl start nvidia-dcgm.service", "systemctl start nvidia-persistenced.service"]


def test_a_holder_left_after_the_services_stopped_starts_them_again_and_is_named(node):
    """A process that outlived its service's stop (or started since the read) keeps the module: no unload."""
    with_driver_services(node)
    node.service("nvidia-dcgm.service", 200, "control-group", "lingers")
    status, line = run_reload(node)
    assert status == 1
    assert line == (
        "driver reload failed: nvvs (pid 201, user root) holds /dev/nvidia0 after the driver's services "
        "stopped; started again: nvidia-dcgm.service nvidia-persistenced.service"
    )
    assert not [entry for entry in node.log() if entry.startswith("modprobe")]


def test_a_service_that_fails_to_stop_is_started_again_with_the_others(node):
    with_driver_services(node)
    node.service("nvidia-dcgm.service", 200, "control-group", "fails")
    status, line = run_reload(node)
    assert status == 1
    assert line == (
        "driver reload failed: systemctl stop nvidia-dcgm.service: Job for nvidia-dcgm.service failed.; "
        "started again: nvidia-dcgm.service nvidia-persistenced.service"
    )


def test_without_fuser_or_a_loaded_module_the_node_stops_nothing(node):
    assert run_reload(node) == (0, "no nvidia module is loaded: nothing to reload")
    node.module("nvidia")
    (node.box.root / "usr/bin/fuser").unlink()
    status, line = run_reload(node)
    assert status == 3 and line.startswith("reboot required: fuser (psmisc) is not installed") and node.log() == []
