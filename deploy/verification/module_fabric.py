"""
Verify's kernel module and fabric steps: the module type loaded and installed (open or
proprietary, as nvidia_kernel_modules asks), persistence, and Fabric Manager where NVSwitch needs
it. Pure.
"""

from __future__ import annotations

from typing import Any

from ..driver.fabric import fabric_of
from ..facts.verification import FABRIC_MANAGER_UNIT, PERSISTENCED_UNIT, unit_state
from ..reports.node_report import FAIL, PASS, SKIP, Step
from .options import NO_GPU, VerifyOptions
from .readout import gpus_on_pci

# modinfo's license of each type of the nvidia module
MODULE_LICENSES = {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}


def loaded_module_type(readout: dict[str, Any]) -> str | None:
    """The loaded module's type, from /proc/driver/nvidia/version ("... Open Kernel Module ...")."""
    text = readout["kernel_module"]
    if not text:
        return None
    return "open" if "Open Kernel Module" in text else "proprietary"


def installed_module_type(readout: dict[str, Any]) -> str | None:
    """The type of the module installed for the running kernel, from modinfo's license."""
    license_ = readout["kernel_module_license"]
    return MODULE_LICENSES.get(license_, f"unknown (license {license_})") if license_ else None


def module_type_summary(readout: dict[str, Any]) -> str | None:
    loaded, installed = loaded_module_type(readout), installed_module_type(readout)
    if loaded:
        return loaded
    return f"{installed} (installed, not loaded)" if installed else None


def module_type_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    loaded, installed = loaded_module_type(readout), installed_module_type(readout)
    wanted = options.kernel_module_type
    setting = f"nvidia_kernel_modules = {wanted}"
    license_note = f" (modinfo license {readout['kernel_module_license']})" if installed else ""
    if loaded:
        if wanted != "auto" and loaded != wanted:
            return Step(
                "kernel_module_type",
                FAIL,
                f"the {loaded} nvidia kernel module is loaded but {setting}: run the driver stage, then reboot",
            )
        if installed and installed != loaded:
            return Step(
                "kernel_module_type",
                FAIL,
                f"the {loaded} nvidia kernel module is loaded but the {installed} one is installed"
                f"{license_note}: reboot to load it",
            )
        return Step(
            "kernel_module_type", PASS, f"{loaded} kernel module loaded (/proc/driver/nvidia/version; {setting})"
        )
    if installed and wanted != "auto" and installed != wanted:
        return Step(
            "kernel_module_type",
            FAIL,
            f"the {installed} nvidia kernel module is installed{license_note} but {setting}: run the driver stage",
        )
    prefix = "" if gpus_on_pci(readout) else f"{NO_GPU}: "
    if installed:
        return Step(
            "kernel_module_type",
            SKIP,
            f"{prefix}nvidia kernel module not loaded; the installed one is {installed}{license_note}",
        )
    return Step("kernel_module_type", SKIP, f"{prefix}no nvidia kernel module loaded or installed")


def persistence_modes(readout: dict[str, Any]) -> dict[int, str]:
    return readout["smi"]["persistence"] if readout["smi"]["exit_code"] == 0 else {}


def persistence_summary(readout: dict[str, Any]) -> str:
    modes = persistence_modes(readout)
    text = f"{PERSISTENCED_UNIT} {unit_state(readout, PERSISTENCED_UNIT)}"
    if modes:
        enabled = sum(mode == "Enabled" for mode in modes.values())
        text += f", mode on {enabled}/{len(modes)} GPU(s)"
    return text


def persistence_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    state = unit_state(readout, PERSISTENCED_UNIT)
    modes = persistence_modes(readout)
    disabled = sorted(index for index, mode in modes.items() if mode != "Enabled")
    seen = f"{PERSISTENCED_UNIT} {state}"
    if not options.persistenced:
        return Step("persistence", SKIP, f"nvidia_persistenced is false ({seen})")
    if not gpus_on_pci(readout):
        return Step("persistence", SKIP, f"{NO_GPU} ({seen})")
    if state != "active":
        return Step(
            "persistence",
            FAIL,
            f"{seen}: the driver is set up and torn down with every CUDA client; "
            f"systemctl enable --now {PERSISTENCED_UNIT}",
        )
    if disabled:
        listed = ", ".join(str(index) for index in disabled)
        return Step("persistence", FAIL, f"{seen} but persistence mode is off on GPU {listed} (nvidia-smi)")
    if not modes:
        return Step("persistence", PASS, f"{seen} (persistence mode not read: nvidia-smi did not answer)")
    return Step("persistence", PASS, f"{seen}; persistence mode Enabled on {len(modes)} GPU(s)")


def fabric_manager_summary(readout: dict[str, Any]) -> str:
    if not fabric_of(readout["node"]).needs_fabric_manager:
        return "not needed"
    return unit_state(readout, FABRIC_MANAGER_UNIT)


def fabric_manager_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    fabric = fabric_of(readout["node"])
    state = unit_state(readout, FABRIC_MANAGER_UNIT)
    if not fabric.needs_fabric_manager:
        installed = f" ({FABRIC_MANAGER_UNIT} {state})" if state not in ("not installed", "unknown") else ""
        return Step("fabric_manager", SKIP, f"{fabric.evidence}: Fabric Manager not needed{installed}")
    if state == "active":
        return Step("fabric_manager", PASS, f"{FABRIC_MANAGER_UNIT} active ({fabric.evidence})")
    hint = (
        f"systemctl enable --now {FABRIC_MANAGER_UNIT}"
        if state != "not installed"
        else "install Fabric Manager at the driver's version"
        + ("" if options.fabric_manager_install else " (fabric_manager_install is false)")
    )
    return Step(
        "fabric_manager",
        FAIL,
        f"{FABRIC_MANAGER_UNIT} {state} on a node with {fabric.evidence}: CUDA cannot start without it; {hint}",
    )
