"""
The lab's files for tests that need only one of them (no cluster): tests/lab/assets.py unpacks and
checks it; a missing lab skips the test with assets' message naming what to provide.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def lab_asset(getter, *args) -> Path:
    """``lab_asset(assets.crictl)``, ``lab_asset(assets.kubernetes_binary, "kube-scheduler")``..."""
    from lab import assets

    try:
        found = getter(*args)
    except assets.LabMissing as missing:
        pytest.skip(f"test lab not available: {missing}")
    return found[0] if isinstance(found, tuple) else found
