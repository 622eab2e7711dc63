"""
Tests and the lab (tests/lab/, docs/lab.md): ``needs_lab`` skips a test, in one line, when
GPU_NODE_LAB is unset, before any fixture runs; ``lab_asset`` skips it, naming what to provide, when
the lab lacks a file; ``skip_summary`` counts the run's skips by the setting they name
(tests/conftest.py prints it at the end of a run).
"""

from __future__ import annotations

from pathlib import Path

import lab
import pytest

needs_lab = pytest.mark.skipif(not lab.configured(), reason=lab.UNSET)

# Setting -> what a test that skipped for it needs (the first setting a reason names counts).
SKIP_GROUPS = {
    lab.LAB_ENV: "the lab",
    "GPU_NODE_CORPUS": "the corpus",
}


def lab_asset(getter, *args) -> Path:
    """``lab_asset(assets.crictl)``, ``lab_asset(assets.kubernetes_binary, "kube-scheduler")``..."""
    try:
        found = getter(*args)
    except lab.LabMissing as missing:
        pytest.skip(str(missing))
    return found[0] if isinstance(found, tuple) else found


def skip_summary(reasons: list[str]) -> list[str]:
    """One line per setting the skip reasons name: how many tests skipped for it."""
    counts = dict.fromkeys(SKIP_GROUPS, 0)
    for reason in reasons:
        named = [(reason.find(setting), setting) for setting in SKIP_GROUPS if setting in reason]
        if named:
            counts[min(named)[1]] += 1
    return [
        f"{count} {'test needs' if count == 1 else 'tests need'} {SKIP_GROUPS[setting]}: set {setting}, see docs/lab.md"
        for setting, count in counts.items()
        if count
    ]
