"""
The e2e tests split into shards that scripts/test runs side by side (GPU_NODE_E2E_SHARD="k/n").

The e2e tests mostly wait (apt downloads, DKMS, daemons starting), and one pytest cannot hold two
workers here (pyinfra's CLI patches threads with gevent, which breaks pytest-xdist's), so several
pytest processes each take whole test files. Files go to the shard with the least expected time,
longest first; a file's expected time is what it took in CI on a fresh machine, node images built
by it included (SECONDS below), and NEW_FILE_SECONDS for a file not measured yet. Files that have
DKMS build the same driver stay in one shard (SAME_SHARD), one after another: the second build then
finds the first one's objects in the shared compiler cache, where two at once would both compile.
"""

from __future__ import annotations

import os
from pathlib import Path

# Seconds per e2e file, fresh machine, images built by the file that first needs them.
SECONDS: dict[str, float] = {}
NEW_FILE_SECONDS = 60.0
SAME_SHARD: tuple[frozenset[str], ...] = (
    frozenset({"test_full_deploy_debian.py", "test_open_kernel_modules_debian.py", "test_fresh_clone.py"}),
)


def this_shard() -> tuple[int, int] | None:
    """(k, n) from GPU_NODE_E2E_SHARD="k/n" (1 <= k <= n), or None when the run is not sharded."""
    value = os.environ.get("GPU_NODE_E2E_SHARD", "")
    if not value:
        return None
    index, _, count = value.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        raise SystemExit(f"GPU_NODE_E2E_SHARD={value!r}: expected k/n, e.g. 1/2") from None
    if not 1 <= k <= n:
        raise SystemExit(f"GPU_NODE_E2E_SHARD={value!r}: k must be between 1 and n")
    return k, n


def assign(files: list[str], count: int) -> list[list[str]]:
    """``files`` in ``count`` shards: longest expected first, each to the least loaded shard."""
    units = [sorted(group & set(files)) for group in SAME_SHARD if group & set(files)]
    grouped = {name for unit in units for name in unit}
    units += [[name] for name in files if name not in grouped]
    seconds = {tuple(unit): sum(SECONDS.get(name, NEW_FILE_SECONDS) for name in unit) for unit in units}
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for unit in sorted(units, key=lambda unit: (-seconds[tuple(unit)], unit)):
        lightest = loads.index(min(loads))
        shards[lightest] += unit
        loads[lightest] += seconds[tuple(unit)]
    return shards


def port_offset() -> int:
    """Each shard probes its own port range, so two shards never race for one free port."""
    shard = this_shard()
    return 0 if shard is None else 200 * (shard[0] - 1)


def file_key(path: str | os.PathLike) -> str:
    return Path(path).name
