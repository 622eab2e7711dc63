"""
The command line the operator's tools that run pyinfra share (gpu-node-rollout, gpu-node-drift):
``INVENTORY DEPLOY [pyinfra options...]``, as pyinfra's own command line takes them.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_pyinfra_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inventory",
        metavar="INVENTORY",
        help="pyinfra's inventory: a file (inventory.py), or hosts and connectors (@local, gpu1,gpu2)",
    )
    parser.add_argument("deploy", metavar="DEPLOY", help="the deploy file (deploy/gpu_node.py, or a site's own)")
    parser.add_argument(
        "pyinfra_args",
        nargs=argparse.REMAINDER,
        metavar="...",
        help="passed on to pyinfra (e.g. --data key=value, --ssh-user, --sudo)",
    )


def missing_file(inventory: str, deploy: str) -> str | None:
    """One line naming the inventory or deploy file that is not there, else None. pyinfra reads a
    name ending .py as a file; a missing inventory file it would take for a host name to look up."""
    for what, name in (("inventory file", inventory), ("deploy file", deploy)):
        if name.endswith(".py") and not Path(name).is_file():
            return f"{what} {name}: no such file"
    return None
