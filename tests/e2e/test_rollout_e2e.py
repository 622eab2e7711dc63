"""
Rolling out in batches on real node containers (deploy/fleet/rollout.py, the console script
gpu-node-rollout): a bad config stops after the first batch and the later batches stay untouched; a
good one rolls through every batch, and again changes nothing.

The "bad config" is real: ``nvidia_toolkit_version`` pinned to a version the repository of the
toolkit tests/toolkit_repo.py serves on 127.0.0.1 (the stand-in, or NVIDIA's debs from the lab) does not
publish, so apt on the node refuses it; the good one pins the version it does publish. "Untouched" is proven with
``node.stat`` (mode, owner, size, mtime, checksum) of the toolkit's apt source and keyring and
of dpkg's status file, before and after.
"""

from __future__ import annotations

import os
import sys

from harness import REPO, SAFE_DATA, run

from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES

DPKG_STATUS = "/var/lib/dpkg/status"
TOOLKIT_ONLY = {"stages": "toolkit"}
MISSING_VERSION = "9.9.9-1"  # the repository publishes the real 1.20.0-1 only


def footprint(node) -> dict[str, str | None]:
    """What the toolkit stage changes on a node: its apt source and keyring, and dpkg's database."""
    return {path: node.stat(path) if node.exists(path) else None for path in (APT_SOURCE, APT_KEYRING, DPKG_STATUS)}


def installed_toolkit(node) -> dict[str, str]:
    out = node.sh(
        "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' " + " ".join(TOOLKIT_PACKAGES) + " 2>/dev/null || true"
    ).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.endswith(" installed")}


def write_inventory(tmp_path, nodes) -> str:
    path = tmp_path / "fleet_inventory.py"
    path.write_text(f"gpu_nodes = {[node.target for node in nodes]!r}\n")
    return str(path)


def pyinfra_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPU_NODES", None)  # the inventory file decides the hosts
    return env


def data_args(data: dict) -> list[str]:
    return [arg for key, value in {**SAFE_DATA, **data}.items() for arg in ("--data", f"{key}={value}")]


def rollout(inventory: str, data: dict, *options: str):
    args = [sys.executable, "-m", "deploy.fleet.rollout", *options, inventory, "deploy/gpu_node.py", *data_args(data)]
    return run(args, check=False, cwd=REPO, env=pyinfra_env(), timeout=1500)


def explain(result) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-6000:]}"


def test_bad_toolkit_pin_against_the_toolkit_repo_stops_rollout_after_canary_batch_rest_untouched(
    start_node, toolkit_repo, tmp_path
):
    """The toolkit is tests/toolkit_repo.py's: the STAND-IN packages (test id standin-toolkit), NVIDIA's own debs
    only with GPU_NODE_LAB (real-toolkit); containerd, Docker, runc and systemd are Debian's, real. No GPU."""
    canary, second, third = start_node(), start_node(), start_node()
    inventory = write_inventory(tmp_path, [canary, second, third])
    before = {node.id: footprint(node) for node in (canary, second, third)}

    result = rollout(inventory, {**TOOLKIT_ONLY, **toolkit_repo.data(version=MISSING_VERSION)})

    assert result.returncode == 1, explain(result)
    assert "2 batch(es) of 1, 2" in result.stdout, explain(result)  # the default: a canary, then the rest
    assert "rollout STOPPED at batch 1 of 2" in result.stdout, explain(result)
    assert f"FAILED       {canary.target}" in result.stdout
    assert f"not touched  {second.target}" in result.stdout
    assert f"not touched  {third.target}" in result.stdout
    assert f"Version '{MISSING_VERSION}'" in result.stderr, "apt on the canary refused the pin"

    # The canary really ran the deploy (its apt source was written) and installed nothing.
    after_canary = footprint(canary)
    assert before[canary.id][APT_SOURCE] is None and after_canary[APT_SOURCE] is not None
    assert after_canary[DPKG_STATUS] == before[canary.id][DPKG_STATUS]
    assert installed_toolkit(canary) == {}
    for node in (second, third):
        assert footprint(node) == before[node.id], f"{node.target} was touched by a stopped rollout"


def test_good_config_rolls_through_every_batch_and_a_second_rollout_changes_nothing(start_node, toolkit_repo, tmp_path):
    nodes = [start_node(), start_node(), start_node()]
    inventory = write_inventory(tmp_path, nodes)
    data = {**TOOLKIT_ONLY, **toolkit_repo.data(version=toolkit_repo.version)}

    first = rollout(inventory, data, "--batches", "1,2")

    assert first.returncode == 0, explain(first)
    assert "rollout finished: 2 batch(es)" in first.stdout, explain(first)
    for node in nodes:
        assert installed_toolkit(node) == {name: toolkit_repo.version for name in TOOLKIT_PACKAGES}, node.target
        assert f"converged    {node.target} (0 operation(s) changed)" not in first.stdout
    assert "FAILED" not in first.stdout and "not touched" not in first.stdout

    converged = {node.id: footprint(node) for node in nodes}
    second = rollout(inventory, data, "--batches", "1,2")

    assert second.returncode == 0, explain(second)
    for node in nodes:
        assert f"converged    {node.target} (0 operation(s) changed)" in second.stdout, explain(second)
        assert footprint(node) == converged[node.id], f"a second rollout changed {node.target}"


def test_pyinfra_native_serial_fail_percent_zero_leaves_second_node_untouched_parallel_does_not(
    start_node, toolkit_repo, tmp_path
):
    """
    pyinfra's own `--serial --fail-percent 0` stops after the first failing host; which host goes
    first is pyinfra's choice (a set), not inventory order. Without --serial, pyinfra runs each
    operation on every host before it checks --fail-percent, so `--parallel 1` still reaches all.
    """
    nodes = [start_node(), start_node()]
    inventory = write_inventory(tmp_path, nodes)
    bad = data_args({**TOOLKIT_ONLY, **toolkit_repo.data(version=MISSING_VERSION)})
    before = {node.id: footprint(node) for node in nodes}

    serial = run(
        [
            sys.executable,
            "-m",
            "pyinfra",
            "-y",
            "--serial",
            "--fail-percent",
            "0",
            inventory,
            "deploy/gpu_node.py",
            *bad,
        ],
        check=False,
        cwd=REPO,
        env=pyinfra_env(),
        timeout=900,
    )

    assert serial.returncode == 1, explain(serial)
    assert "Over 0% of hosts failed (50%)" in serial.stderr, explain(serial)
    touched = [node for node in nodes if footprint(node) != before[node.id]]
    untouched = [node for node in nodes if footprint(node) == before[node.id]]
    assert len(touched) == 1 and len(untouched) == 1, explain(serial)
    assert installed_toolkit(touched[0]) == {}
    assert footprint(untouched[0])[APT_SOURCE] is None

    parallel = run(
        [
            sys.executable,
            "-m",
            "pyinfra",
            "-y",
            "--parallel",
            "1",
            "--fail-percent",
            "0",
            inventory,
            "deploy/gpu_node.py",
            *bad,
        ],
        check=False,
        cwd=REPO,
        env=pyinfra_env(),
        timeout=900,
    )

    assert parallel.returncode == 1, explain(parallel)
    assert footprint(untouched[0])[APT_SOURCE] is not None, "--parallel 1 is no batch: every host runs each step"
    assert installed_toolkit(untouched[0]) == {}
