"""
Roll a deploy out to a fleet in batches (canary first), stopping at the first failed batch.

    gpu-node-rollout [--batch-size N | --batches 1,5,25%] [--fail-percent P]
                     [--limit GROUP_OR_GLOB ...] INVENTORY DEPLOY [pyinfra options...]

(installed: the console script; in a checkout: ``python -m deploy.fleet.rollout``).

pyinfra runs a deploy operation by operation across all its hosts, so a bad config reaches
every host before pyinfra's own --fail-percent can stop it. This runs
``pyinfra -y --json --limit <batch hosts> --fail-percent P INVENTORY DEPLOY ...`` once per batch,
and a batch where more than P% of its hosts failed (default 0: any) stops the rollout; later
batches are not touched (pyinfra does not even connect to them). Hosts come from pyinfra's own
inventory loading, in inventory order. ``--batches`` sizes are host counts or percentages of
all hosts (rounded down, at least 1); the last size repeats until every host had its turn.

Exit codes: 0 every host converged, 1 a host failed (the summary says which hosts converged,
failed, or were not touched), 2 bad arguments (a missing inventory or deploy file among them),
3 every host done but a GPU node awaits the reboot its driver change needs (pyinfra's run exited
3, deploy/reports/exit_status.py): the batches go on, as a reboot is the operator's to schedule.
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

# pyinfra_cli patches the process for gevent on import: do it first, before any thread exists
# (patching later, e.g. inside a test session that serves files from a thread, deadlocks).
from pyinfra_cli.inventory import make_inventory  # isort: skip
from pyinfra.api import State
from pyinfra.api.exceptions import NoGroupError
from pyinfra.context import ctx_state

# The batch sizes' one reading, which deploy/k8s_gpu.py's move between the allocators shares.
from ..foundations import batches as batch_spec
from ..foundations.command_line import ArgumentParser
from ..reports.exit_status import REBOOT_REQUIRED
from .tool_args import add_pyinfra_run, missing_file

PROG = "gpu-node-rollout"

# pyinfra options the rollout decides per batch: given to pyinfra as well they would change
# which hosts a batch touches or make it a dry run.
OWNED_OPTIONS = ("--limit", "--exclude", "--fail-percent", "--dry")


class RolloutError(Exception):
    """Bad arguments or an unusable inventory: one line for the user."""


def batch_sizes(spec: str, total: int) -> list[int]:
    """Sizes of successive batches covering ``total`` hosts; "1,5,25%" -> 1, 5, then 25% repeated."""
    try:
        return batch_spec.batch_sizes(spec, total)
    except batch_spec.BatchSpecError as error:
        raise RolloutError(str(error)) from None


def split_batches(hosts: list[str], spec: str) -> list[list[str]]:
    batches, start = [], 0
    for size in batch_sizes(spec, len(hosts)):
        batches.append(hosts[start : start + size])
        start += size
    return batches


def inventory_hosts(inventory: str, limits: list[str]) -> list[str]:
    """Host names as pyinfra's CLI loads them, in inventory order; ``limits`` match as
    pyinfra's --limit does (a group name, else a glob on host names)."""
    # As pyinfra's CLI does: a State in context while the inventory file runs.
    state = State()
    state.cwd = os.getcwd()
    try:
        with ctx_state.use(state):
            loaded = make_inventory(inventory, cwd=state.cwd)
    except Exception as error:  # noqa: BLE001 - the inventory is user code: report, do not trace back
        raise RolloutError(f"cannot load inventory {inventory}: {error}") from None
    hosts = [host.name for host in loaded]
    if not hosts:
        raise RolloutError(f"no hosts in inventory {inventory}")
    for name in hosts:
        if name in loaded.groups:
            # pyinfra's --limit would take the whole group for this name.
            raise RolloutError(f"host {name!r} has the name of a group of {inventory}: rename one")
    if not limits:
        return hosts
    chosen: set[str] = set()
    for pattern in limits:
        try:
            matched = {host.name for host in loaded.get_group(pattern)}
        except NoGroupError:
            matched = set(fnmatch.filter(hosts, pattern))
        if not matched:
            raise RolloutError(f"--limit {pattern!r} matches no group or host of {inventory}")
        chosen |= matched
    return [name for name in hosts if name in chosen]


@dataclass
class BatchResult:
    number: int
    hosts: list[str]
    failed: list[str] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=dict)  # host -> operations that changed it
    stopped: str = ""  # why pyinfra ended the batch without results, if it did
    # pyinfra exited REBOOT_REQUIRED: every host done, a GPU node among them awaits its reboot
    reboot_required: bool = False

    def failed_percent(self) -> float:
        return 100 * len(self.failed) / len(self.hosts)

    def converged(self) -> list[str]:
        return [name for name in self.hosts if name not in self.failed]


