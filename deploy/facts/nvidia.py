"""Driver-side facts: GPUs on the PCI bus, Secure Boot, kernel modules, disk, repositories."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from pyinfra.api import StringCommand

from ..foundations import shell_scripts
from .base import NodeFact

NVIDIA_PCI_VENDOR = "0x10de"
# PCI class 0x03xx: display controllers (VGA, 3D). A GPU's HDMI audio function is 0x0403.
DISPLAY_CLASS_PREFIX = "0x03"
# NVSwitch chips (NVLink 3/4) show up as bridges of class 0x0680 ("other bridge").
SWITCH_CLASS_PREFIX = "0x0680"
# NVLink5 baseboards (HGX B200/B300) show their switches to the host only through ConnectX
# bridge functions of Mellanox's vendor ID, whose PCI VPD carries the SW_MNG marker.
MELLANOX_PCI_VENDOR = "0x15b3"
SWITCH_MANAGEMENT_MARKER = "SW_MNG"
WATCHED_MODULES = ("nouveau", "nova_core", "nova_drm", "nvidia")


def node_script() -> str:
    """NodeSurvey's command (deploy/shell/node_survey.sh)."""
    return shell_scripts.script(
        "node_survey",
        WATCHED_MODULES,
        nvidia_vendor=NVIDIA_PCI_VENDOR,
        mellanox_vendor=MELLANOX_PCI_VENDOR,
        switch_marker=SWITCH_MANAGEMENT_MARKER,
    )


class NodeSurvey(NodeFact[dict[str, Any]]):
    """
    The host's GPUs, kernel, modules, disk and reboot state: what preflight, the driver stage
    and the driver report decide on, in one command:
    NVIDIA display devices and NVSwitch bridges on the PCI bus (``/sys/bus/pci``, or ``lspci -d 10de:`` without
    sysfs), the Mellanox physical functions and whether their VPD marks them as an NVLink5
    switch-management bridge (``SW_MNG``, what NVIDIA's driver container looks for; sysfs only),
    Secure Boot (``mokutil --sb-state`` or the EFI variable; None: not EFI / unknown),
    which of nouveau / nova_core / nova_drm / nvidia are present under ``/sys/module``, the
    loaded and the built (``modinfo``) nvidia module versions, ``uname -r``, free MiB on ``/``
    and ``/var``, Arch's installed kernel package bases, and the reboot-required marker.

    .. code:: python

        {
            "gpus": [{"slot": "0000:01:00.0", "device": "0x2204", "class": "0x030000"}],
            "switches": [],
            "mellanox": [{"slot": "0000:29:00.0", "device": "0x1021", "class": "0x020700",
                          "switch_management": False}],
            "secure_boot": False,
            "modules": ["nouveau"],
            "loaded_version": None,
            "built_version": "535.216.03",
            "kernel": "6.1.0-18-amd64",
            "free_mb": {"/": 80832, "/var": 80832},
            "kernel_pkgbases": [],
            "running_pkgbase": None,
            "reboot_required": False,
            "reboot_packages": [],
        }
    """

    def command(self) -> str:
        return node_script().strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "gpus": [],
            "switches": [],
            "mellanox": [],
            "secure_boot": None,
            "modules": [],
            "loaded_version": None,
            "built_version": None,
            "kernel": "",
            "free_mb": {},
            "kernel_pkgbases": [],
            "running_pkgbase": None,
            "reboot_required": False,
            "reboot_packages": [],
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        node = self.default()
        efivar = None
        mokutil = None
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind == "pci":
                parts = rest.split()
                if len(parts) == 3 and parts[2].startswith(DISPLAY_CLASS_PREFIX):
                    node["gpus"].append({"slot": parts[0], "device": parts[1], "class": parts[2]})
                elif len(parts) == 3 and parts[2].startswith(SWITCH_CLASS_PREFIX):
                    node["switches"].append({"slot": parts[0], "device": parts[1], "class": parts[2]})
            elif kind == "mellanox":
                parts = rest.split()
                if len(parts) == 4:
                    node["mellanox"].append(
                        {
                            "slot": parts[0],
                            "device": parts[1],
                            "class": parts[2],
                            "switch_management": parts[3] == SWITCH_MANAGEMENT_MARKER,
                        }
                    )
            elif kind == "secureboot":
                source, _, value = rest.partition(" ")
                if source == "mokutil":
                    text = value.lower()
                    if "secureboot enabled" in text:
                        mokutil = True
                    elif "secureboot disabled" in text:
                        mokutil = False
                elif source == "efivar" and value in ("0", "1"):
                    efivar = value == "1"
            elif kind == "module":
                node["modules"].append(rest)
            elif kind in ("loaded_version", "built_version", "running_pkgbase"):
                node[kind] = rest or None
            elif kind == "kernel":
                node["kernel"] = rest
            elif kind == "disk":
                mount, _, free = rest.rpartition(" ")
                if free.isdigit():
                    node["free_mb"][mount] = int(free)
            elif kind == "kernel_pkgbase" and rest:
                node["kernel_pkgbases"].append(rest)
            elif kind == "reboot_required":
                node["reboot_required"] = True
            elif kind == "reboot_package" and rest:
                node["reboot_packages"].append(rest)
        node["secure_boot"] = mokutil if mokutil is not None else efivar
        node["kernel_pkgbases"] = sorted(set(node["kernel_pkgbases"]))
        return node


class PackagesAvailable(NodeFact[dict[str, Any]]):
    """
    Which of the named packages the package manager can install (from its current lists):
    ``check`` is its shell test for one {package} (the family's ``available_check``, deploy/distros/families.py).

    .. code:: python

        {"linux-headers-6.1.0-18-amd64": False, "linux-headers-amd64": True}
    """

    def command(self, check: str, packages: Iterable[str] = ()) -> str | StringCommand:
        parts = ["echo package-availability;"]
        for package in packages:
            quoted = shlex.quote(package)
            parts.append(f"if {check.format(package=quoted)}; then echo yes {quoted}; else echo no {quoted}; fi;")
        parts.append("true")
        return " ".join(parts)

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        found = {}
        for line in output:
            answer, _, package = line.strip().partition(" ")
            if answer in ("yes", "no") and package:
                found[package] = answer == "yes"
        return found


class IgnoredPackages(NodeFact[list[Any]]):
    """
    Packages a holding command lists (e.g. pacman's IgnorePkg lines).

    .. code:: python

        ["nvidia", "nvidia-utils"]
    """

    def command(self, list_command: str) -> str:
        return f"({list_command}) 2>/dev/null || true"

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        return sorted({name for line in output for name in line.split()})


class RecommendedDriver(NodeFact[list[Any]]):
    """The output of the family's driver recommender (``ubuntu-drivers list --gpgpu``), as lines."""

    def command(self, recommend_command: str) -> str:
        return f"({recommend_command}) 2>/dev/null || true"

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        return [line.strip() for line in output if line.strip()]
