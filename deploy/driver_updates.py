"""
A driver upgrade without a reboot where nothing holds the GPU, pure: from who holds /dev/nvidia*
(``fuser -v``'s table, deploy/facts/gpu_holders.py), the loaded nvidia modules and the driver's own
services, either the reload's steps in order (stop the services, unload the modules their users
first, load, start the services again) or "reboot required" naming the process that holds a device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Unloaded in this order (each one's users before it), loaded in the reverse
MODULES = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia")
# The driver's own clients, stopped before the unload and started after: persistenced, Fabric Manager, DCGM
SERVICES = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service")
# Their processes as fuser names them (the kernel's comm: 15 characters at most)
OWN_PROCESSES = {"nvidia-persiste", "nvidia-persistenced", "nv-fabricmanage", "nv-fabricmanager", "nv-hostengine"}
FUSER_LINE = re.compile(r"^(?:(/\S+):)?\s+(\S+)\s+(\d+)\s+(\S+)\s+(.+?)\s*$")


@dataclass(frozen=True)
class Holder:
    pid: int
    user: str
    command: str
    device: str


def parse_fuser(lines) -> list[Holder]:
    """``fuser -v /dev/nvidia*`` (its table, stdout and stderr together) -> who holds which device."""
    holders, device = [], None
    for line in lines:
        match = FUSER_LINE.match(line.rstrip("\n"))
        if not match:
            named = re.match(r"^(/\S+):\s*$", line.strip())
            device = named[1] if named else device
            continue
        device = match[1] or device
        if device:
            holders.append(Holder(pid=int(match[3]), user=match[2], command=match[5], device=device))
    return holders


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
            f"{verb} {name}" for verb, name in self.steps)


def reload_plan(reading: dict) -> ReloadPlan:
    """``reading``: the DeviceHolders fact ({"fuser": bool, "holders": [Holder], "modules": [...],
    "active": [...]})."""
    unload = [module for module in MODULES if module in reading["modules"]]
    if not unload:
        return ReloadPlan()  # nothing of the old driver runs: nothing to reload
    if not reading["fuser"]:
        return ReloadPlan(reboot="reboot required: fuser (psmisc) is not installed, so who holds /dev/nvidia* "
                                 "is unknown; install psmisc for a reload without a reboot")
    others = [holder for holder in reading["holders"] if holder.command not in OWN_PROCESSES]
    if others:
        named = "; ".join(f"{holder.command} (pid {holder.pid}, {holder.user}) holds {holder.device}"
                          for holder in sorted(others, key=lambda holder: holder.pid))
        return ReloadPlan(reboot=f"reboot required: {named}: stop it (or drain the node) and rerun, or reboot")
    stop = [unit for unit in SERVICES if unit in reading["active"]]
    return ReloadPlan(steps=(*(("stop", unit) for unit in stop), *(("unload", module) for module in unload),
                             *(("load", module) for module in reversed(unload)),
                             *(("start", unit) for unit in reversed(stop))))


def commands(plan: ReloadPlan) -> list[list[str]]:
    """The reload's commands, in order (words; the names are the module's own constants)."""
    verbs = {"stop": ["systemctl", "stop"], "start": ["systemctl", "start"], "unload": ["modprobe", "-r"],
             "load": ["modprobe"]}
    return [[*verbs[verb], name] for verb, name in plan.steps]
