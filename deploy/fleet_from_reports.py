"""
The fleet view without a controller (docs/without-controller.md): the node reports the nodes wrote
themselves (the first-boot unit's boot-report.json, a pull run's report.json) read into the fleet
table and its JSON and HTML page (deploy/fleet_report.py's), either gathered into one folder (each
node uploads its own, under any name ending .json):

    python -m gpu_node.fleet_from_reports FOLDER [FLEET.json]

or read over SSH where the nodes keep them, one remote command per node (deploy/fleet_view.py):

    pyinfra inventory.py deploy/fleet_view.py [--data fleet_report_path=FLEET.json]

A node whose report is ok is converged, one whose report failed is failed (with its failed steps);
a file that is not a node report is one line naming it, and the others are still read. A fleet
report (a pull run writes one of itself beside its node report) is no node's report: passed over.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from pyinfra.api.state import BaseStateCallback

from . import node_text
from .command_line import ArgumentParser
from .facts.reports import REPORTS_DIR, NodeReports
from .fleet_report import CONVERGED, FAILED, FleetRow, fleet_table, html_path, write_html, write_json
from .report import FAIL, PASS, SKIP
from .run_state import per_run
from .settings import host_settings


def row_of(node: dict, source: str) -> FleetRow:
    steps = node.get("steps") or []
    verify = {status: sum(step.get("status") == status for step in steps) for status in (PASS, FAIL, SKIP)}
    verify["failed_steps"] = [step.get("name") for step in steps if step.get("status") == FAIL]
    ok = bool(node.get("ok")) and not verify["failed_steps"]
    return FleetRow(host=str(node["host"]), status=CONVERGED if ok else FAILED,
                    failed_operations=[] if ok else [f"report {source}"],
                    failure_lines=[] if ok else [", ".join(verify["failed_steps"]) or "the report says not ok"],
                    no_gpu=not node.get("gpus"), verify=verify, runtime=node.get("runtime"),
                    kernel_module_type=node.get("kernel_module_type"), persistence=node.get("persistence"),
                    fabric_manager=node.get("fabric_manager"), cuda=node.get("cuda"), cdi=node.get("cdi"))


def nodes_of(text: str, source: str) -> list[dict]:
    """The nodes a report's ``text`` holds; [] for a fleet report; ValueError, KeyError, TypeError or
    node_text.UnreadableText for a file that is no report."""
    report = node_text.parsed(json.loads, text, source)
    if "counts" in report:
        return []
    nodes = report["nodes"]
    if not isinstance(nodes, list) or not all(isinstance(node, dict) and "host" in node for node in nodes):
        raise TypeError("its nodes are not node reports")
    return nodes


def read_folder(folder: str) -> tuple[list[FleetRow], list[str]]:
    """(a row per node, sorted by host; one line per file that is not a node report)."""
    rows: dict[str, FleetRow] = {}
    problems = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            for node in nodes_of(node_text.decode(path.read_bytes()), str(path)):
                rows[str(node["host"])] = row_of(node, path.name)
        except (OSError, ValueError, KeyError, TypeError, node_text.UnreadableText) as error:
            problems.append(f"{path}: not a gpu-node node report ({type(error).__name__}: {error})")
    return [rows[host] for host in sorted(rows)], problems


def node_row(host_name: str, reports: list[dict]) -> tuple[FleetRow, list[str]]:
    """One node's row from the reports it keeps (the NodeReports fact): its newest node report, under
    the name the inventory gives the node; one line per file that is not a node report."""
    newest, problems = None, []
    for report in sorted(reports, key=lambda report: (report["mtime"], report["name"])):
        source = f"{REPORTS_DIR}/{report['name']}"
        try:
            nodes = nodes_of(report["text"], f"{host_name}: {source}")
            if len(nodes) > 1:
                raise TypeError(f"it holds {len(nodes)} nodes")
            newest = (nodes[0], report["name"]) if nodes else newest
        except (ValueError, KeyError, TypeError, node_text.UnreadableText) as error:
            problems.append(f"{host_name}: {source}: not a gpu-node node report ({type(error).__name__}: {error})")
    if newest is None:
        return FleetRow(host=host_name, status=FAILED, failed_operations=["read the node's reports"],
                        failure_lines=[f"no node report in {REPORTS_DIR} (neither a first boot nor a pull run wrote one)"]), problems
    return replace(row_of(*newest), host=host_name), problems


@dataclass
class ReportsView(BaseStateCallback):
    """The run's fleet view (deploy/run_state.py): a row per node as its reports are read, the table
    printed (and written) once the last host disconnected; a host never reached is a failed row."""

    path: str = ""
    rows: dict[str, FleetRow] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    disconnected: set = field(default_factory=set)
    done: bool = False

    def host_disconnect(self, state, host) -> None:
        self.disconnected.add(host.name)
        if self.done or len(self.disconnected) < len(state.activated_hosts):
            return
        self.done = True
        self.finish(state)

    def finish(self, state, stream=None) -> list[FleetRow]:
        rows = dict(self.rows)
        for host in state.inventory:
            if host.name not in rows:
                rows[host.name] = FleetRow(host=host.name, status=FAILED, failed_operations=["read the node's reports"],
                                           failure_lines=["not reached (see the run output)"])
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


def view_this_host(host) -> None:
    """deploy/fleet_view.py's body for one host: its reports read (one command), its row kept."""
    settings = host_settings(host)

    def hook(view: ReportsView) -> None:
        view.path = settings.fleet_report_path
        host.state.add_callback_handler(view)

    view = per_run(host.state, ReportsView, created=hook)
    row, problems = node_row(host.name, host.get_fact(NodeReports))
    view.rows[host.name] = row
    view.problems += problems


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog=f"python -m {__package__}.fleet_from_reports", description=__doc__)
    parser.add_argument("folder", metavar="FOLDER", help="the node reports gathered, each a file ending .json")
    parser.add_argument("fleet", metavar="FLEET.json", nargs="?",
                        help="where to write the fleet's JSON (and its HTML page beside it)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.folder):
        parser.error(f"{args.folder}: no such folder")
    rows, problems = read_folder(args.folder)
    for problem in problems:
        print(f"gpu-node: {problem}", file=sys.stderr)
    print(fleet_table(rows))
    if args.fleet:
        write_json(args.fleet, rows)
        write_html(html_path(args.fleet), rows)
    return 0 if rows and all(row.status != FAILED for row in rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
