"""
Drift check for cron and CI: plan a deploy without changing anything and exit non-zero
when any host would change, listing what would change.

    python scripts/drift.py inventory.py deploy/gpu_node.py [pyinfra options, e.g. --data k=v]

Exit codes: 0 no drift, 2 drift (the list is printed), 1 the plan itself failed.
It runs ``pyinfra --dry --json`` (pyinfra's own change detection) and reads its plan.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def drifted_operations(plan: list[dict]) -> list[tuple[str, str]]:
    """(host, operation) pairs that would change; follow-up steps (restarts, rebuilds)
    guarded by another operation's change are not drift on their own."""
    return [(host, op["name"]) for op in plan for host in op["hosts_with_change"]]


def main(argv: list[str]) -> int:
    command = [sys.executable, "-m", "pyinfra", "--dry", "--json", *argv]
    result = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        print(f"drift check failed: pyinfra exited {result.returncode}", file=sys.stderr)
        return 1
    try:
        plan = json.loads(result.stdout)["plan"]
    except (ValueError, KeyError) as error:
        print(f"drift check failed: unreadable pyinfra plan ({error})", file=sys.stderr)
        return 1
    drift = drifted_operations(plan)
    if not drift:
        print("no drift: every host matches the deploy")
        return 0
    print(f"drift: {len(drift)} change(s) would be made")
    for host, name in drift:
        print(f"  {host}: {name}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
