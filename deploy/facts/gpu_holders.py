"""Who holds the NVIDIA device nodes, which nvidia modules are loaded, which of the driver's services run."""

from __future__ import annotations

from .. import shell_scripts
from .base import NodeFact
from ..driver_updates import MODULES, SERVICES, parse_fuser



class DeviceHolders(NodeFact):
    """
    The processes holding ``/dev/nvidia*`` (the node's own ``fuser -v``, from psmisc; ``fuser``:
    False where it is missing), the loaded nvidia modules and the driver's own active services
    (deploy/driver_updates.py decides on it).

    .. code:: python

        {"fuser": True, "holders": [Holder(pid=4242, user="root", command="python3", device="/dev/nvidia0")],
         "modules": ["nvidia_uvm", "nvidia"], "active": ["nvidia-persistenced.service"]}
    """

    def command(self):
        return shell_scripts.script("device_holders", modules=" ".join(MODULES), services=" ".join(SERVICES)).strip()

    @staticmethod
    def default():
        return {"fuser": False, "holders": [], "modules": [], "active": []}

    def process(self, output):
        found = self.default()
        held = []
        for line in output:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "fuser":
                found["fuser"] = True
            elif kind == "held":
                held.append(rest)
            elif kind == "module" and rest in MODULES:
                found["modules"].append(rest)
            elif kind == "active" and rest in SERVICES:
                found["active"].append(rest)
        found["holders"] = parse_fuser(held)
        return found
