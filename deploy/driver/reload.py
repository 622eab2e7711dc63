"""
A driver upgrade without a reboot where nothing holds the GPU, pure: from who holds /dev/nvidia*
(deploy/shell/gpu_holders.sh's lines, read by deploy/facts/gpu_holders.py), the loaded nvidia
modules and the driver's own services, either the reload's steps in order (stop the services, unload
the modules their users first, load, start the services again) or "reboot required" naming the
process that holds a device. The node decides again when the reload runs (deploy/shell/
driver_reload.sh, the same rule in one command): this is what a run plans and ``--dry`` shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..foundations import node_text

# Unloaded in this order (each one's users before it), loaded in the reverse
MODULES = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia")
# The driver's own clients, stopped before the unload and started after: persistenced, Fabric Manager,
# DCGM. A holder is theirs when their stop ends it (gpu_holders.sh: MainPID or control group), never by name.
SERVICES = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service")
# driver_reload.sh's exit status when a process holds a device: nothing was stopped
REBOOT_REQUIRED_STATUS = 3
NO_FUSER = (
    "reboot required: fuser (psmisc) is not installed, so who holds /dev/nvidia* is unknown; install "
    "psmisc for a reload without a reboot"
)


@dataclass(frozen=True)
class Holder:
    pid: int
    user: str
    command: str
    device: str
    unit: str | None = None  # the service whose stop ends it; None: any other process

    @property
    def named(self) -> str:
        return f"{self.command} (pid {self.pid}, user {self.user}) holds {self.device}"


def parse_holder(text: str, units: Iterable[str] = SERVICES) -> Holder | None:
    """One of gpu_holders.sh's lines without its "holder " ("PID UNIT USER DEVICE COMMAND"); None: not one.
    A UNIT other than ``units`` counts as no unit."""
    text = node_text.printable(text)  # node text, shown to the operator
    pid, unit, user, device, command = (text.split(" ", 4) + [""] * 5)[:5]
    if not pid.isdigit() or not device:
        return None
    return Holder(pid=int(pid), user=user, command=command, device=device, unit=unit if unit in units else None)


def named(holders: Iterable[Holder]) -> str:
    return "; ".join(holder.named for holder in holders)


@dataclass(frozen=True)
class ReloadPlan:
    """Either ``steps`` ((verb, name) in order: stop, unload, load, start) or ``reboot`` (why not)."""

    steps: tuple[tuple[str, str], ...] = ()
    reboot: str | None = None

    @property
    def line(self) -> str:
        if self.reboot:
            return self.reboot
        if not self.steps:
            return "no nvidia module is loaded: nothing to reload"
        return "nothing else holds /dev/nvidia*: reload without a reboot: " + ", ".join(
            f"{verb} {name}" for verb, name in self.steps
        )


def reload_plan(reading: dict[str, Any]) -> ReloadPlan:
    """``reading``: the DeviceHolders fact ({"fuser": bool, "holders": [Holder], "modules": [...],
    "active": [...]})."""
    unload = [module for module in MODULES if module in reading["modules"]]
    if not unload:
        return ReloadPlan()  # nothing of the old driver runs: nothing to reload
    if not reading["fuser"]:
        return ReloadPlan(reboot=NO_FUSER)
    others = [holder for holder in reading["holders"] if holder.unit is None]
    if others:
        return ReloadPlan(reboot=f"reboot required: {named(others)}: stop it (or drain the node) and rerun, or reboot")
    stop = [unit for unit in SERVICES if unit in reading["active"]]
    return ReloadPlan(
        steps=(
            *(("stop", unit) for unit in stop),
            *(("unload", module) for module in unload),
            *(("load", module) for module in reversed(unload)),
            *(("start", unit) for unit in reversed(stop)),
        )
    )
