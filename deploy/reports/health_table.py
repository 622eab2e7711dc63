"""
The fleet view's health: what each node's own health check last said (deploy/health/check.py's
health.json, read by deploy/fleet/from_reports.py into a fleet row's ``health``), as the terminal
table's lines and the page's section, per node and per GPU. A node whose last report is older than
health_silent_after is silent. Every value a node wrote is escaped where it is shown (the table's
node_text.printable, the page's html.escape too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from html import escape
from typing import Any, Protocol

from ..foundations import node_text
from .health_report import HEALTHY, SILENT, STATUSES, UNHEALTHY

# a node's problems the table shows; the JSON file has them all
SHOWN_PROBLEMS = 3
NODE_COLUMNS = ("node", "health", "checked at", "problems")
GPU_COLUMNS = (
    "node",
    "GPU",
    "name",
    "driver sees it",
    "ECC uncorrected",
    "retired pages",
    "row remap pending",
    "problems",
)


class HealthRow(Protocol):
    """What of a fleet row (fleet_report.FleetRow, which imports this module) the health section reads."""

    host: str
    health: dict[str, Any] | None


def fleet_health(report: Any, silent_after: int, now: datetime | None = None) -> dict[str, Any]:
    """A fleet row's ``health`` (FleetHealthFormat) of a node's health report (HealthReportFormat,
    checked): its status, silent when ``checked_at`` is more than ``silent_after`` seconds ago."""
    checked = datetime.fromisoformat(report.checked_at)
    age = ((now or datetime.now(timezone.utc)) - checked).total_seconds()
    return {
        "status": SILENT if age > silent_after else report.status,
        "checked_at": report.checked_at,
        "problems": [problem.model_dump() for problem in report.problems],
        "gpus": [gpu.model_dump() for gpu in report.gpus],
    }


def _flag(value: object) -> str:
    return "?" if value is None else ("yes" if value is True else "no" if value is False else str(value))


def problem_text(problems: list[dict[str, Any]], gpu: str | None = None) -> str:
    """The first few problems (of ``gpu`` where given), worst first, and how many more there are."""
    mine = [problem for problem in problems if gpu is None or problem["gpu"] == gpu]
    if not mine:
        return "-"
    shown = "; ".join(problem["line"] for problem in mine[:SHOWN_PROBLEMS])
    return shown + (f" (and {len(mine) - SHOWN_PROBLEMS} more)" if len(mine) > SHOWN_PROBLEMS else "")


def counts(rows: Sequence[HealthRow]) -> dict[str, int]:
    statuses = [row.health["status"] for row in rows if row.health is not None]
    return {status: statuses.count(status) for status in (*STATUSES, SILENT)} | {
        "no report": sum(row.health is None for row in rows)
    }


def node_cells(row: HealthRow) -> tuple[str, ...]:
    health = row.health
    if health is None:
        return (row.host, "no report", "-", "-")
    return (row.host, health["status"], health["checked_at"], problem_text(health["problems"]))


def gpu_cells(row: HealthRow) -> list[tuple[str, ...]]:
    health = row.health or {"gpus": [], "problems": []}
    return [
        (
            row.host,
            gpu["pci"],
            gpu["name"] or "-",
            _flag(gpu["seen_by_driver"]),
            _flag(gpu["ecc_uncorrected"]),
            _flag(gpu["retired_pages"]),
            _flag(gpu["pending_row_remap"]),
            problem_text(health["problems"], gpu["pci"]),
        )
        for gpu in health["gpus"]
    ]


def summary(rows: Sequence[HealthRow]) -> str:
    found = counts(rows)
    return ", ".join(f"{count} {status}" for status, count in found.items() if count)


def health_tables(rows: Sequence[HealthRow], columns: Callable[[Sequence[tuple[str, ...]]], list[str]]) -> list[str]:
    """The terminal's health section (``columns``: fleet_report's column layout), none where no node
    sent a health report."""
    if all(row.health is None for row in rows):
        return []
    lines = [
        f"--> Health (the nodes' own checks): {summary(rows)}",
        *columns([NODE_COLUMNS] + [node_cells(row) for row in rows]),
    ]
    gpus = [cells for row in rows for cells in gpu_cells(row)]
    if gpus:
        lines += columns([GPU_COLUMNS] + gpus)
    return lines


def _cell(text: str) -> str:
    return f"<td>{escape(node_text.printable(text))}</td>"


def health_page(rows: Sequence[HealthRow], table: Callable[[str, tuple[str, ...], list[str]], str]) -> list[str]:
    """The page's health section (``table``: fleet_report's table markup), none where no node sent
    a health report; unhealthy and silent nodes first."""
    if all(row.health is None for row in rows):
        return []
    order = (UNHEALTHY, SILENT, "unknown", HEALTHY, "no report")
    ordered = sorted(rows, key=lambda row: (order.index(node_cells(row)[1]), row.host))
    nodes = [
        f'<tr class="health-{escape(node_cells(row)[1]).replace(" ", "-")}" data-host="{escape(node_text.printable(row.host))}">'
        + "".join(map(_cell, node_cells(row)))
        + "</tr>"
        for row in ordered
    ]
    gpus = ["<tr>" + "".join(map(_cell, cells)) + "</tr>" for row in ordered for cells in gpu_cells(row)]
    parts = [f"<h2>Health: {escape(summary(rows))}</h2>", table("health", NODE_COLUMNS, nodes)]
    if gpus:
        parts.append(table("health-gpus", GPU_COLUMNS, gpus))
    return parts
