"""
The node, fleet and health reports' formats, as pydantic models: the JSON Schema files in deploy/schemas/ are
generated from them (scripts/report_schemas.py), and a report read back (deploy/fleet/from_reports.py)
is checked against them before anything reads a field of it. A run writes its reports without them:
they are built only where a report is read or a schema written.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from . import exit_status, health_report
from .fleet_report import FleetReportVersion, HostOutcome
from .node_report import FAIL, PASS, SKIP, ReportVersion, StepStatus

# The report formats (NodeReportFormat, FleetReportFormat, HealthReportFormat) are these models: the
# schema files in deploy/schemas/ are generated from them (scripts/report_schemas.py) and the tests
# hold the files equal to them and every report the code writes valid against the files. Strict: a
# value of another type is refused, never converted; a key the format does not name is refused.
REPORT_FORMAT = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)


class StepFormat(BaseModel):
    """One verification step."""

    model_config = REPORT_FORMAT
    name: str
    status: StepStatus
    reason: str
    """why it passed, failed or was skipped, in one line"""


class NodeSummaryFormat(BaseModel):
    """What verify found of a node's runtime and driver (``NodeSummary``); null where it did not look."""

    model_config = REPORT_FORMAT
    runtime: str | None
    """the container runtime and its version"""
    kernel_module_type: str | None
    """the nvidia module's type: "open" or "proprietary" (null: none loaded or installed)"""
    persistence: str | None
    """nvidia-persistenced's state and the GPUs' persistence mode"""
    fabric_manager: str | None
    """nvidia-fabricmanager's state, or "not needed" (no NVSwitch)"""
    cuda: str | None
    """cuInit's outcome through the driver's libcuda ("ok, 8 device(s), CUDA 12.2", "error 802 ...")"""
    cdi: str | None
    """one of: off; on, spec current; on, spec stale; on, no spec"""


class NodeFormat(NodeSummaryFormat):
    """One node's record."""

    host: str = Field(min_length=1)
    """the node: its inventory name (verify, a pull run: "@local") or its hostname (the first-boot unit)"""
    ok: bool
    """no step failed"""
    gpus: list[str]
    """each NVIDIA GPU found on the PCI bus"""
    driver: str | None
    """the driver's version"""
    toolkit: str | None
    """the NVIDIA Container Toolkit's version"""
    steps: list[StepFormat]


class NodeReportFormat(BaseModel):
    """A gpu-node node report: written by verify (verify_report_path), a pull run
    (/var/lib/gpu-node/report.json) and the first-boot unit (/var/lib/gpu-node/boot-report.json)."""

    model_config = ConfigDict(
        **REPORT_FORMAT,
        title="gpu-node node report",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )
    version: ReportVersion
    """the format's version"""
    gpu_node_version: str
    """the version of gpu-node that wrote it"""
    ok: bool
    """no node failed"""
    nodes: list[NodeFormat]
    """one per node (the first-boot unit's and a pull run's: one)"""


def schema_text(model: type[BaseModel]) -> str:
    """A format's JSON Schema as deploy/schemas/ ships it."""
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


class HealthProblemFormat(BaseModel):
    """One problem the health check found."""

    model_config = REPORT_FORMAT
    kind: health_report.ProblemKind
    """what it is about: an Xid, a GPU the driver does not see, the driver, ECC, row remaps, retired pages,
    a kernel's module, a service, a reading the check could not make"""
    gpu: str | None = Field(pattern=f"^{health_report.PCI_ADDRESS}$")
    """the GPU's PCI address (0000:3b:00.0); null: the node's"""
    severity: health_report.Severity
    """fatal (a reboot or service), needs reset (a GPU reset), needs attention (an operator or a gpu-node
    run), not read (the check could not tell), informational (nothing to do)"""
    line: str = Field(max_length=health_report.MAX_LINE)
    """the problem in one line"""


