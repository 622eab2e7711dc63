"""
Drift check for cron and CI: plan a deploy without changing anything and exit non-zero
when any host would change, listing what would change.

    gpu-node-drift INVENTORY DEPLOY [pyinfra options, e.g. --data k=v]

(installed: the console script; in a checkout: ``python -m deploy.fleet.drift inventory.py deploy/gpu_node.py``).

Exit codes: 0 no drift, 2 drift (the list is printed), 1 the plan itself failed or the arguments
are wrong (a missing inventory or deploy file among them): 2 is kept for drift alone, so that cron
and CI can tell it from a check that did not run.
It runs ``pyinfra --dry --json`` (pyinfra's own change detection) in the working directory and reads
its plan.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from ..foundations.command_line import ArgumentParser
from .tool_args import add_pyinfra_run, missing_file

PROG = "gpu-node-drift"
FAILED, DRIFT = 1, 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    # argparse exits 2 on bad arguments; here 2 means drift
    parser = ArgumentParser(
        error_status=FAILED,
        prog=PROG,
        description="Plan a pyinfra deploy with --dry (nothing changes) and list what would change.",
        epilog=f"exit status: 0 no drift, {DRIFT} drift, {FAILED} the plan failed or bad arguments",
    )
    add_pyinfra_run(parser)
    return parser.parse_args(argv)


def drifted_operations(plan: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(host, operation) pairs that would change; follow-up steps (restarts, rebuilds)
    guarded by another operation's change are not drift on their own."""
    return [(host, op["name"]) for op in plan for host in op["hosts_with_change"]]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_file(args.inventory, args.deploy)
    if missing:
        print(f"{PROG}: error: {missing}", file=sys.stderr)
        return FAILED
    command = [sys.executable, "-m", "pyinfra", "--dry", "--json", args.inventory, args.deploy, *args.pyinfra_args]
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        print(f"drift check failed: pyinfra exited {result.returncode}", file=sys.stderr)
        return FAILED
    try:
        plan = json.loads(result.stdout)["plan"]
    except (ValueError, KeyError) as error:
        print(f"drift check failed: unreadable pyinfra plan ({error})", file=sys.stderr)
        return FAILED
    drift = drifted_operations(plan)
    if not drift:
        print("no drift: every host matches the deploy")
        return 0
    print(f"drift: {len(drift)} change(s) would be made")
    for host, name in drift:
        print(f"  {host}: {name}")
    return DRIFT


if __name__ == "__main__":
    sys.exit(main())
