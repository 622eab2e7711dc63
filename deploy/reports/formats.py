"""
The node and fleet reports' formats, as pydantic models: the JSON Schema files in deploy/schemas/ are
generated from them (scripts/report_schemas.py), and a report read back (deploy/fleet/from_reports.py)
is checked against them before anything reads a field of it. A run writes its reports without them:
they are built only where a report is read or a schema written.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from . import exit_status
from .fleet_report import CHANGED, CONVERGED, FAILED, FLEET_REPORT_VERSION, NOT_RUN
from .node_report import FAIL, PASS, REPORT_VERSION, SKIP, STATUSES

# The report formats (NodeReportFormat, FleetReportFormat) are these models: the
# schema files in deploy/schemas/ are generated from them (scripts/report_schemas.py) and the tests
# hold the files equal to them and every report the code writes valid against the files. Strict: a
# value of another type is refused, never converted; a key the format does not name is refused.
REPORT_FORMAT = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)


class StepFormat(BaseModel):
    """One verification step."""

    model_config = REPORT_FORMAT
    name: str
    status: Literal[STATUSES]
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

    model_config = ConfigDict(REPORT_FORMAT, title="gpu-node node report",
                              json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"})
    version: Literal[REPORT_VERSION]
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
    status: Literal[CONVERGED, CHANGED, FAILED, NOT_RUN]
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


class FleetCountsFormat(BaseModel):
    model_config = REPORT_FORMAT
    converged: int = Field(ge=0)
    changed: int = Field(ge=0)
    failed: int = Field(ge=0)


class FleetReportFormat(BaseModel):
    """A gpu-node fleet report (fleet_report_path; deploy/fleet/from_reports.py's FLEET.json):
    one row per node of a run, or of the nodes' own reports."""

    model_config = ConfigDict(REPORT_FORMAT, title="gpu-node fleet report",
                              json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"})
    version: Literal[FLEET_REPORT_VERSION]
    """the format's version"""
    gpu_node_version: str
    """the version of gpu-node that wrote it"""
    ok: bool
    """no node failed"""
    exit_status: Literal[exit_status.DONE, exit_status.FAILED, exit_status.REBOOT_REQUIRED]
    """the status the run exits with: 0 done, 1 a node failed, 3 done but a GPU node awaits its reboot"""
    counts: FleetCountsFormat
    awaiting_reboot: list[str]
    """the GPU nodes whose driver change awaits their reboot"""
    nodes: list[FleetNodeFormat]
