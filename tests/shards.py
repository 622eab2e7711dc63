"""
The e2e tests split into shards that scripts/test runs side by side (GPU_NODE_E2E_SHARD="k/n").

The e2e tests mostly wait (apt downloads, DKMS, daemons starting), and one pytest cannot hold two
workers here (pyinfra's CLI patches threads with gevent, which breaks pytest-xdist's), so several
pytest processes each take whole test files. Files go to the shard with the least expected time,
longest first; a file's expected time is what it took in CI on a fresh machine, node images built
by it included (SECONDS below), and NEW_FILE_SECONDS for a file not measured yet. Files whose nodes
install the same driver for the same kernel stay in one shard and run in a set order (SAME_SHARD): the
first has DKMS build it (its subject), the others load that build (tests/e2e/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

# Seconds per e2e file, node images built by the file that first needs them: what a fresh-clone
# `.ci/run` printed (each shard ends with an "e2e seconds per file" line) on a 2-core machine like
# CI's, three shards beside the unit tests; the open-module file ran mostly alone at the end there
# (its figure here is scaled to the others' pace) and the full deploy is the fresh-clone demo's
# figure (one file now). The files the shared DKMS build and the containerd node images changed (open
# modules, Fabric Manager, containerd, CDI, runtime mode, interruptions, verify, file modes, fleet report,
# hostile input, foundation) are those figures scaled by what each measured before and after
# (docs/contributing.md, "The tests' time"). Refresh from a CI run's lines.
SECONDS: dict[str, float] = {
    "test_open_kernel_modules_debian.py": 1510,
    # with the IMEX domain test's 83 s (measured alone, stand-in driver, no DKMS)
    "test_fabric_manager_standin.py": 283,
    "test_full_deploy_debian.py": 1000,
    "test_family_dnf.py": 602,
    "test_docker_e2e.py": 426,
    "test_containerd_e2e.py": 286,
    "test_cdi_e2e.py": 291,
    "test_family_ubuntu.py": 293,
    "test_cdi_runtimes_e2e.py": 293,
    "test_repository_faults.py": 249,
    "test_family_zypper.py": 240,
    "test_credentials_ssh.py": 235,
    "test_package_manager_locks.py": 211,
    "test_verify_runtimes.py": 203,
    "test_family_rpm_more.py": 195,
    "test_nvidia_ctk_first.py": 171,
    "test_rollout_e2e.py": 165,
    "test_family_pacman.py": 157,
    "test_verify.py": 101,
    "test_fleet_report.py": 76,
    # with the cloud-init node's 32 s (92 s to 124 s for the file, run alone here), added to the CI figure
    "test_without_controller_e2e.py": 141,
    "test_interruptions.py": 81,
    "test_runtime_mode_e2e.py": 94,
    "test_undo_debian.py": 96,
    "test_hostile_input.py": 60,
    "test_file_modes.py": 67,
    "test_package.py": 87,
    "test_foundation.py": 59,
    "test_toolkit.py": 68,
    "test_device_links_e2e.py": 48,
    "test_verify_cuda.py": 32,
    "test_driver_reload_decision.py": 21,
    "test_unreadable_repositories.py": 16,
    "test_drift.py": 14,
    "test_drain_e2e.py": 12,
    "test_first_contact.py": 10,
    # every test skips without the lab (GPU_NODE_LAB)
    "test_cluster_e2e.py": 0,
    "test_device_plugin_config_real.py": 0,
    "test_dra_lab_e2e.py": 0,
    "test_gpushare_cluster.py": 0,
    "test_gpushare_scheduler_config_real.py": 0,
    "test_verify_crictl.py": 0,
    "test_verify_crictl_cdi.py": 0,
}
NEW_FILE_SECONDS = 60.0
# Files whose nodes install the same driver for the same kernel, in the order they run (one shard). The
# first file's subject is DKMS's build, and its nodes keep what DKMS built; the others' subject is not the
# build, and their nodes load that build through DKMS's own prebuilt-module tarball rather than compile the
# same module again (harness.keep_dkms_builds, load_dkms_builds).
SAME_SHARD: tuple[tuple[str, ...], ...] = (
    # Debian's driver 535.261.03 for the Debian kernel: the open-module file's switch to the proprietary
    # module builds it, the Fabric Manager file installs it
    ("test_open_kernel_modules_debian.py", "test_fabric_manager_standin.py"),
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
    units = [[name for name in group if name in files] for group in SAME_SHARD if set(group) & set(files)]
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


def run_order(paths: list[Path]) -> list[Path]:
    """Test files in the order they run: as collected, but each SAME_SHARD group's e2e files in the
    group's order, where its first collected file stands."""

    def group_of(path: Path) -> tuple[str, ...] | None:
        return next((group for group in SAME_SHARD if "e2e" in path.parts and path.name in group), None)

    rank = {}
    for index, path in enumerate(paths):
        group = group_of(path)
        if group is None:
            rank[path] = (index, 0)
        else:
            first = min(place for place, other in enumerate(paths) if group_of(other) == group)
            rank[path] = (first, group.index(path.name))
    return sorted(paths, key=rank.__getitem__)


def dkms_builds(path: Path) -> str | None:
    """ "keeps" for the e2e file whose nodes' DKMS builds are kept for the run, "loads" for a file whose
    nodes load them (SAME_SHARD), None for any other."""
    for group in SAME_SHARD:
        if "e2e" in path.parts and path.name in group:
            return "keeps" if path.name == group[0] else "loads"
    return None


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