class HealthGpuFormat(BaseModel):
    """One NVIDIA GPU on the PCI bus; null where the check could not read the value."""

    model_config = REPORT_FORMAT
    pci: str = Field(pattern=f"^{health_report.PCI_ADDRESS}$")
    """its PCI address, as sysfs names it"""
    name: str | None
    """its product name, as NVML gives it"""
    seen_by_driver: bool
    """the loaded nvidia module initialised it"""
    ecc_uncorrected: int | None = Field(ge=0)
    """uncorrectable ECC errors since the driver loaded (volatile)"""
    retired_pages: int | None = Field(ge=0)
    """pages retired for ECC errors (GPUs before Ampere)"""
    retired_pages_pending: bool | None
    """a page retirement waits for a GPU reset"""
    pending_row_remap: bool | None
    """a row remap waits for a GPU reset (Ampere and newer)"""
    row_remap_failure: bool | None
    """row remapping failed: the GPU needs service"""


class HealthReportFormat(BaseModel):
    """A gpu-node health report: written by the node's health check (/var/lib/gpu-node/health.json,
    docs/health.md) every health_check_interval."""

    model_config = ConfigDict(
        **REPORT_FORMAT,
        title="gpu-node health report",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )
    version: health_report.HealthReportVersion
    """the format's version"""
    gpu_node_version: str
    """the version of gpu-node that wrote it"""
    host: str = Field(min_length=1)
    """the node's hostname"""
    checked_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+00:00$")
    """when the check ran, UTC (ISO 8601)"""
    healthy: bool
    """status is healthy"""
    status: health_report.HealthStatus
    """unhealthy: a problem of severity fatal, needs reset or needs attention; unknown: else a reading
    not made; healthy: neither (the check's exit status: 0 healthy, 1 unhealthy, 2 unknown)"""
    problems: list[HealthProblemFormat] = Field(max_length=health_report.MAX_PROBLEMS)
    """worst first"""
    gpus: list[HealthGpuFormat] = Field(max_length=health_report.MAX_GPUS)
    """each NVIDIA GPU on the PCI bus"""


class FleetHealthFormat(BaseModel):
    """What a node's health report said, as the fleet view read it."""

    model_config = REPORT_FORMAT
    status: health_report.FleetHealthStatus
    """the report's status, or silent: its last report is older than health_silent_after"""
    checked_at: str
    """when the node's check ran (its own clock)"""
    problems: list[HealthProblemFormat] = Field(max_length=health_report.MAX_PROBLEMS)
    gpus: list[HealthGpuFormat] = Field(max_length=health_report.MAX_GPUS)


class VerifyCountsFormat(BaseModel):
    """What verify found on a node: steps by status, and the names of those that failed."""

    model_config = REPORT_FORMAT
    passed: int = Field(alias=PASS, ge=0)
    failed: int = Field(alias=FAIL, ge=0)
    skipped: int = Field(alias=SKIP, ge=0)
    failed_steps: list[str]


class FleetNodeFormat(NodeSummaryFormat):
    """One node's row (``FleetRow``)."""

    host: str
    status: HostOutcome
    changed_operations: list[str]
    failed_operations: list[str]
    failure_lines: list[str]
    """the line each of failed_operations failed with, in the same order ("" where none was kept)"""
    no_gpu: bool | None
    """null: not known"""
    reboot_required: bool | None
    """null: not known"""
    verify: VerifyCountsFormat | None
    """null: verification did not run"""
    health: FleetHealthFormat | None = None
    """null: no health report read (a run's own fleet report, or a node without one)"""


class FleetCountsFormat(BaseModel):
    model_config = REPORT_FORMAT
    converged: int = Field(ge=0)
    changed: int = Field(ge=0)
    failed: int = Field(ge=0)


class FleetReportFormat(BaseModel):
    """A gpu-node fleet report (fleet_report_path; deploy/fleet/from_reports.py's FLEET.json):
    one row per node of a run, or of the nodes' own reports."""

    model_config = ConfigDict(
        **REPORT_FORMAT,
        title="gpu-node fleet report",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )
    version: FleetReportVersion
    """the format's version"""
    gpu_node_version: str
    """the version of gpu-node that wrote it"""
    ok: bool
    """no node failed"""
    exit_status: exit_status.ExitStatus
    """the status the run exits with: 0 done, 1 a node failed, 3 done but a GPU node awaits its reboot"""
    counts: FleetCountsFormat
    awaiting_reboot: list[str]
    """the GPU nodes whose driver change awaits their reboot"""
    nodes: list[FleetNodeFormat]
