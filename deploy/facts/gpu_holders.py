"""Who holds the NVIDIA device nodes, which nvidia modules are loaded, which of the driver's services run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..driver.reload import MODULES, SERVICES, parse_holder
from ..foundations import shell_scripts
from .base import NodeFact


def holders_script(services: Iterable[str]) -> str:
    """deploy/shell/gpu_holders.sh's functions, ``services`` the units whose own processes they name."""
    return shell_scripts.assignments(services=" ".join(services)) + shell_scripts.body("gpu_holders")


class DeviceHolders(NodeFact[dict[str, Any]]):
    """
    The processes holding ``/dev/nvidia*`` (the node's own ``fuser``, from psmisc; ``fuser``: False
    where it is missing), each with the driver's service whose stop ends it (``unit``: its MainPID
    or its control group; None: another process), the loaded nvidia modules and the driver's own
    active services (deploy/driver/reload.py decides on it).

    .. code:: python

        {"fuser": True, "holders": [Holder(pid=4242, user="root", command="python3", device="/dev/nvidia0",
                                           unit=None)],
         "modules": ["nvidia_uvm", "nvidia"], "active": ["nvidia-persistenced.service"]}
    """

    def command(self) -> str:
        return (holders_script(SERVICES) + shell_scripts.script("device_holders", modules=" ".join(MODULES))).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {"fuser": False, "holders": [], "modules": [], "active": []}

    def process(self, output: list[str]) -> dict[str, Any]:
        found = self.default()
        for line in output:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "fuser":
                found["fuser"] = True
            elif kind == "holder":
                holder = parse_holder(rest)
                if holder:
                    found["holders"].append(holder)
            elif kind == "module" and rest in MODULES:
                found["modules"].append(rest)
            elif kind == "active" and rest in SERVICES:
                found["active"].append(rest)
        return found
