"""
The node report: one record per node (host, GPUs, driver, toolkit, runtime, the kernel module type,
persistence, Fabric Manager, CUDA, each step), shown as a table at the end of the run and written
as JSON on the controller. Its format is ``NodeReportFormat`` (deploy/reports/formats.py,
deploy/schemas/node-report.schema.json).

Hosts run in parallel greenlets of one pyinfra process: records go into one in-memory store per
run (deploy/foundations/run_state.py), and the JSON file is rewritten whole (temporary file, then rename) from it, so a
reader never sees half a file and no host's record overwrites another's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO, get_args

from pyinfra.api.state import BaseStateCallback

from .. import __version__
from ..foundations import node_text
from ..foundations.run_state import per_run

if TYPE_CHECKING:
    from pyinfra.api import State

StepStatus = Literal["pass", "fail", "skip"]
STATUSES: tuple[StepStatus, ...] = get_args(StepStatus)
PASS, FAIL, SKIP = STATUSES
# the format's version (a reader checks it: a report of another format is refused)
ReportVersion = Literal[1]
REPORT_VERSION: ReportVersion = 1


@dataclass(frozen=True)
class Step:
    name: str
    status: str
    reason: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"step {self.name}: status {self.status!r} is not one of {STATUSES}")


@dataclass(kw_only=True)
class NodeSummary:
    """What verify found of a node's runtime and driver, one line each: the node report's summary
    line and the fleet report's columns (deploy/reports/fleet_report.py's FleetRow) carry these, each as
    ``NodeFormat`` describes it."""

    runtime: str | None = None
    kernel_module_type: str | None = None
    persistence: str | None = None
    fabric_manager: str | None = None
    cuda: str | None = None
    cdi: str | None = None

    def summary(self) -> dict[str, Any]:
        """The summary's fields alone (a FleetRow's from a NodeRecord)."""
        return {item.name: getattr(self, item.name) for item in fields(NodeSummary)}


@dataclass
class NodeRecord(NodeSummary):
    host: str
    gpus: list[str] = field(default_factory=list)
    driver: str | None = None
    toolkit: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def failed(self) -> list[Step]:
        return [step for step in self.steps if step.status == FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data


def node_table(record: NodeRecord) -> str:
    """One node: a summary line, then one line per step (what the node said escaped: ``node_text.printable``)."""
    gpus = ", ".join(record.gpus) if record.gpus else "none"
    lines = [
        node_text.printable(
            f"{record.host}: {'OK' if record.ok else 'FAILED'}  GPUs: {gpus}  driver: {record.driver or '-'}  "
            f"toolkit: {record.toolkit or '-'}  runtime: {record.runtime or '-'}  "
            f"module: {record.kernel_module_type or '-'}  persistence: {record.persistence or '-'}  "
            f"fabric manager: {record.fabric_manager or '-'}  CUDA: {record.cuda or '-'}  CDI: {record.cdi or '-'}"
        )
    ]
    names = [node_text.printable(step.name) for step in record.steps]
    width = max(map(len, names), default=4)
    for name, step in zip(names, record.steps):
        lines.append(f"  {name:<{width}}  {step.status:<4}  {node_text.printable(step.reason)}")
    return "\n".join(lines)


def report_table(records: list[NodeRecord]) -> str:
    header = f"--> GPU node verification ({len(records)} node{'s' if len(records) != 1 else ''})"
    return "\n\n".join([header, *(node_table(record) for record in records)])


def report_json(records: list[NodeRecord]) -> dict[str, Any]:
    return _report_of([record.as_json() for record in records])


def _report_of(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The report of the records' JSON (``NodeRecord.as_json``)."""
    return {
        "version": REPORT_VERSION,
        "gpu_node_version": __version__,
        "ok": all(node["ok"] for node in nodes),
        "nodes": sorted(nodes, key=lambda node: node["host"]),
    }


