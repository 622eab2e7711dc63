"""
The fleet report: after a run, one row per node (converged / changed / failed, reboot required,
no GPU, the verification summary, and what verify found of the driver: module flavour,
persistence, Fabric Manager, CUDA), printed last and written as one JSON file on the controller,
so an operator of many nodes reads one table instead of pyinfra's per-operation output.

pyinfra calls its state callbacks' ``host_disconnect`` for every host it connected to once the run
is over (also when hosts failed): the report is made when the last one disconnects. A run that did
not execute (``--dry``, a declined confirmation) has no report.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyinfra.api.state import BaseStateCallback, StateStage

from deploy.report import FAIL, PASS, SKIP, DriverNote, DriverNotes, verify_report_store, write_json_file
from deploy.run_state import per_run

FLEET_REPORT_VERSION = 1
CONVERGED, CHANGED, FAILED, NOT_RUN = "converged", "changed", "failed", "not run"


@dataclass
class FleetRow:
    host: str
    status: str
    changed_operations: list[str] = field(default_factory=list)
    failed_operations: list[str] = field(default_factory=list)
    no_gpu: bool | None = None
    reboot_required: bool | None = None
    # {"pass": n, "fail": n, "skip": n, "failed_steps": [...]}, None when verification did not run
    verify: dict[str, Any] | None = None
    # the runtimes verify found, e.g. "containerd 2.1.9", None when verification did not run
    runtime: str | None = None
    # what verify found of the driver (deploy/report.py's NodeRecord), None when it did not run:
    # the module's flavour, persistence, Fabric Manager, cuInit's outcome
    module_flavour: str | None = None
    persistence: str | None = None
    fabric_manager: str | None = None
    cuda: str | None = None
    cdi: str | None = None

    def verify_text(self) -> str:
        if self.verify is None:
            return "not run"
        text = f"{self.verify[PASS]} pass, {self.verify[FAIL]} fail, {self.verify[SKIP]} skip"
        if self.verify["failed_steps"]:
            text += ": " + ", ".join(self.verify["failed_steps"])
        return text


def _flag(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells, each column as wide as its widest cell (the last one as it is)."""
    widths = [max(len(line[index]) for line in table) for index in range(len(table[0]) - 1)]
    return ["    " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1]
            for line in table]


DRIVER_COLUMNS = ("node", "module", "persistence", "fabric manager", "CUDA", "CDI")


def driver_table(rows: list[FleetRow]) -> list[str]:
    """What verify found of the driver on each node it ran on: module flavour, persistence,
    Fabric Manager, CUDA, CDI."""
    verified = [row for row in rows if row.verify is not None]
    if not verified:
        return []
    table = [DRIVER_COLUMNS] + [
        (row.host, row.module_flavour or "-", row.persistence or "-", row.fabric_manager or "-", row.cuda or "-",
         row.cdi or "-")
        for row in verified
    ]
    return ["--> Driver (verify):", *_columns(table)]


def fleet_table(rows: list[FleetRow]) -> str:
    counts = {status: sum(row.status == status for row in rows) for status in (CONVERGED, CHANGED, FAILED)}
    header = (f"--> Fleet report: {len(rows)} node{'s' if len(rows) != 1 else ''}: {counts[CONVERGED]} converged, "
              f"{counts[CHANGED]} changed, {counts[FAILED]} failed")
    columns = ("node", "result", "reboot required", "no GPU", "runtime", "verify")
    table = [columns] + [
        (row.host, row.status, _flag(row.reboot_required), _flag(row.no_gpu), row.runtime or "-", row.verify_text())
        for row in rows
    ]
    lines = [header, *_columns(table)]
    for row in rows:
        if row.failed_operations:
            lines.append(f"    {row.host} failed in: {'; '.join(row.failed_operations)}")
    lines += driver_table(rows)
    return "\n".join(lines)


