"""
The fleet report: after a run, one row per node (converged / changed / failed, reboot required,
no GPU, the verification summary, and what verify found of the driver: kernel module type,
persistence, Fabric Manager, CUDA), printed last and written as one JSON file on the controller,
so an operator of many nodes reads one table instead of pyinfra's per-operation output; the same
rows, failures first, as one self-contained HTML page beside it (``html_path``).

pyinfra calls its state callbacks' ``host_disconnect`` for every host it connected to once the run
is over (also when hosts failed): the report is made when the last one disconnects, and the run
then exits with gpu-node's status (deploy/reports/exit_status.py: 3 when a GPU node awaits its reboot). A
run that did not execute (``--dry``, a declined confirmation) writes no file: it prints the hosts
that would be refused, and exits 1 if any would be.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO, get_args

from pyinfra.api.state import BaseStateCallback, StateStage

from .. import __version__
from ..foundations import node_text
from ..foundations.run_state import per_run
from . import exit_status
from .health_table import health_page, health_tables
from .node_report import (
    FAIL,
    PASS,
    SKIP,
    DriverNote,
    DriverNotes,
    FailureNotes,
    NodeSummary,
    PlannedRefusals,
    verify_report_store,
    write_json_file,
    write_text_file,
)

if TYPE_CHECKING:
    from pyinfra.api import Host, State
    from pyinfra.api.operation import OperationMeta

FleetReportVersion = Literal[1]
FLEET_REPORT_VERSION: FleetReportVersion = 1  # the format's version, as deploy/reports/node_report.py's REPORT_VERSION
HostOutcome = Literal["converged", "changed", "failed", "not run"]
OUTCOMES: tuple[HostOutcome, ...] = get_args(HostOutcome)
CONVERGED, CHANGED, FAILED, NOT_RUN = OUTCOMES
WOULD_BE_REFUSED = "would be refused"


@dataclass
class FleetRow(NodeSummary):
    """One node's run; its NodeSummary fields: what verify found (None where it did not run)."""

    host: str
    status: str
    changed_operations: list[str] = field(default_factory=list)
    failed_operations: list[str] = field(default_factory=list)
    # the line each of failed_operations failed with, in the same order ("" where pyinfra kept none)
    failure_lines: list[str] = field(default_factory=list)
    no_gpu: bool | None = None
    reboot_required: bool | None = None
    # {"pass": n, "fail": n, "skip": n, "failed_steps": [...]}, None when verification did not run
    verify: dict[str, Any] | None = None
    # what the node's own health check last said (FleetHealthFormat), None where none was read
    health: dict[str, Any] | None = None

    @property
    def awaits_reboot(self) -> bool:
        """A GPU node whose driver changed and whose module loads at the next boot: its GPUs are
        unusable until then (without a GPU, a reboot loads no module)."""
        return bool(self.reboot_required) and self.no_gpu is False

    def failures(self) -> list[tuple[str, str]]:
        """Each failed operation with the line it failed with."""
        lines = self.failure_lines + [""] * (len(self.failed_operations) - len(self.failure_lines))
        return list(zip(self.failed_operations, lines))

    def verify_text(self) -> str:
        if self.verify is None:
            return "not run"
        text = f"{self.verify[PASS]} pass, {self.verify[FAIL]} fail, {self.verify[SKIP]} skip"
        if self.verify["failed_steps"]:
            text += ": " + ", ".join(self.verify["failed_steps"])
        return text


