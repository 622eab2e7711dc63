"""
What the health check's readings mean (deploy/health/readings.py, journal.py, the Xids kept for
this boot): each GPU's record and the problems, each of a kind and a severity (deploy/reports/health_report.py),
the worst first. Pure: readings in, records out. Standard library only: the health archive carries it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..driver.fabric import fabric_of
from ..reports.health_report import (
    DRIVER,
    ECC,
    FATAL,
    GPU_MISSING,
    INFORMATIONAL,
    KERNEL_MODULE,
    MAX_LINE,
    NEEDS_ATTENTION,
    NEEDS_RESET,
    NOT_READ,
    READING,
    RETIRED_PAGES,
    ROW_REMAP,
    SERVICE,
    SEVERITIES,
    XID,
)
from .node import printable
from .readings import Driver, Smi, Unit

PERSISTENCED = "nvidia-persistenced.service"
FABRIC_MANAGER = "nvidia-fabricmanager.service"
IMEX = "nvidia-imex.service"


@dataclass(frozen=True)
class Problem:
    kind: str
    gpu: str | None
    severity: str
    line: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "gpu": self.gpu, "severity": self.severity, "line": printable(self.line)[:MAX_LINE]}


@dataclass(frozen=True)
class KeptXid:
    """An Xid seen this boot, kept in the check's state until the next boot."""

    gpu: str
    xid: int
    severity: str
    meaning: str
    count: int = 1

    @property
    def problem(self) -> Problem:
        times = f" ({self.count} times this boot)" if self.count > 1 else ""
        return Problem(XID, self.gpu, self.severity, f"Xid {self.xid} on {self.gpu}: {self.meaning}{times}")


@dataclass
class Readings:
    """What one run read. ``running`` and ``next_boot``: (kernel release, its module's version, the
    module's path); ``next_boot`` None where it is the running kernel or not known."""

    bus: dict[str, Any]
    driver: Driver
    smi: Smi
    library: str | None = None
    running: tuple[str, str | None, str | None] | None = None
    next_boot: tuple[str, str | None, str | None, str] | None = None
    units: dict[str, Unit] | None = None
    xids: list[KeptXid] = field(default_factory=list)
    journal_problem: str | None = None
    journal_more: bool = False
    nvidia_persistenced: bool = True
    fabric_manager_install: bool = True


def services_wanted(
    readings_bus: dict[str, Any], nvidia_persistenced: bool, fabric_manager_install: bool
) -> tuple[str, ...]:
    """The units whose state the check asks systemd for (IMEX always: it counts where enabled)."""
    wanted = [PERSISTENCED] if nvidia_persistenced else []
    if fabric_manager_install and fabric_of({"switches": readings_bus["switches"]}).needs_fabric_manager:
        wanted.append(FABRIC_MANAGER)
    return (*wanted, IMEX)


def _gpu_records(found: Readings, problems: list[Problem]) -> list[dict[str, Any]]:
    driver, smi = found.driver, found.smi
    loaded = bool(driver.loaded) or smi.answered
    seen = driver.gpus if driver.gpus is not None else (frozenset(smi.gpus) if smi.answered else None)
    slots = [gpu["slot"] for gpu in found.bus["gpus"]]
    if not loaded:
        problems.append(
            Problem(
                DRIVER,
                None,
                NEEDS_ATTENTION,
                f"the nvidia module is not loaded: {len(slots)} GPU(s) on the PCI bus unused",
            )
        )
    elif seen is None and not smi.failure:
        problems.append(
            Problem(
                READING,
                None,
                NOT_READ,
                "the GPUs the driver sees not read (no /proc/driver/nvidia/gpus, no answer of nvidia-smi)",
            )
        )
    records = []
    for slot in slots:
        answer = smi.gpus.get(slot)
        seen_by_driver = bool(loaded and seen is not None and slot in seen)
        if loaded and seen is not None and not seen_by_driver:
            problems.append(
                Problem(GPU_MISSING, slot, FATAL, f"GPU {slot} is on the PCI bus but not seen by the driver")
            )
        elif seen_by_driver and smi.answered and answer is None:
            problems.append(Problem(GPU_MISSING, slot, FATAL, f"GPU {slot} is seen by the driver but not by NVML"))
        record = {
            "pci": slot,
            "name": None,
            "seen_by_driver": seen_by_driver,
            "ecc_uncorrected": None,
            "retired_pages": None,
            "retired_pages_pending": None,
            "pending_row_remap": None,
            "row_remap_failure": None,
        }
        if answer is not None:
            record.update(
                name=printable(answer.name) if answer.name else None,
                ecc_uncorrected=answer.ecc_uncorrected,
                retired_pages=answer.retired_pages,
                retired_pages_pending=answer.retired_pages_pending,
                pending_row_remap=answer.pending_row_remap,
                row_remap_failure=answer.row_remap_failure,
            )
            problems += _memory_problems(slot, answer)
        records.append(record)
    return records


