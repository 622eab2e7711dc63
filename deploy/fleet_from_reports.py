"""
The fleet view without a controller (docs/without-controller.md): the node reports the nodes wrote
themselves (the first-boot unit's boot-report.json, a pull run's report.json), gathered into one
folder (each node uploads its own, under any name ending .json), read into the fleet table and its
JSON and HTML page (deploy/fleet_report.py's):

    python -m gpu_node.fleet_from_reports FOLDER [FLEET.json]

A node whose report is ok is converged, one whose report failed is failed (with its failed steps);
a file that is not a node report is one line naming it, and the others are still read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import node_text
from .fleet_report import CONVERGED, FAILED, FleetRow, fleet_table, html_path, write_html, write_json
from .report import FAIL, PASS, SKIP


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


def read_folder(folder: str) -> tuple[list[FleetRow], list[str]]:
    """(a row per node, sorted by host; one line per file that is not a node report)."""
    rows: dict[str, FleetRow] = {}
    problems = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            report = node_text.parsed(json.loads, node_text.decode(path.read_bytes()), str(path))
            nodes = report["nodes"]
            for node in nodes:
                rows[str(node["host"])] = row_of(node, path.name)
        except (OSError, ValueError, KeyError, TypeError, node_text.UnreadableText) as error:
            problems.append(f"{path}: not a gpu-node node report ({type(error).__name__}: {error})")
    return [rows[host] for host in sorted(rows)], problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m gpu_node.fleet_from_reports FOLDER [FLEET.json]", file=sys.stderr)
        return 2
    rows, problems = read_folder(args[0])
    for problem in problems:
        print(f"gpu-node: {problem}", file=sys.stderr)
    print(fleet_table(rows))
    if len(args) > 1:
        write_json(args[1], rows)
        write_html(html_path(args[1]), rows)
    return 0 if rows and all(row.status != FAILED for row in rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
