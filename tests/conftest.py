"""Hooks for every test: at the end of a run, how many tests skipped for want of the lab
(GPU_NODE_LAB) or the corpus (GPU_NODE_CORPUS), one line each (tests/lab_assets.py)."""

from __future__ import annotations

from lab_assets import skip_summary


def pytest_terminal_summary(terminalreporter):
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            reasons.append(report.longrepr[2])
    for line in skip_summary(reasons):
        terminalreporter.write_line(line)