def _flag(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _columns(table: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows of cells, each column as wide as its widest cell (the last one as it is), each cell
    ``node_text.printable``: a host name or a line a node gave never reaches the terminal raw."""
    table = [tuple(map(node_text.printable, line)) for line in table]
    widths = [max(len(line[index]) for line in table) for index in range(len(table[0]) - 1)]
    return [
        "    " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in table
    ]


DRIVER_COLUMNS = ("node", "module", "persistence", "fabric manager", "CUDA", "CDI")


def driver_table(rows: list[FleetRow]) -> list[str]:
    """What verify found of the driver on each node it ran on: kernel module type, persistence,
    Fabric Manager, CUDA, CDI."""
    verified = [row for row in rows if row.verify is not None]
    if not verified:
        return []
    table = [DRIVER_COLUMNS] + [
        (
            row.host,
            row.kernel_module_type or "-",
            row.persistence or "-",
            row.fabric_manager or "-",
            row.cuda or "-",
            row.cdi or "-",
        )
        for row in verified
    ]
    return ["--> Driver (verify):", *_columns(table)]


def fleet_table(rows: list[FleetRow]) -> str:
    counts = {status: sum(row.status == status for row in rows) for status in (CONVERGED, CHANGED, FAILED)}
    header = (
        f"--> Fleet report: {len(rows)} node{'s' if len(rows) != 1 else ''}: {counts[CONVERGED]} converged, "
        f"{counts[CHANGED]} changed, {counts[FAILED]} failed"
    )
    awaiting = sum(row.awaits_reboot for row in rows)
    if awaiting:
        header += f", {awaiting} awaiting a reboot (exit {exit_status.REBOOT_REQUIRED})"
    columns = ("node", "result", "reboot required", "no GPU", "runtime", "verify")
    table = [columns] + [
        (row.host, row.status, _flag(row.reboot_required), _flag(row.no_gpu), row.runtime or "-", row.verify_text())
        for row in rows
    ]
    lines = [header, *_columns(table)]
    for row in rows:
        for operation, line in row.failures():
            lines.append(node_text.printable(f"    {row.host} failed in: {operation}" + (f": {line}" if line else "")))
    lines += driver_table(rows)
    lines += health_tables(rows, _columns)
    return "\n".join(lines)


def run_status(rows: list[FleetRow]) -> int:
    """The run's exit status (deploy/reports/exit_status.py) from its rows."""
    if any(row.status in (FAILED, WOULD_BE_REFUSED) for row in rows):
        return exit_status.FAILED
    return exit_status.REBOOT_REQUIRED if any(row.awaits_reboot for row in rows) else exit_status.DONE


def fleet_json(rows: list[FleetRow]) -> dict[str, Any]:
    return {
        "version": FLEET_REPORT_VERSION,
        "gpu_node_version": __version__,
        "ok": all(row.status != FAILED for row in rows),
        "exit_status": run_status(rows),
        "counts": {status: sum(row.status == status for row in rows) for status in (CONVERGED, CHANGED, FAILED)},
        "awaiting_reboot": [row.host for row in rows if row.awaits_reboot],
        "nodes": [vars(row) for row in rows],
    }


def write_json(path: str | os.PathLike[str], rows: list[FleetRow]) -> Path:
    return write_json_file(path, fleet_json(rows))


STATUS_ORDER = (FAILED, CHANGED, CONVERGED)


def html_path(json_path: str | os.PathLike[str]) -> Path:
    """Where the page goes: beside the JSON file, its suffix replaced by .html (``fleet.json`` ->
    ``fleet.html``), or .html added where that would be the JSON file itself."""
    path = Path(json_path)
    return path.with_suffix(".html") if path.suffix != ".html" else path.with_name(path.name + ".html")


# The page is built here with html.escape, not from a Jinja template: compiling the template cost
# every run 30 to 70 ms of controller CPU (a no-op run is about 0.5 s); this costs under 1 ms.
PAGE_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #1f2328; }
h1 { font-size: 1.4rem; margin: 0 0 .3rem; }
h2 { font-size: 1.1rem; }
p.summary { margin: 0 0 1.2rem; font-size: 1.05rem; }
.count { display: inline-block; padding: .1rem .55rem; border-radius: 1rem; margin-right: .3rem; font-weight: 600; }
table { border-collapse: collapse; margin-bottom: 2rem; }
th, td { text-align: left; vertical-align: top; padding: .45rem .7rem; border-bottom: 1px solid #d0d7de; }
th { background: #f6f8fa; font-weight: 600; }
tr.failed td:first-child { border-left: .35rem solid #cf222e; }
tr.changed td:first-child { border-left: .35rem solid #bf8700; }
tr.converged td:first-child { border-left: .35rem solid #1a7f37; }
tr.failed { background: #ffebe9; }
.host, .result, .count { white-space: nowrap; }
.failed .result, .count.failed { color: #a40e26; }
.changed .result, .count.changed { color: #7d4e00; }
.converged .result, .count.converged { color: #116329; }
.count.failed { background: #ffebe9; }
.count.changed { background: #fff8c5; }
.count.converged { background: #dafbe1; }
.step { margin-bottom: .4rem; }
.operation { font-weight: 600; }
.line { display: block; font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .85rem;
        white-space: pre-wrap; overflow-wrap: anywhere; max-width: 60rem; }
.yes { font-weight: 600; }
tr.health-unhealthy td:first-child { border-left: .35rem solid #cf222e; }
tr.health-silent td:first-child, tr.health-unknown td:first-child { border-left: .35rem solid #bf8700; }
.unknown, .none { color: #6e7781; }
"""
# No script and nothing fetched: the policy makes the browser hold the page to that too.
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'"
FLEET_COLUMNS = ("node", "result", "failed step and its line", "reboot required", "no GPU", "runtime", "verify")


def _page_text(text: str) -> str:
    """Text for the page: markup and quotes escaped (html.escape), and control characters as the
    table writes them (``node_text.printable``): the page's source may be read in a terminal too."""
    return escape(node_text.printable(text))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _td(css_class: str, content: str) -> str:
    """A cell: ``content`` is markup already escaped."""
    return f'<td class="{css_class}">{content}</td>'


def _flag_cell(css_class: str, value: bool | None) -> str:
    shade = "unknown" if value is None else ("yes" if value else "no")
    return _td(f"{css_class} {shade}", _flag(value))


def _steps_cell(row: FleetRow) -> str:
    """Each failed operation with its line, then the operations that changed, folded."""
    parts = [
        f'<div class="step"><span class="operation">{_page_text(operation)}</span>'
        f'<span class="line">{_page_text(line or "(no line kept: see the run output)")}</span></div>'
        for operation, line in row.failures()
    ]
    if row.status == FAILED and not row.failed_operations:
        parts.append('<span class="none">failed before its first operation (see the run output)</span>')
    if row.changed_operations:
        items = "".join(f"<li>{_page_text(operation)}</li>" for operation in row.changed_operations)
        parts.append(
            f"<details><summary>{_plural(len(row.changed_operations), 'operation')} changed</summary>"
            f"<ul>{items}</ul></details>"
        )
    return _td("failures", "".join(parts))


def _table(table_id: str, columns: tuple[str, ...], body: list[str]) -> str:
    head = "".join(f"<th>{_page_text(column)}</th>" for column in columns)
    return (
        f'<table id="{table_id}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(body) + "\n</tbody>\n</table>"
    )


def fleet_html(rows: list[FleetRow]) -> str:
    """The rows as one self-contained page, failures first: every value escaped (``_page_text``: html.escape,
    quotes included, and control characters), inline CSS, no script."""
    ordered = sorted(rows, key=lambda row: (STATUS_ORDER.index(row.status), row.host))
    counts = {status: sum(row.status == status for row in rows) for status in STATUS_ORDER}
    summary = _plural(len(rows), "node") + ", " + ", ".join(f"{counts[status]} {status}" for status in STATUS_ORDER)
    badges = " ".join(f'<span class="count {status}">{counts[status]} {status}</span>' for status in STATUS_ORDER)
    fleet = [
        f'<tr class="{_page_text(row.status)}" data-host="{_page_text(row.host)}">'
        + _td("host", _page_text(row.host))
        + _td("result", _page_text(row.status))
        + _steps_cell(row)
        + _flag_cell("reboot", row.reboot_required)
        + _flag_cell("no-gpu", row.no_gpu)
        + _td("runtime", _page_text(row.runtime or "-"))
        + _td("verify", _page_text(row.verify_text()))
        + "</tr>"
        for row in ordered
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>gpu-node fleet report: {_page_text(summary)}</title>",
        f"<style>{PAGE_STYLE}</style>",
        "</head>",
        "<body>",
        "<h1>gpu-node fleet report</h1>",
        f'<p class="summary">{_plural(len(rows), "node")}: {badges}</p>',
        _table("fleet", FLEET_COLUMNS, fleet),
    ]
    verified = [row for row in ordered if row.verify is not None]
    if verified:
        driver = [
            f'<tr data-host="{_page_text(row.host)}">'
            + _td("host", _page_text(row.host))
            + "".join(
                f"<td>{_page_text(value or '-')}</td>"
                for value in (row.kernel_module_type, row.persistence, row.fabric_manager, row.cuda, row.cdi)
            )
            + "</tr>"
            for row in verified
        ]
        parts += ["<h2>Driver (verify)</h2>", _table("driver", DRIVER_COLUMNS, driver)]
    parts += health_page(ordered, _table)
    return "\n".join([*parts, "</body>", "</html>", ""])


def write_html(path: str | os.PathLike[str], rows: list[FleetRow]) -> Path:
    return write_text_file(path, fleet_html(rows))


def _op_name(state: State, op_hash: str) -> str:
    return ", ".join(state.op_meta[op_hash].names)


def _last_output_line(meta: OperationMeta) -> str:
    """A failed shell command's last line of error output (else of output): what the host said last."""
    for output in (meta.stderr_lines, meta.stdout_lines):
        line = next((text.strip() for text in reversed(output) if text.strip()), "")
        if line:
            return line
    return ""


def fleet_rows(state: State) -> list[FleetRow]:
    """A row per host pyinfra connected to, from its operations' results and the driver notes
    and verification records of this run."""
    notes = per_run(state, DriverNotes)
    failure_notes = per_run(state, FailureNotes)
    verified = {record.host: record for record in verify_report_store(state).all_records()}
    rows = []
    for host in sorted(state.activated_hosts, key=lambda host: host.name):
        changed: list[str] = []
        failed: list[str] = []
        lines: list[str] = []
        for op_hash in state.get_op_order():
            op_data = state.ops.get(host, {}).get(op_hash)
            if op_data is None:
                continue
            meta = op_data.operation_meta
            if not meta.is_complete():
                continue
            if meta.did_error():
                failed.append(_op_name(state, op_hash))
                lines.append(failure_notes.get((host.name, op_hash)) or _last_output_line(meta))
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
        if note is None and record is not None:  # verify.py alone: verify saw the PCI bus
            gpu_step = next((step for step in record.steps if step.name == "gpu_pci"), None)
            note = DriverNote(no_gpu=gpu_step.status != PASS) if gpu_step else None
            reboot_unknown = True
        else:
            reboot_unknown = False
        verify: dict[str, Any] | None = None
        if record is not None:
            verify = {status_: sum(step.status == status_ for step in record.steps) for status_ in (PASS, FAIL, SKIP)}
            verify["failed_steps"] = [step.name for step in record.failed]
        rows.append(
            FleetRow(
                host=host.name,
                status=status,
                changed_operations=changed,
                failed_operations=failed,
                failure_lines=lines,
                no_gpu=note.no_gpu if note else None,
                reboot_required=note.reboot_required if note and not reboot_unknown else None,
                verify=verify,
                **(record.summary() if record is not None else {}),
            )
        )
    return rows


def unexecuted_rows(state: State) -> list[FleetRow]:
    """A row per host of a run that executed nothing: would be refused (the lines its deploy found
    while planning), or not run."""
    refusals = per_run(state, PlannedRefusals)
    return [
        FleetRow(
            host=host.name,
            status=WOULD_BE_REFUSED if host.name in refusals else NOT_RUN,
            failure_lines=list(refusals.get(host.name, ())),
        )
        for host in sorted(state.activated_hosts, key=lambda host: host.name)
    ]


def unexecuted_table(rows: list[FleetRow]) -> str:
    refused = [row for row in rows if row.status == WOULD_BE_REFUSED]
    lines = [
        f"--> Fleet report, nothing executed (--dry, or the prompt declined): {_plural(len(rows), 'node')}: "
        f"{len(refused)} {WOULD_BE_REFUSED}, {len(rows) - len(refused)} {NOT_RUN}"
    ]
    lines += [f"    {row.host} {WOULD_BE_REFUSED}: {line}" for row in refused for line in row.failure_lines]
    return "\n".join(lines)


class FleetReport(BaseStateCallback):
    """One per run (``fleet_report_for``): reports at the end."""

    def __init__(self) -> None:
        self.path = ""
        self.disconnected: set[str] = set()
        self.done = False

    # pyinfra declares its callbacks static, and calls them on the handler it is given: this is a method
    def host_disconnect(self, state: State, host: Host) -> None:  # type: ignore[override]
        self.disconnected.add(host.name)
        if self.done or len(self.disconnected) < len(state.activated_hosts):
            return
        self.done = True
        if state.current_stage in (StateStage.Execute, StateStage.Disconnect):
            rows = self.finish(state)
        else:  # nothing was executed: a dry run or a declined confirmation
            rows = self.finish_unexecuted(state)
        exit_status.exit_with(state, run_status(rows))

    def finish(self, state: State, stream: TextIO | None = None) -> list[FleetRow]:
        rows = fleet_rows(state)
        written = write_json(self.path, rows)
        page = write_html(html_path(self.path), rows)
        out = stream or sys.stderr  # stdout stays pure JSON with --json
        out.write(
            "\n" + fleet_table(rows) + f"\n--> Fleet report written to {written.resolve()}"
            f"\n--> Fleet report page: {page.resolve()}\n"
        )
        out.flush()
        return rows

    def finish_unexecuted(self, state: State, stream: TextIO | None = None) -> list[FleetRow]:
        """The hosts that would be refused, printed; no file: the last executed run's report stays."""
        rows = unexecuted_rows(state)
        out = stream or sys.stderr
        out.write("\n" + unexecuted_table(rows) + "\n")
        out.flush()
        return rows


def fleet_report_for(state: State, path: str) -> FleetReport:
    """The run's fleet report (deploy/foundations/run_state.py), hooked into the State's callbacks on the
    first call, written to the first caller's ``path``."""

    def hook(report: FleetReport) -> None:
        report.path = path
        state.add_callback_handler(report)

    return per_run(state, FleetReport, created=hook)
