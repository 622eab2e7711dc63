"""
What the health check reads of the node besides the kernel log (deploy/health/journal.py), each
reading bounded and parsed defensively (a value it cannot read is None, never an exception): the
GPUs on the PCI bus and those the driver sees, the loaded module's version, the NVML library's,
nvidia-smi's answers (ECC, retired pages, row remaps), the module each of the running and the next
boot's kernel has, and the services' states. Standard library only: the health archive carries it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..driver.next_boot import LIBRARY_VERSION, next_boot
from ..node.first_boot import module_path, pci_devices
from .node import HealthHost, Output, said

PCI_ADDRESS = re.compile(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")
# re.ASCII: \d is any script's digits otherwise ("٥٣٥.٢٦١" no version a driver has)
VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?", re.ASCII)
# /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  535.261.03  ..."
PROC_VERSION = re.compile(r"Kernel Module\b[^0-9]*?(\d+\.\d+(?:\.\d+)?)", re.ASCII)
SMI_FIELDS = (
    "pci.bus_id",
    "name",
    "driver_version",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
)
REMAP_FIELDS = ("gpu_bus_id", "remapped_rows.pending", "remapped_rows.failure")
MISMATCH = "Driver/library version mismatch"
# A node has at most a few dozen GPUs: more lines than this are no answer of nvidia-smi's.
MAX_GPUS = 64


def pci(text: str) -> str | None:
    """A PCI address as sysfs names it (four-digit domain, lower case): nvidia-smi prints eight."""
    match = PCI_ADDRESS.fullmatch(text.strip())
    if match is None:
        return None
    return f"{match[1][-4:].rjust(4, '0')}:{match[2]}:{match[3]}.{match[4]}".lower()


def _number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else None  # int() refuses "²"


def _yes(text: str) -> bool | None:
    return {"yes": True, "no": False, "1": True, "0": False}.get(text.strip().lower())


@dataclass
class SmiGpu:
    name: str | None = None
    driver_version: str | None = None
    ecc_uncorrected: int | None = None
    retired_pages: int | None = None
    retired_pages_pending: bool | None = None
    pending_row_remap: bool | None = None
    row_remap_failure: bool | None = None


@dataclass
class Smi:
    """nvidia-smi's answers: ``gpus`` by PCI address when it answered; ``missing``: not installed;
    ``failure``: its exit status and first words when it did not answer."""

    gpus: dict[str, SmiGpu] = field(default_factory=dict)
    answered: bool = False
    missing: bool = False
    failure: str | None = None
    mismatch: bool = False  # NVML refused: the driver's module and library differ


def smi_command(host: HealthHost, driver_root: str) -> list[str] | None:
    """nvidia-smi on the node's path, else the driver root's (a driver container's); None: neither."""
    found = host.which("nvidia-smi")
    if found is None and driver_root != "/":
        candidate = os.path.join(driver_root, "usr/bin/nvidia-smi")
        found = candidate if os.access(candidate, os.X_OK) else None
    return [found] if found else None


def read_smi(host: HealthHost, driver_root: str = "/") -> Smi:
    command = smi_command(host, driver_root)
    if command is None:
        return Smi(missing=True)
    query = host.run(
        [*command, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"], max_lines=MAX_GPUS
    )
    if query.missing:
        return Smi(missing=True)
    if query.code != 0:
        text = "\n".join(query.lines) + "\n" + query.error
        return Smi(
            failure=f"nvidia-smi {'did not finish' if query.code is None else f'exited {query.code}'}: "
            f"{said(text) or 'no output'}",
            mismatch=MISMATCH in text,
        )
    smi = Smi(answered=True)
    for line in query.lines:
        values = [value.strip() for value in line.split(",")]
        address = pci(values[0]) if len(values) == len(SMI_FIELDS) else None
        if address is None:
            continue  # not an answer to the query (a stand-in's or a wrapper's words)
        single, double = _number(values[4]), _number(values[5])
        smi.gpus[address] = SmiGpu(
            name=values[1][:100] or None,
            driver_version=values[2] if VERSION.fullmatch(values[2]) else None,
            ecc_uncorrected=_number(values[3]),
            retired_pages=None if single is None and double is None else (single or 0) + (double or 0),
            retired_pages_pending=_yes(values[6]),
        )
    remaps = host.run(
        [*command, f"--query-remapped-rows={','.join(REMAP_FIELDS)}", "--format=csv,noheader,nounits"],
        max_lines=MAX_GPUS,
    )
    for line in remaps.lines if remaps.code == 0 else ():  # GPUs before Ampere have no row remapper
        values = [value.strip() for value in line.split(",")]
        address = pci(values[0]) if len(values) == len(REMAP_FIELDS) else None
        if address in smi.gpus:
            smi.gpus[address].pending_row_remap = _yes(values[1])
            smi.gpus[address].row_remap_failure = _yes(values[2])
    return smi


@dataclass(frozen=True)
class Driver:
    """The loaded nvidia module: ``loaded`` (None: cannot tell), its version, the GPUs it
    initialised (/proc/driver/nvidia/gpus; None: not listed)."""

    loaded: bool | None
    version: str | None
    gpus: frozenset[str] | None


def read_driver(host: HealthHost) -> Driver:
    sys_version = host.read(os.path.join(host.sys_root, "module", "nvidia", "version"))
    proc = os.path.join(host.proc_root, "driver", "nvidia")
    version = sys_version.strip() if sys_version and VERSION.fullmatch(sys_version.strip()) else None
    if version is None:
        match = PROC_VERSION.search(host.read(os.path.join(proc, "version")) or "")
        version = match[1] if match else None
    loaded = os.path.isdir(os.path.join(host.sys_root, "module", "nvidia")) or os.path.isdir(proc)
    listed = host.listing(os.path.join(proc, "gpus")) if os.path.isdir(os.path.join(proc, "gpus")) else None
    gpus = None if listed is None else frozenset(filter(None, map(pci, listed)))
    return Driver(loaded or None, version, gpus)


def library(host: HealthHost, driver_root: str = "/") -> tuple[str | None, str | None]:
    """(the NVML library's version, its path): the file the loader's libnvidia-ml.so.1 names, else
    the first versioned file in the library folders; (None, None) where there is none."""
    folders = [os.path.join(driver_root, folder.lstrip("/")) for folder in host.library_folders]
    for folder in folders:
        link = os.path.join(folder, "libnvidia-ml.so.1")
        target = os.path.realpath(link) if os.path.lexists(link) else None
        match = LIBRARY_VERSION.search(target or "")
        if match and target is not None and os.path.isfile(target):
            return match[1], target
    for folder in folders:
        for name in host.listing(folder, limit=4096):
            match = LIBRARY_VERSION.fullmatch(name)
            path = os.path.join(folder, name)
            if match and os.path.isfile(path) and not os.path.islink(path):
                return match[1], path
    return None, None


def module_version(host: HealthHost, kernel: str) -> tuple[str | None, str | None]:
    """(the version of the nvidia module ``kernel``'s modules.dep lists, its path); (None, None):
    none listed; (None, path): modinfo could not read it."""
    path = module_path(replace(host, kernel=kernel))
    if path is None:
        return None, None
    answer = host.run(["modinfo", "-F", "version", path], max_lines=4)
    version = answer.lines[0].strip() if answer.code == 0 and answer.lines else ""
    return (version if VERSION.fullmatch(version) else None), path


def _grub_values(text: str | None, names: tuple[str, ...]) -> dict[str, str]:
    values = {}
    for line in (text or "").splitlines():
        name, _, value = line.partition("=")
        if name.strip() in names and value.strip():
            values[name.strip()] = value.strip().strip("\"'")[:256]
    return values


def installed_kernels(host: HealthHost) -> dict[str, dict[str, Any]]:
    """{release: {"image": bool}} of each folder under the module trees, as the InstalledKernels fact
    reads them (deploy/shell/installed_kernels.sh)."""
    kernels: dict[str, dict[str, Any]] = {}
    for tree in dict.fromkeys(map(os.path.realpath, host.module_trees)):
        for release in host.listing(tree, limit=64):
            images = (
                os.path.join(host.boot_root, f"vmlinuz-{release}"),
                os.path.join(host.boot_root, f"Image-{release}"),
                os.path.join(tree, release, "vmlinuz"),
                os.path.join(tree, release, "Image"),
            )
            if os.path.isdir(os.path.join(tree, release)):
                kernels.setdefault(release, {"image": False})["image"] |= any(map(os.path.exists, images))
    return kernels


def next_boot_kernel(host: HealthHost) -> tuple[str | None, str]:
    """(the kernel the boot loader starts next, what named it): driver/next_boot.py's decision over
    GRUB's environment block, /etc/default/grub's GRUB_DEFAULT and grubby's default."""
    grubenv = next(
        (
            text
            for text in (
                host.read(os.path.join(host.boot_root, "grub", "grubenv")),
                host.read(os.path.join(host.boot_root, "grub2", "grubenv")),
            )
            if text
        ),
        None,
    )
    default = _grub_values(host.read(os.path.join(host.etc_root, "default", "grub")), ("GRUB_DEFAULT",))
    answer = host.run(["grubby", "--default-kernel"], max_lines=4)  # Fedora's and RHEL's boot loader tool
    grubby = answer.lines[0].strip() if answer.code == 0 and answer.lines else None
    found = next_boot(
        {
            "kernels": installed_kernels(host),
            "grubenv": _grub_values(grubenv, ("saved_entry", "next_entry")),
            "grub_default": default.get("GRUB_DEFAULT"),
            "grubby": grubby,
        }
    )
    return found.release, found.how


@dataclass(frozen=True)
class Unit:
    loaded: bool  # systemd knows the unit (its file is installed)
    active: str  # ActiveState: active, failed, inactive ...
    enabled: str  # UnitFileState: enabled, disabled, masked ...


def units(host: HealthHost, names: tuple[str, ...]) -> dict[str, Unit] | None:
    """Each unit's state, in one ``systemctl show``; None where systemctl did not answer."""
    if not names:
        return {}
    answer: Output = host.run(
        ["systemctl", "show", "--property=Id,LoadState,ActiveState,UnitFileState", "--", *names],
        max_lines=8 * len(names),
    )
    if answer.code != 0:
        return None
    found: dict[str, Unit] = {}
    block: dict[str, str] = {}
    for line in [*answer.lines, ""]:
        if not line.strip():
            if block.get("Id") in names:
                found[block["Id"]] = Unit(
                    block.get("LoadState") == "loaded", block.get("ActiveState", ""), block.get("UnitFileState", "")
                )
            block = {}
            continue
        key, _, value = line.partition("=")
        block[key] = value.strip()[:64]
    return found


def bus(host: HealthHost) -> dict[str, Any]:
    """The NVIDIA GPUs and NVSwitches on the PCI bus (the first-boot unit's reading)."""
    try:
        return pci_devices(host.sys_root)
    except (OSError, UnicodeDecodeError):
        return {"gpus": [], "switches": [], "unreadable": True}
