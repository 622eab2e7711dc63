"""The node's installed kernels, the one its boot loader starts next, and the NVIDIA modules each has."""

from __future__ import annotations

from typing import Any

from ..foundations import shell_scripts
from .base import NodeFact


class InstalledKernels(NodeFact[dict[str, Any]]):
    """
    The kernels installed on the node (a folder under ``/usr/lib/modules`` or ``/lib/modules``;
    ``image``: the boot loader has its image, ``headers``: its ``build/Makefile`` is there for DKMS),
    the ``nvidia*.ko*`` main modules under each with ``modinfo``'s version (DKMS's ``updates/dkms``,
    a distribution's prebuilt package, a KMP's ``updates`` or ``extra``), whether ``dkms`` is there,
    the user-space driver's NVML library (``libnvidia-ml.so.<version>``, Debian's under ``nvidia/current``), what names the next
    boot (GRUB's environment block, ``GRUB_DEFAULT``, ``grubby --default-kernel``), and on Debian's
    family the kernel and header packages installed and which are held; Fabric Manager's package and
    version (dpkg or rpm), which must be the driver's.

    .. code:: python

        {
            "running": "6.1.0-56-amd64",
            "kernels": {"6.1.0-56-amd64": {"image": True, "headers": True,
                        "modules": [{"version": "535.261.03",
                                     "path": "/lib/modules/6.1.0-56-amd64/updates/dkms/nvidia-current.ko"}]}},
            "dkms": True,
            "library": "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03",
            "grubenv": {"saved_entry": "gnulinux-advanced-...>gnulinux-6.1.0-56-amd64-advanced-..."},
            "grub_default": "saved",
            "grubby": None,
            "packages": {"linux-image-amd64": {"held": False}},
            "fabric_manager": {"nvidia-fabricmanager-535": "535.261.03-1"},
        }
    """

    def command(self) -> str:
        return shell_scripts.script("installed_kernels").strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "running": "",
            "kernels": {},
            "dkms": False,
            "library": None,
            "grubenv": {},
            "grub_default": None,
            "grubby": None,
            "packages": {},
            "fabric_manager": {},
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        found = self.default()
        for line in output:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "running":
                found["running"] = rest.strip()
            elif kind == "kernel":
                words = rest.split()
                if len(words) == 3:
                    found["kernels"][words[0]] = {
                        "image": words[1] == "yes",
                        "headers": words[2] == "yes",
                        "modules": [],
                    }
            elif kind == "module":
                release, _, tail = rest.partition(" ")
                version, _, path = tail.partition(" ")  # no version: an empty field
                if release in found["kernels"] and path.strip():
                    found["kernels"][release]["modules"].append({"version": version or None, "path": path.strip()})
            elif kind == "dkms":
                found["dkms"] = True
            elif kind == "library" and rest.strip() and not found["library"]:
                found["library"] = rest.strip()  # the first: the multiarch folder's
            elif kind == "grubenv":
                key, _, value = rest.partition(" ")
                if value.strip():
                    found["grubenv"][key] = value.strip()
            elif kind == "grub_default":
                found["grub_default"] = rest.strip().strip("\"'") or None
            elif kind == "grubby":
                found["grubby"] = rest.strip() or None
            elif kind == "fabricmanager":
                words = rest.split()
                if len(words) == 2:
                    found["fabric_manager"][words[0]] = words[1]
            elif kind == "deb":
                want, _, name = rest.partition(" ")
                if name:
                    found["packages"][name.strip()] = {"held": want == "hold"}
        return found