def fleet_json(rows: list[FleetRow]) -> dict[str, Any]:
    return {
        "version": FLEET_REPORT_VERSION,
        "ok": all(row.status != FAILED for row in rows),
        "counts": {status: sum(row.status == status for row in rows) for status in (CONVERGED, CHANGED, FAILED)},
        "nodes": [vars(row) for row in rows],
    }


def write_json(path: str | os.PathLike, rows: list[FleetRow]) -> Path:
    return write_json_file(path, fleet_json(rows))


def _op_name(state, op_hash: str) -> str:
    return ", ".join(state.op_meta[op_hash].names)


def fleet_rows(state) -> list[FleetRow]:
    """A row per host pyinfra connected to, from its operations' results and the driver notes
    and verification records of this run."""
    notes = per_run(state, DriverNotes)
    verified = {record.host: record for record in verify_report_store(state).all_records()}
    rows = []
    for host in sorted(state.activated_hosts, key=lambda host: host.name):
        changed, failed = [], []
        for op_hash in state.get_op_order():
            op_data = state.ops.get(host, {}).get(op_hash)
            if op_data is None:
                continue
            meta = op_data.operation_meta
            if not meta.is_complete():
                continue
            if meta.did_error():
                failed.append(_op_name(state, op_hash))
            elif meta.did_change():
                changed.append(_op_name(state, op_hash))
        if host in state.failed_hosts or failed:
            status = FAILED
        elif changed:
            status = CHANGED
        else:
            status = CONVERGED
        note = notes.get(host.name)
        record = verified.get(host.name)
        if note is None and record is not None:  # verify.py alone: the ladder saw the PCI bus
            gpu_step = next((step for step in record.steps if step.name == "gpu_pci"), None)
            note = DriverNote(no_gpu=gpu_step.status != PASS) if gpu_step else None
            reboot_unknown = True
        else:
            reboot_unknown = False
        verify = None
        if record is not None:
            verify = {status_: sum(step.status == status_ for step in record.steps) for status_ in (PASS, FAIL, SKIP)}
            verify["failed_steps"] = [step.name for step in record.failed]
        rows.append(FleetRow(
            host=host.name, status=status, changed_operations=changed, failed_operations=failed,
            no_gpu=note.no_gpu if note else None,
            reboot_required=note.reboot_required if note and not reboot_unknown else None,
            verify=verify,
            runtime=record.runtime if record is not None else None,
            module_flavour=record.module_flavour if record is not None else None,
            persistence=record.persistence if record is not None else None,
            fabric_manager=record.fabric_manager if record is not None else None,
            cuda=record.cuda if record is not None else None,
            cdi=record.cdi if record is not None else None,
        ))
    return rows


class FleetReport(BaseStateCallback):
    """One per run (``fleet_report_for``): reports at the end."""

    def __init__(self) -> None:
        self.path = ""
        self.disconnected: set[str] = set()
        self.done = False

    def host_disconnect(self, state, host) -> None:
        self.disconnected.add(host.name)
        if self.done or len(self.disconnected) < len(state.activated_hosts):
            return
        self.done = True
        if state.current_stage not in (StateStage.Execute, StateStage.Disconnect):
            return  # nothing was executed: a dry run or a declined confirmation
        self.finish(state)

    def finish(self, state, stream=None) -> list[FleetRow]:
        rows = fleet_rows(state)
        written = write_json(self.path, rows)
        out = stream or sys.stderr  # stdout stays pure JSON with --json
        out.write("\n" + fleet_table(rows) + f"\n--> Fleet report written to {written.resolve()}\n")
        out.flush()
        return rows


def fleet_report_for(state, path: str) -> FleetReport:
    """The run's fleet report (deploy/run_state.py), hooked into the State's callbacks on the
    first call, written to the first caller's ``path``."""
    def hook(report: FleetReport) -> None:
        report.path = path
        state.add_callback_handler(report)

    return per_run(state, FleetReport, created=hook)
