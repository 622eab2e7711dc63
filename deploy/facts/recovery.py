"""What an earlier, interrupted run or another package manager left on the node."""

from __future__ import annotations

from typing import Any

from ..foundations import shell_scripts
from .base import NodeFact

# An interrupted run (lost connection, killed controller) can leave a new config in place with
# the daemon still running the old one; the next run finds a mark here and restarts
# (deploy/operations/safe_install.py writes it).
PENDING_RESTART_DIR = "/var/lib/gpu-node/restart-pending"

# apt's and dpkg's locks, in the order apt takes them.
DPKG_LOCKS = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/cache/apt/archives/lock",
    "/var/lib/apt/lists/lock",
)


def lock_holders_script() -> str:
    """Shell defining ``lock_holders LOCK...`` (deploy/shell/lock_holders.sh)."""
    return shell_scripts.body("lock_holders")


class PackageManagerState(NodeFact[dict[str, Any]]):
    """
    dpkg's state on Debian-family nodes (empty elsewhere): who holds its locks, and whether an
    earlier dpkg run was interrupted (``dpkg --audit`` has something to say).

    .. code:: python

        {"held": [{"lock": "/var/lib/dpkg/lock-frontend", "pid": 812, "command": "apt-get install x"}],
         "interrupted": ["The following packages are only half configured, ..."]}
    """

    def command(self) -> str:
        return (lock_holders_script() + shell_scripts.script("package_manager_state", DPKG_LOCKS)).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {"held": [], "interrupted": []}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.partition(" ")
            if kind == "held":
                lock, pid, *command = rest.split(" ", 2)
                state["held"].append({"lock": lock, "pid": int(pid), "command": " ".join(command).strip()})
            elif kind == "audit" and rest.strip():
                state["interrupted"].append(rest.strip())
        return state


class PendingRestarts(NodeFact[dict[str, Any]]):
    """
    Units whose new config an interrupted run installed without restarting them:
    ``{unit: config path}``.
    """

    def command(self) -> str:
        return shell_scripts.script("pending_restarts", pending_dir=PENDING_RESTART_DIR).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        pending = {}
        for line in output:
            unit, _, path = line.strip().partition(" ")
            if unit:
                pending[unit] = path
        return pending
