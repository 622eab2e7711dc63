"""What an earlier, interrupted run or another package manager left on the node."""

from __future__ import annotations

from .base import NodeFact


# An interrupted run (lost connection, killed controller) can leave a new config in place with
# the daemon still running the old one; the next run finds a mark here and restarts
# (deploy/operations/safe_install.py writes it).
PENDING_RESTART_DIR = "/var/lib/gpu-node/restart-pending"

# apt's and dpkg's locks, in the order apt takes them.
DPKG_LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/cache/apt/archives/lock",
              "/var/lib/apt/lists/lock")

# /proc/locks names the holder of every fcntl/flock lock by inode: no fuser or lsof on a minimal
# node, and apt's locks are fcntl locks a shell cannot probe without taking them.
# One stat and one awk for every lock (awk drops repeats): the no-op reads this on each run.
LOCK_HOLDERS_SCRIPT = """stat -c '%i %n' {locks} 2>/dev/null |
awk 'NR == FNR {{ lock[$1] = $2; next }} $2 != "->" {{ n = split($6, id, ":"); if (id[n] in lock) {{ held = lock[id[n]] " " $5; if (!(held in seen)) print held; seen[held] = 1 }} }}' - /proc/locks |
while read -r lock pid; do
    echo "held $lock $pid $(tr '\\0' ' ' </proc/$pid/cmdline 2>/dev/null | cut -c1-100)"
done"""


def lock_holders_script() -> str:
    return LOCK_HOLDERS_SCRIPT.format(locks=" ".join(DPKG_LOCKS))


class PackageManagerState(NodeFact):
    """
    dpkg's state on Debian-family nodes (empty elsewhere): who holds its locks, and whether an
    earlier dpkg run was interrupted (``dpkg --audit`` has something to say).

    .. code:: python

        {"held": [{"lock": "/var/lib/dpkg/lock-frontend", "pid": 812, "command": "apt-get install x"}],
         "interrupted": ["The following packages are only half configured, ..."]}
    """

    def command(self):
        return (
            "if command -v dpkg >/dev/null 2>&1; then "
            + lock_holders_script()
            # a glob, not ls: one process fewer on every run
            + "; for update in /var/lib/dpkg/updates/* /var/lib/dpkg/updates/.[!.]*; do"
            + " [ -e \"$update\" ] && { echo 'audit dpkg was interrupted'; break; }; done"
            + "; dpkg --audit 2>/dev/null | sed 's/^/audit /'; fi"
        )

    @staticmethod
    def default():
        return {"held": [], "interrupted": []}

    def process(self, output):
        state = self.default()
        for line in output:
            kind, _, rest = line.partition(" ")
            if kind == "held":
                lock, pid, *command = rest.split(" ", 2)
                state["held"].append({"lock": lock, "pid": int(pid), "command": " ".join(command).strip()})
            elif kind == "audit" and rest.strip():
                state["interrupted"].append(rest.strip())
        return state


class PendingRestarts(NodeFact):
    """
    Units whose new config an interrupted run installed without restarting them:
    ``{unit: config path}``.
    """

    def command(self):
        return (
            f"for mark in {PENDING_RESTART_DIR}/*; do [ -f \"$mark\" ] && "
            "printf '%s %s\\n' \"${mark##*/}\" \"$(head -n 1 \"$mark\")\"; done; true"
        )

    @staticmethod
    def default():
        return {}

    def process(self, output):
        pending = {}
        for line in output:
            unit, _, path = line.strip().partition(" ")
            if unit:
                pending[unit] = path
        return pending
