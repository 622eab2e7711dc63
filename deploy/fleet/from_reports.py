"""
The fleet view without a controller (docs/without-controller.md): the node reports the nodes wrote
themselves (the first-boot unit's boot-report.json, a pull run's report.json) read into the fleet
table and its JSON and HTML page (deploy/reports/fleet_report.py's), either gathered into one folder (each
node uploads its own, under any name ending .json):

    python -m gpu_node.fleet.from_reports FOLDER [FLEET.json]

or read over SSH where the nodes keep them, one remote command per node (deploy/fleet_view.py):

    pyinfra inventory.py deploy/fleet_view.py [--data fleet_report_path=FLEET.json]

and with ``--data fleet_quarantine=true`` (an inventory with its control_plane host) it also quarantines
the GPU nodes whose health report says unhealthy (deploy/fleet/quarantine.py).

A node whose report is ok is converged, one whose report failed is failed (with its failed steps).
A node's health report (its health check's health.json, docs/health.md) is shown beside its row,
per node and per GPU; one older than health_silent_after (``--silent-after`` in the folder mode) is
silent. Health does not change a row's result nor the exit status: the run's result is the node
reports'; health is what the node saw since.
A report is text a node sent: read only from a regular file, at most node_text's bound, and checked
against its format (deploy/reports/formats.py's NodeReportFormat) before anything reads a field of it; a
report holds one node, and a host that two files of a folder report is refused. A file that is no
report is one line naming it and what is wrong, the others are still read, and the exit status is
non-zero (over SSH: that host fails).
A fleet report (a pull run writes one of itself beside its node report) is no node's report: passed over.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pydantic import TypeAdapter, ValidationError
from pyinfra.api.state import BaseStateCallback

from ..facts.reports import NOT_REGULAR, REPORTS_DIR, NodeReports
from ..foundations import node_text
from ..foundations.command_line import ArgumentParser, program
from ..foundations.run_state import per_run
from ..operations.failure import fail
from ..reports.fleet_report import (
    CONVERGED,
    FAILED,
    FleetRow,
    fleet_table,
    html_path,
    write_html,
    write_json,
)
from ..reports.formats import HealthReportFormat, NodeFormat, NodeSummaryFormat
from ..reports.health_table import fleet_health
from ..reports.node_report import FAIL, PASS, SKIP
from ..reports.read_back import NotAReport, report_of
from ..settings import ALLOWED, DEFAULTS, host_settings
from ..settings.values import TimeSpan, time_span_seconds
from .quarantine import control_plane, quarantine_gpu_nodes

if TYPE_CHECKING:
    from pyinfra.api import Host, State

# A folder holds one report per node: more .json files than this and it is not read at all (the
# files are read one at a time, each at most node_text.MAX_FILE_BYTES; this bounds the whole).
MAX_FOLDER_REPORTS = 10_000


def _problem(source: str, error: Exception) -> str:
    """One line naming ``source`` and what is wrong with it, control characters escaped."""
    if isinstance(error, node_text.UnreadableText):
        return node_text.printable(str(error))  # it names its source
    what = f"cannot read it: {error.strerror}" if isinstance(error, OSError) else str(error)
    return node_text.printable(f"{source}: {what}")


def row_of(node: NodeFormat, source: str) -> FleetRow:
    failed_steps = [step.name for step in node.steps if step.status == FAIL]
    verify: dict[str, Any] = {
        status: sum(step.status == status for step in node.steps) for status in (PASS, FAIL, SKIP)
    }
    verify["failed_steps"] = failed_steps
    ok = node.ok and not failed_steps
    return FleetRow(
        host=node.host,
        status=CONVERGED if ok else FAILED,
        failed_operations=[] if ok else [f"report {source}"],
        failure_lines=[] if ok else [", ".join(failed_steps) or "the report says not ok"],
        no_gpu=not node.gpus,
        verify=verify,
        **node.model_dump(include=set(NodeSummaryFormat.model_fields)),
    )


def read_report(folder: Path, entry: os.DirEntry[str]) -> str:
    """A report file's text: a regular file only (a link is not followed, a FIFO or device not
    opened), opened without following a link or blocking (should it be swapped since it was listed)
    and read no further than one byte past node_text's bound."""
    if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
        raise NotAReport(NOT_REGULAR)
    try:
        handle = os.open(folder / entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:  # a link now
            raise NotAReport(NOT_REGULAR) from None
        raise
    with os.fdopen(handle, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise NotAReport(NOT_REGULAR)
        return node_text.decode(stream.read(node_text.MAX_FILE_BYTES + 1))


def report_entries(folder: Path) -> list[os.DirEntry[str]]:
    """The folder's ``*.json`` entries by name (hidden ones aside, as a shell's ``*.json``); NotAReport
    when there are more than ``MAX_FOLDER_REPORTS``."""
    entries = []
    with os.scandir(folder) as listing:
        for entry in listing:
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                entries.append(entry)
                if len(entries) > MAX_FOLDER_REPORTS:
                    raise NotAReport(
                        f"holds more than {MAX_FOLDER_REPORTS} .json files: "
                        f"not read (a fleet's folder holds one report per node)"
                    )
    return sorted(entries, key=lambda entry: entry.name)


def _reported_twice(host: str, what: str, folder: str, names: list[str]) -> str:
    files = ", ".join(str(Path(folder) / name) for name in names)
    return node_text.printable(
        f"{host} is reported by {len(names)} {what} ({files}): one node, one file: none of them read"
    )


def read_folder(
    folder: str, silent_after: int = time_span_seconds(DEFAULTS["health_silent_after"]), now: datetime | None = None
) -> tuple[list[FleetRow], list[str]]:
    """(a row per node, sorted by host, with its health; one line per file that is not a report,
    and per host that two or more files report: neither is read, the host's row says so). A host
    with a health report and no node report: a failed row (as over SSH), with its health."""
    found: dict[str, list[tuple[str, NodeFormat]]] = {}
    healths: dict[str, list[tuple[str, HealthReportFormat]]] = {}
    problems = []
    for entry in report_entries(Path(folder)):
        source = str(Path(folder) / entry.name)
        try:
            report = report_of(read_report(Path(folder), entry), source)
        except (OSError, NotAReport, node_text.UnreadableText) as error:
            problems.append(_problem(source, error))
            continue
        if isinstance(report, HealthReportFormat):
            healths.setdefault(report.host, []).append((entry.name, report))
        elif report is not None:
            found.setdefault(report.host, []).append((entry.name, report))
    rows = []
    for host in sorted(found.keys() | healths.keys()):
        reports, health = found.get(host, []), healths.get(host, [])
        if len(reports) == 1:
            row = row_of(reports[0][1], reports[0][0])
        elif not reports:  # as over SSH: a node that keeps no node report
            row = FleetRow(
                host=host,
                status=FAILED,
                failed_operations=["read its report"],
                failure_lines=["no node report in the folder, only its health report"],
            )
        else:
            problems.append(_reported_twice(host, "files", folder, [name for name, _ in reports]))
            row = FleetRow(
                host=host,
                status=FAILED,
                failed_operations=["read its report"],
                failure_lines=[
                    f"reported by {len(reports)} files: " + ", ".join(str(Path(folder) / name) for name, _ in reports)
                ],
            )
        if len(health) == 1:
            row.health = fleet_health(health[0][1], silent_after, now)
        elif health:
            problems.append(_reported_twice(host, "health report files", folder, [name for name, _ in health]))
        rows.append(row)
    return rows, problems


def node_row(
    host_name: str,
    reports: list[dict[str, Any]],
    silent_after: int = time_span_seconds(DEFAULTS["health_silent_after"]),
    now: datetime | None = None,
) -> tuple[FleetRow, list[str]]:
    """One node's row from the reports it keeps (the NodeReports fact): its newest node report, under
    the name the inventory gives the node, with its health report's health; one line per file that
    is not a report, or not read."""
    newest, health, problems = None, None, []
    for report in sorted(reports, key=lambda report: (report.get("mtime", 0), report["name"])):
        source = f"{host_name}: {REPORTS_DIR}/{report['name']}"
        try:
            if "not_read" in report:
                raise NotAReport(report["not_read"])
            found = report_of(report["text"], source)
        except (NotAReport, node_text.UnreadableText) as error:
            problems.append(_problem(source, error))
            continue
        if isinstance(found, HealthReportFormat):
            health = fleet_health(found, silent_after, now)
        elif found is not None:
            newest = (found, report["name"])
    if newest is None:
        row = FleetRow(
            host=host_name,
            status=FAILED,
            failed_operations=["read the node's reports"],
            failure_lines=[f"no node report in {REPORTS_DIR} (neither a first boot nor a pull run wrote one)"],
        )
    else:
        row = replace(row_of(*newest), host=host_name)
    row.health = health
    return row, problems


@dataclass
class ReportsView(BaseStateCallback):
    """The run's fleet view (deploy/foundations/run_state.py): a row per node as its reports are read, the table
    printed (and written) once the last host disconnected; a host never reached is a failed row."""

    path: str = ""
    rows: dict[str, FleetRow] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    disconnected: set[str] = field(default_factory=set)
    done: bool = False
    # hosts of the run that are no GPU node of the view (the quarantine's control plane): no row
    not_nodes: set[str] = field(default_factory=set)

    # pyinfra declares its callbacks static, and calls them on the handler it is given: this is a method
    def host_disconnect(self, state: State, host: Host) -> None:  # type: ignore[override]
        self.disconnected.add(host.name)
        if self.done or len(self.disconnected) < len(state.activated_hosts):
            return
        self.done = True
        self.finish(state)

    def finish(self, state: State, stream: TextIO | None = None) -> list[FleetRow]:
        rows = dict(self.rows)
        for host in state.inventory:
            if host.name not in rows and host.name not in self.not_nodes:
                rows[host.name] = FleetRow(
                    host=host.name,
                    status=FAILED,
                    failed_operations=["read the node's reports"],
                    failure_lines=["not reached (see the run output)"],
                )
        ordered = [rows[name] for name in sorted(rows)]
        out = stream or sys.stdout
        for problem in self.problems:
            print(f"gpu-node: {problem}", file=sys.stderr)
        print(fleet_table(ordered), file=out)
        if self.path:
            write_json(self.path, ordered)
            write_html(html_path(self.path), ordered)
            print(f"--> Fleet view written to {self.path} and {html_path(self.path)}", file=out)
        return ordered


def view_this_host(host: Host) -> None:
    """deploy/fleet_view.py's body for one host: its reports read (one command), its row kept; a
    host whose reports fail or cannot be read fails (nothing runs on it), so the run's exit status
    says so, as the folder mode's does."""
    settings = host_settings(host)

    def hook(view: ReportsView) -> None:
        view.path = settings.fleet_report_path
        host.state.add_callback_handler(view)

    view = per_run(host.state, ReportsView, created=hook)
    if settings.fleet_quarantine:
        if host.name == control_plane(settings).name:
            quarantine_gpu_nodes(settings)
        if settings.gpu_nodes_group not in host.groups:
            view.not_nodes.add(host.name)
            return
    row, problems = node_row(host.name, host.get_fact(NodeReports), time_span_seconds(settings.health_silent_after))
    view.rows[host.name] = row
    view.problems += problems
    failures = problems + [node_text.printable(f"{operation}: {line}") for operation, line in row.failures()]
    if failures:
        fail(name="Refuse this node's reports", message="; ".join(failures))


def _folder(text: str) -> Path:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such folder")
    return Path(text)


def _silent_after(text: str) -> int:
    """A value of health_silent_after's type, in seconds."""
    try:
        return time_span_seconds(TypeAdapter(TimeSpan).validate_python(text))
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed: {ALLOWED['health_silent_after']}") from None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog=program(f"{__package__}.from_reports"),
        description="The fleet table of the node reports gathered in FOLDER (one per node, any "
        "name ending .json), and with FLEET.json its JSON and HTML page beside it. "
        "Exit status 0 when every node converged and every file was a report, else 1.",
    )
    parser.add_argument("folder", metavar="FOLDER", type=_folder, help="a folder of node reports")
    parser.add_argument(
        "fleet_json",
        metavar="FLEET.json",
        nargs="?",
        help="write the fleet report there, and its page beside it (.html)",
    )
    parser.add_argument(
        "--silent-after",
        metavar="SPAN",
        type=_silent_after,
        default=time_span_seconds(DEFAULTS["health_silent_after"]),
        help="a node whose last health report is older than this is shown as silent (a systemd time "
        f"span, as the setting health_silent_after; default {DEFAULTS['health_silent_after']})",
    )
    args = parser.parse_args(argv)
    try:
        rows, problems = read_folder(args.folder, args.silent_after, datetime.now(timezone.utc))
    except (OSError, NotAReport) as error:
        print(f"gpu-node: {_problem(str(args.folder), error)}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"gpu-node: {problem}", file=sys.stderr)
    print(fleet_table(rows))
    if args.fleet_json:
        write_json(args.fleet_json, rows)
        write_html(html_path(args.fleet_json), rows)
    return 0 if rows and all(row.status != FAILED for row in rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