def write_text_file(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` atomically: a temporary file in the same directory (mode 0600, as mkstemp
    makes it), then a rename, so a reader never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target


def write_json_file(path: str | os.PathLike[str], data: object, indent: int | None = 2) -> Path:
    """Write ``data`` as JSON atomically (``write_text_file``); ``indent=None``: compact, by json's
    C encoder (an indent makes json encode in Python, several times slower)."""
    return write_text_file(path, json.dumps(data, indent=indent, sort_keys=True) + "\n")


class ReportStore:
    """This run's records, by report path then host; printed and written when verification ends."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, NodeRecord]] = {}
        self.encoded: dict[str, dict[str, dict[str, Any]]] = {}  # each record's JSON, made once
        self.verify_ops: set[str | None] = set()
        self.printed = False
        # host -> steps a verify operation before verify's steps found (the DRA prerequisites)
        self.pending: dict[str, list[Step]] = {}

    def add_steps(self, host: str, steps: list[Step]) -> None:
        """Steps the host's record carries when verify adds it: one report, one table row and one
        failure line per host, whichever operation checked the step."""
        self.pending.setdefault(host, []).extend(steps)

    def add(self, path: str, record: NodeRecord) -> None:
        record.steps.extend(self.pending.pop(record.host, ()))
        self.records.setdefault(path, {})[record.host] = record
        self.encoded.setdefault(path, {})[record.host] = record.as_json()
        # Rewritten per record too, so a run that dies later still leaves what it saw: compact, from
        # the records' JSON made once, as a fleet's file is rewritten once per host (finish indents it).
        write_json_file(path, _report_of(list(self.encoded[path].values())), indent=None)

    def all_records(self) -> list[NodeRecord]:
        merged: dict[str, NodeRecord] = {}
        for by_host in self.records.values():
            merged.update(by_host)
        return [merged[name] for name in sorted(merged)]

    def finish(self, stream: TextIO | None = None) -> None:
        """Print the table (stderr: `--json` keeps stdout pure JSON) and write every report."""
        if self.printed or not self.records:
            return
        self.printed = True
        for path, encoded in self.encoded.items():
            write_json_file(path, _report_of(list(encoded.values())))
        out = stream or sys.stderr
        out.write("\n" + report_table(self.all_records()) + "\n")
        for path in self.records:
            out.write(f"--> Report written to {Path(path).resolve()}\n")
        out.flush()


def verify_report_store(state: State) -> ReportStore:
    """The run's verification report (deploy/foundations/run_state.py); the first call hooks its end into the
    State's callbacks."""
    return per_run(state, ReportStore, created=lambda store: state.add_callback_handler(_ReportCallbacks(store)))


@dataclass(frozen=True)
class DriverNote:
    """The driver's state on one host, as the end-of-run driver report read it."""

    no_gpu: bool = False
    reboot_required: bool = False


class DriverNotes(dict[str, DriverNote]):
    """This run's driver notes: inventory host name -> DriverNote (deploy/foundations/run_state.py)."""


class FailureNotes(dict[tuple[str, str | None], str]):
    """This run's failure lines: (inventory host name, operation hash) -> the one line the host
    failed with (deploy/operations/failure.py), for the fleet report (deploy/foundations/run_state.py)."""


class PlannedRefusals(dict[str, list[str]]):
    """This run's refusals found while planning (deploy/operations/failure.py): inventory host name ->
    their lines, in order, for a dry run's fleet report (deploy/foundations/run_state.py)."""


class _ReportCallbacks(BaseStateCallback):
    """Prints the table once every host ran the verification operation (pyinfra runs an
    operation on all hosts before the next one)."""

    def __init__(self, store: ReportStore) -> None:
        self.store = store

    # pyinfra declares its callbacks static, and calls them on the handler it is given: these are methods
    def operation_end(self, state: State, op_hash: str) -> None:  # type: ignore[override]
        if op_hash in self.store.verify_ops:
            self.store.finish()
