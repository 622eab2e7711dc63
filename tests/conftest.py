"""Hooks for every test: the e2e shard this pytest runs (tests/shards.py), and at the end of a run
how many tests skipped for want of the lab (GPU_NODE_LAB) or the corpus (GPU_NODE_CORPUS), one line
each (tests/lab_assets.py)."""

from __future__ import annotations

import json

import shards
from lab_assets import skip_summary


def pytest_collection_modifyitems(config, items):
    # the files that share a driver's build run in their set order (tests/shards.py SAME_SHARD)
    order = {path: rank for rank, path in enumerate(shards.run_order(list(dict.fromkeys(item.path for item in items))))}
    items.sort(key=lambda item: order[item.path])
    shard = shards.this_shard()
    if shard is None:
        return
    index, count = shard
    e2e_files = sorted({shards.file_key(item.path) for item in items if "e2e" in item.path.parts})
    mine = set(shards.assign(e2e_files, count)[index - 1])

    def runs_here(item) -> bool:
        return "e2e" not in item.path.parts or shards.file_key(item.path) in mine

    config.hook.pytest_deselected(items=[item for item in items if not runs_here(item)])
    items[:] = [item for item in items if runs_here(item)]


def pytest_terminal_summary(terminalreporter):
    reports = [
        report
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) in ("setup", "call", "teardown")
    ]
    seconds = shards.seconds_per_file(reports)
    if seconds:
        terminalreporter.write_line(f"e2e seconds per file (tests/shards.py SECONDS): {json.dumps(seconds)}")
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            reasons.append(report.longrepr[2])
    for line in skip_summary(reasons):
        terminalreporter.write_line(line)
