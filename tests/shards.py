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

# Seconds per e2e file, node images built by the file that first needs them: what two shards of a
# three-shard run printed (each shard ends with an "e2e seconds per file" line) on a machine loaded
# well past CI's, so only their proportions count; files that run did not time are the earlier
# estimates scaled to the same pace. Refresh from a CI run's lines.
SECONDS: dict[str, float] = {
    "test_open_kernel_modules_debian.py": 1638,
    "test_family_dnf.py": 1004,
    "test_repository_faults.py": 976,
    "test_containerd_e2e.py": 765,
    "test_full_deploy_debian.py": 764,
    "test_docker_e2e.py": 690,
    "test_without_controller_e2e.py": 673,
    "test_family_rpm_more.py": 631,
    "test_fresh_clone.py": 546,
    "test_family_ubuntu.py": 517,
    "test_fabric_manager_standin.py": 437,
    "test_family_pacman.py": 417,
    "test_cdi_e2e.py": 369,
    "test_verify_crictl.py": 364,
    "test_verify_runtimes.py": 351,
    "test_family_zypper.py": 318,
    "test_interruptions.py": 315,
    "test_rollout_e2e.py": 273,
    "test_package.py": 273,
    "test_verify.py": 231,
    "test_toolkit.py": 218,
    "test_nvidia_ctk_first.py": 203,
    "test_file_modes.py": 180,
    "test_credentials_ssh.py": 170,
    "test_undo_debian.py": 161,
    "test_hostile_input.py": 153,
    "test_foundation.py": 149,
    "test_fleet_report.py": 145,
    "test_package_manager_locks.py": 136,
    "test_driver_reload_decision.py": 109,
    "test_device_links_e2e.py": 74,
    "test_verify_cuda.py": 30,
    "test_drift.py": 16,
    "test_unreadable_repositories.py": 15,
    "test_dra_lab_e2e.py": 9,
}
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


def seconds_per_file(reports) -> dict[str, float]:
    """The e2e files' total seconds (setup, call and teardown) in this run, longest first."""
    totals: dict[str, float] = {}
    for report in reports:
        path = report.nodeid.split("::", 1)[0]
        if "/e2e/" in "/" + path:
            totals[file_key(path)] = totals.get(file_key(path), 0.0) + report.duration
    return dict(sorted(((name, round(total)) for name, total in totals.items()), key=lambda item: -item[1]))