def read_batch_result(number: int, hosts: list[str], returncode: int, stdout: str) -> BatchResult:
    """
    What one pyinfra run did, from its --json output. pyinfra prints no results when it stops
    early (--fail-percent exceeded, no host left, an error before the run): then every host of
    the batch counts as failed, since none is known to have converged.
    """
    result = BatchResult(number, hosts)
    try:
        results = json.loads(stdout)["results"]
        operations, failed = results["operations"], results["failed_hosts"]
    except (ValueError, KeyError, TypeError):
        result.failed = list(hosts)
        result.stopped = (
            f"pyinfra stopped the batch (exit {returncode}) before reporting results: "
            "these hosts failed or did not finish; pyinfra's error is above"
        )
        return result
    result.failed = [name for name in hosts if name in failed]
    if returncode == REBOOT_REQUIRED and not result.failed:
        result.reboot_required = True
    elif returncode != 0 and not result.failed:
        result.failed = list(hosts)
        result.stopped = f"pyinfra exited {returncode} without naming a failed host"
    for name in hosts:
        result.changes[name] = sum(name in op["success"] for op in operations)
    return result


def run_batch(
    number: int, hosts: list[str], inventory: str, deploy: str, fail_percent: int, pyinfra_args: list[str]
) -> BatchResult:
    command = [sys.executable, "-m", "pyinfra", "-y", "--json", "--fail-percent", str(fail_percent)]
    for name in hosts:
        command += ["--limit", glob.escape(name)]  # a host name, not a pattern
    command += [inventory, deploy, *pyinfra_args]
    # pyinfra's log goes to stderr, straight to the user; its JSON report to a file.
    with tempfile.TemporaryFile(mode="w+") as report:
        returncode = subprocess.run(command, stdout=report).returncode
        report.seek(0)
        return read_batch_result(number, hosts, returncode, report.read())


def is_batch_failed(result: BatchResult, fail_percent: int) -> bool:
    return bool(result.stopped) or result.failed_percent() > fail_percent


def summary(batches: list[list[str]], results: list[BatchResult], fail_percent: int) -> list[str]:
    lines = []
    stopped_at = next((r for r in results if is_batch_failed(r, fail_percent)), None)
    if stopped_at:
        lines.append(
            f"rollout STOPPED at batch {stopped_at.number} of {len(batches)}"
            f" (more than {fail_percent}% of its hosts failed)"
        )
    else:
        lines.append(f"rollout finished: {len(batches)} batch(es)")
    for result in results:
        lines.append(f"batch {result.number}:")
        for name in result.converged():
            lines.append(f"  converged    {name} ({result.changes.get(name, 0)} operation(s) changed)")
        for name in result.failed:
            lines.append(f"  FAILED       {name}")
        if result.stopped:
            lines.append(f"  {result.stopped}")
        if result.reboot_required:
            lines.append(
                "  a GPU node of this batch awaits the reboot its driver change needs (its fleet report names it)"
            )
    for number, hosts in enumerate(batches[len(results) :], start=len(results) + 1):
        lines.append(f"batch {number}: not started")
        lines.extend(f"  not touched  {name}" for name in hosts)
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog=PROG,
        description="Run a pyinfra deploy batch by batch; stop at the first failed batch.",
        epilog=f"exit status: 0 every host converged, 1 a host failed, 2 bad arguments, {REBOOT_REQUIRED} every host "
        "done but a GPU node awaits its reboot",
    )
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--batch-size", type=int, metavar="N", help="hosts per batch")
    sizes.add_argument(
        "--batches",
        default="1,100%",
        metavar="SIZES",
        help="successive batch sizes, counts or percentages; the last repeats (default: 1,100%%)",
    )
    parser.add_argument(
        "--fail-percent",
        type=int,
        default=0,
        metavar="P",
        help="a batch fails when more than P%% of its hosts fail (default 0); also pyinfra's "
        "--fail-percent within the batch",
    )
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="GROUP_OR_GLOB",
        help="roll out to these hosts only (repeatable; matched as pyinfra's --limit)",
    )
    add_pyinfra_run(parser)
    args = parser.parse_args(argv)
    if args.batch_size is not None:
        if args.batch_size < 1:
            parser.error(f"--batch-size {args.batch_size}: allowed: a whole number from 1")
        args.batches = str(args.batch_size)
    if not 0 <= args.fail_percent <= 100:
        parser.error(f"--fail-percent {args.fail_percent}: allowed: 0 to 100")
    for arg in args.pyinfra_args:
        if arg.split("=", 1)[0] in OWNED_OPTIONS:
            parser.error(
                f"{arg}: the rollout sets this per batch; give --limit/--fail-percent "
                f"to {PROG} before INVENTORY (--exclude and --dry are not supported)"
            )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        missing = missing_file(args.inventory, args.deploy)
        if missing:
            raise RolloutError(missing)
        hosts = inventory_hosts(args.inventory, args.limit)
        batches = split_batches(hosts, args.batches)
    except RolloutError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    print(
        f"rollout: {len(hosts)} host(s) in {len(batches)} batch(es) of {', '.join(str(len(b)) for b in batches)}",
        flush=True,
    )
    results = []
    for number, batch in enumerate(batches, start=1):
        print(f"--- batch {number} of {len(batches)}: {', '.join(batch)}", flush=True)
        results.append(run_batch(number, batch, args.inventory, args.deploy, args.fail_percent, args.pyinfra_args))
        if is_batch_failed(results[-1], args.fail_percent):
            break
    print("\n".join(summary(batches, results, args.fail_percent)), flush=True)
    if any(result.failed for result in results) or len(results) < len(batches):
        return 1
    return REBOOT_REQUIRED if any(result.reboot_required for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
