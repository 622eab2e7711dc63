"""Who gpu-node runs as on a node, and what runs the node: what preflight refuses a host for first."""

from __future__ import annotations

from typing import Any

from .base import NodeFact

# The package managers the family table knows (deploy/distros/package_managers.py), by the binary named after each
# (Debian's apt package ships apt beside apt-get).
PACKAGE_MANAGER_COMMANDS = ("apt", "dnf", "zypper", "pacman")


class HostAccess(NodeFact[dict[str, Any]]):
    """
    The user commands run as (after pyinfra's --sudo), the kernel, whether systemd is PID 1
    (``/run/systemd/system``, systemd's own test), PID 1's name, and the package managers installed.

    .. code:: python

        {"uid": 0, "user": "root", "kernel": "Linux", "systemd": True, "init": "systemd",
         "managers": ["apt"]}
    """

    def command(self) -> str:
        managers = " ".join(PACKAGE_MANAGER_COMMANDS)
        return (
            'echo "uid $(id -u)"; echo "user $(id -un)"; echo "kernel $(uname -s)";'
            " [ -d /run/systemd/system ] && echo systemd;"
            ' init=; read -r init </proc/1/comm 2>/dev/null; echo "init $init";'
            f' for manager in {managers}; do command -v "$manager" >/dev/null 2>&1 && echo "manager $manager"; done;'
            " true"
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"uid": None, "user": None, "kernel": None, "systemd": False, "init": None, "managers": []}

    def process(self, output: list[str]) -> dict[str, Any]:
        access = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "uid" and rest.isdigit():
                access["uid"] = int(rest)
            elif kind in ("user", "kernel", "init"):
                access[kind] = rest or None
            elif kind == "systemd":
                access["systemd"] = True
            elif kind == "manager" and rest:
                access["managers"].append(rest)
        return access
