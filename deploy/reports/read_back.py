"""
A report read back: text a node wrote (a node report, a fleet report, its health check's health.json),
checked against its format (deploy/reports/formats.py) before anything reads a field of it. The fleet
view (deploy/fleet/from_reports.py) and its quarantine (deploy/fleet/quarantine.py) read the nodes'
reports through it alone.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from ..foundations import node_text
from .formats import FleetReportFormat, HealthReportFormat, NodeFormat, NodeReportFormat

# What a validation error says: its first few problems (a hostile file may hold thousands), each
# place no longer than a host name may be (a key of the file's own is part of it).
SHOWN_ERRORS, SHOWN_PLACE = 3, 64


class NotAReport(ValueError):
    """Text that is no gpu-node report: what is wrong, in one line."""


def what_is_wrong(error: ValidationError) -> str:
    """A validation error in one line: where and what, for its first few problems (pydantic's own
    text spans lines and repeats the values the file holds)."""
    problems = error.errors(include_url=False, include_input=False)
    said = []
    for problem in problems[:SHOWN_ERRORS]:
        place = ".".join(str(part) for part in problem["loc"]) or "the report"
        said.append(f"{place[:SHOWN_PLACE]}{'...' if len(place) > SHOWN_PLACE else ''}: {problem['msg']}")
    more = len(problems) - SHOWN_ERRORS
    return "; ".join(said) + (f" (and {more} more)" if more > 0 else "")


def report_of(text: str, source: str) -> NodeFormat | HealthReportFormat | None:
    """The node a node report's ``text`` holds, or the health report it is, checked against its
    format; None for a fleet report. NotAReport or node_text.UnreadableText for text that is no report."""
    try:
        report = node_text.parsed(json.loads, text, source)
    except json.JSONDecodeError as error:
        raise NotAReport(f"not a gpu-node report: not JSON: {error}") from None
    try:
        if isinstance(report, dict) and "counts" in report:
            FleetReportFormat.model_validate(report)
            return None
        if isinstance(report, dict) and "checked_at" in report:
            return HealthReportFormat.model_validate(report)
        nodes = NodeReportFormat.model_validate(report).nodes
    except ValidationError as error:
        raise NotAReport(f"not a gpu-node report: {what_is_wrong(error)}") from None
    if len(nodes) != 1:
        raise NotAReport(f"not a node report of one node: it holds {len(nodes)} (one node, one file)")
    return nodes[0]


def health_report_of(text: str, source: str) -> HealthReportFormat:
    """The health report ``text`` is; NotAReport or node_text.UnreadableText for any other text."""
    report = report_of(text, source)
    if not isinstance(report, HealthReportFormat):
        raise NotAReport("not a health report: " + ("a fleet report" if report is None else "a node report"))
    return report