def _memory_problems(slot: str, answer: Any) -> list[Problem]:
    found = []
    if answer.row_remap_failure:
        found.append(Problem(ROW_REMAP, slot, FATAL, f"GPU {slot}: row remapping failed (the GPU needs service)"))
    if answer.pending_row_remap:
        found.append(Problem(ROW_REMAP, slot, NEEDS_RESET, f"GPU {slot}: row remap pending (active after a GPU reset)"))
    if answer.retired_pages_pending:
        found.append(
            Problem(RETIRED_PAGES, slot, NEEDS_RESET, f"GPU {slot}: page retirement pending (active after a GPU reset)")
        )
    if answer.ecc_uncorrected:
        found.append(
            Problem(
                ECC,
                slot,
                INFORMATIONAL,
                f"GPU {slot}: {answer.ecc_uncorrected} uncorrectable ECC error(s) since the driver loaded",
            )
        )
    return found


def loaded_version(found: Readings) -> str | None:
    """The loaded module's version: sysfs's, else NVML's (which answers only for its own module)."""
    answered = {gpu.driver_version for gpu in found.smi.gpus.values() if gpu.driver_version}
    return found.driver.version or (min(answered) if len(answered) == 1 else None)


def _driver_problems(found: Readings) -> list[Problem]:
    smi, module = found.smi, loaded_version(found)
    loaded = bool(found.driver.loaded) or smi.answered
    if module and found.library and module != found.library:
        return [
            Problem(
                DRIVER,
                None,
                NEEDS_ATTENTION,
                f"loaded module {module}, NVML library {found.library}: version mismatch (reload the driver or reboot)",
            )
        ]
    if smi.mismatch:
        return [
            Problem(DRIVER, None, NEEDS_ATTENTION, "NVML refuses the loaded module: driver/library version mismatch")
        ]
    if smi.failure and loaded:
        return [Problem(DRIVER, None, NEEDS_ATTENTION, smi.failure)]
    if smi.missing and loaded:
        return [
            Problem(READING, None, NOT_READ, "nvidia-smi is not installed: ECC, retired pages, row remaps not read")
        ]
    return []


def _kernel_problems(found: Readings) -> list[Problem]:
    driver = found.library or loaded_version(found)
    problems = []
    if found.running is not None and (driver or found.running[2]):
        kernel, version, path = found.running
        if path is None:
            problems.append(
                Problem(KERNEL_MODULE, None, NEEDS_ATTENTION, f"no nvidia module for the running kernel {kernel}")
            )
        elif driver and version and version != driver:
            problems.append(
                Problem(
                    KERNEL_MODULE,
                    None,
                    NEEDS_ATTENTION,
                    f"the running kernel {kernel}'s nvidia module is {version}, the driver {driver}",
                )
            )
    if found.next_boot is not None and driver:
        kernel, version, path, how = found.next_boot
        if path is None or (version and version != driver):
            has = f" (it has {version})" if version else ""
            problems.append(
                Problem(
                    KERNEL_MODULE,
                    None,
                    NEEDS_ATTENTION,
                    f"the next boot's kernel {kernel} has no nvidia module of driver {driver}{has}: "
                    f"booted, the node has no GPU ({how})",
                )
            )
    return problems


def _service_problems(found: Readings) -> list[Problem]:
    if found.units is None:
        return [
            Problem(READING, None, NOT_READ, "systemctl did not answer: persistenced, Fabric Manager, IMEX not read")
        ]
    problems = []
    for name in services_wanted(found.bus, found.nvidia_persistenced, found.fabric_manager_install):
        unit = found.units.get(name)
        if name == FABRIC_MANAGER and (unit is None or not unit.loaded):
            problems.append(
                Problem(SERVICE, None, NEEDS_ATTENTION, f"NVSwitches on the PCI bus, but {name} is not installed")
            )
        elif unit is None or not unit.loaded or (name == IMEX and unit.enabled != "enabled"):
            continue  # not installed (persistenced), or not configured (IMEX)
        elif unit.active != "active":
            problems.append(
                Problem(SERVICE, None, NEEDS_ATTENTION, f"{name} is {printable(unit.active) or 'not active'}")
            )
    return problems


def assess(found: Readings) -> tuple[list[dict[str, Any]], list[Problem]]:
    """(a record per GPU on the PCI bus, the problems worst first)."""
    problems: list[Problem] = []
    if found.bus.get("unreadable"):
        problems.append(Problem(READING, None, NOT_READ, "the PCI bus could not be read (/sys/bus/pci/devices)"))
    if not found.bus["gpus"]:
        return [], problems
    gpus = _gpu_records(found, problems)
    problems += _driver_problems(found) + _kernel_problems(found) + _service_problems(found)
    problems += [kept.problem for kept in found.xids]
    if found.journal_problem:
        problems.append(Problem(READING, None, NOT_READ, found.journal_problem))
    if found.journal_more:
        problems.append(
            Problem(
                READING,
                None,
                INFORMATIONAL,
                "more kernel lines since the last check than one run reads: the next run reads on",
            )
        )
    return gpus, sorted(problems, key=lambda problem: SEVERITIES.index(problem.severity))
