"""
The record of how one package manager works, as the package operations take it (``PackageManager``),
and how each waits for another process holding its lock (``LockWait``). The four managers themselves
are rows of the family table (deploy/distros/package_managers.py); the operations read a manager's
capabilities from its record and never ask for its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pyinfra.api import FactBase, StringCommand
from pyinfra.api.arguments_typed import PyinfraOperation
from pyinfra.api.command import PyinfraCommand

from ..facts.read_ahead import FactCall
from ..foundations.pyinfra_api import Commands

# How long another process may hold a package manager's lock before gpu-node gives up
# (settings.apt_lock_timeout, for every family): apt's own option, zypper's own ZYPP_LOCK_TIMEOUT
# (without it zypper fails at once); dnf waits for its lock without end and pacman not at all, so
# for those two a bounded shell loop over the lock's holder runs before the manager does.
BUSY = "the package manager is busy: after waiting {timeout} s (apt_lock_timeout), {holders}: run again once it is done"
ZYPP_LOCK = "/run/zypp.pid"  # libzypp's lock: the holder's pid
# dnf's process locks: each holds its holder's pid while that process lives
DNF_LOCKS = ("/var/lib/dnf/rpmdb_lock.pid", "/var/cache/dnf/metadata_lock.pid", "/var/cache/dnf/download_lock.pid")
PACMAN_LOCK = "/var/lib/pacman/db.lck"  # created by pacman, held open while it runs, then removed
_HOLDER = "echo \"{lock} is held by process $pid ($(tr '\\0' ' ' <\"/proc/$pid/cmdline\" 2>/dev/null | cut -c1-100 | sed 's/ *$//'))\""
DNF_HOLDERS = (
    f'for lock in {" ".join(DNF_LOCKS)}; do pid=$(cat "$lock" 2>/dev/null) && [ -n "$pid" ] && '
    f'[ -e "/proc/$pid/stat" ] && {_HOLDER.format(lock="$lock")}; done; true'
)
PACMAN_HOLDERS = (
    f"if [ -e {PACMAN_LOCK} ]; then held=; for pid in $(find /proc/[0-9]*/fd -maxdepth 1 -lname "
    f"{PACMAN_LOCK} 2>/dev/null | cut -d/ -f3 | sort -u); do held=1; {_HOLDER.format(lock=PACMAN_LOCK)}; "
    f'done; [ -n "$held" ] || ! [ -e {PACMAN_LOCK} ] || echo "{PACMAN_LOCK} is held by no running '
    f'process (left by a pacman that was killed: remove it once no pacman runs)"; fi'
)
ZYPPER_HOLDERS = (
    f'pid=$(cat {ZYPP_LOCK} 2>/dev/null) && [ -n "$pid" ] && [ -e "/proc/$pid/stat" ] && '
    f"{_HOLDER.format(lock=ZYPP_LOCK)}; true"
)


@dataclass(frozen=True)
class LockWait:
    """How a package manager's commands wait, bounded by settings.apt_lock_timeout, for another
    process holding its lock. The empty one: the manager bounds its own wait (apt's option)."""

    # Shell naming each live holder of the manager's locks, one line each (none: free); a bounded
    # loop over it runs before a command that would not wait, or would wait without end.
    holders: str | None = None
    # The variable bounding the manager's own wait, set on its commands instead of that loop
    # (zypper's ZYPP_LOCK_TIMEOUT).
    timeout_variable: str | None = None
    # The manager waits for its lock without end even to read (dnf): its checks wait first too.
    waits_unbounded: bool = False

    def script(self, lock_timeout: int) -> str:
        """Shell that waits up to ``lock_timeout`` seconds while another process holds the lock, then
        fails in one line naming the lock and its holder ("true" where the manager waits itself)."""
        if self.holders is None:
            return "true"
        message = BUSY.format(timeout=int(lock_timeout), holders="%s")
        # Seconds slept, counted: a deadline in whole seconds of the clock ends up to one second early,
        # and the line says how long it waited.
        return (
            f"slept=0; "
            f'while held=$({self.holders}); [ -n "$held" ]; do '
            f'if [ "$slept" -ge {int(lock_timeout)} ]; then '
            f'printf \'gpu-node: {message}\\n\' "$(printf \'%s\\n\' "$held" | awk \'NR > 1 {{ printf "; " }} {{ printf "%s", $0 }}\')" >&2; exit 1; fi; '
            "sleep 1; slept=$((slept + 1)); done"
        )

    def environment(self, lock_timeout: int) -> dict[str, Any]:
        """The manager's own bounded wait, as its commands' environment (empty: none)."""
        return {self.timeout_variable: str(int(lock_timeout))} if self.timeout_variable else {}

    def bounded(self, commands: Iterable[str | PyinfraCommand], lock_timeout: int) -> Commands:
        """``commands`` (the manager's, e.g. pyinfra's operation's) with the wait for its lock: with
        the manager's own bound on each, else after one bounded wait."""
        waited = False
        for command in commands:
            if isinstance(command, str):
                command = StringCommand(command)
            if not isinstance(command, StringCommand):
                yield command
            elif self.timeout_variable:
                yield StringCommand(command, _env=self.environment(lock_timeout))
            else:
                if not waited and self.holders is not None:
                    yield StringCommand(self.script(lock_timeout))
                    waited = True
                yield command

    def before(self, template: str, lock_timeout: int) -> str:
        """``template`` (shell formatted later: its braces kept) in a subshell after the bounded wait."""
        if self.timeout_variable:
            wait = f"export {self.timeout_variable}={int(lock_timeout)};"
        else:
            wait = self.script(lock_timeout).replace("{", "{{").replace("}", "}}") + ";"
        return f"({wait} {template})"


# The managers' own waits (the family table, deploy/distros/package_managers.py, gives each its own)
DNF_LOCK_WAIT = LockWait(holders=DNF_HOLDERS, waits_unbounded=True)
ZYPPER_LOCK_WAIT = LockWait(holders=ZYPPER_HOLDERS, timeout_variable="ZYPP_LOCK_TIMEOUT")
PACMAN_LOCK_WAIT = LockWait(holders=PACMAN_HOLDERS)


@dataclass(frozen=True)
class PackageManager:
    """How one package manager installs, pins, holds, removes and finds packages."""

    name: str  # apt, dnf, zypper, pacman: as messages name it
    # The operation that installs {name: version or None} and holds them when asked; every one
    # takes (packages, hold, lock_timeout: the wait for a busy manager), see deploy/operations/packages.py.
    install: PyinfraOperation[...]
    # pyinfra's fact of every installed package ({name: {versions}})
    installed_fact: type[FactBase[Any]]
    # Shell that exits 0 when the package manager can install {package} (from its current lists).
    available_check: str
    # Shell listing every installed package's name, one a line: what an install added is what the
    # list after it has beyond the list before (deploy/node/records.py), for the undo run to remove.
    installed_listing: str
    # The commands releasing its holds on the named packages that are held now (read when called),
    # as (names, lock_timeout) -> commands: "holds by" apt-mark, dnf versionlock, zypper locks, pacman's IgnorePkg.
    released_holds: Callable[[list[str], int], list[str | PyinfraCommand]]
    # The command removing the named packages and no other, as (names, lock_timeout) -> command: one
    # that would take another package with it fails, nothing removed (the undo's removal).
    removal: Callable[[list[str], int], StringCommand]
    # How its commands wait for another process holding its lock.
    lock: LockWait = LockWait()
    # Refreshes the package lists before a choice made from them (apt); None: the manager does it.
    refresh_lists: Callable[[int], Commands] | None = None
    # False: installs only the repository's current version (a rolling distro).
    can_pin: bool = True
    # True: a pin names a version the lists offer, release and all (apt's 580.95.05-1); False: its
    # upstream version, which every release of it matches (dnf's and zypper's name-version).
    pins_exact_versions: bool = False
    # True: versions the driver stage's preflight could not read (lists this run adds or refreshes)
    # are chosen by the driver's install, after its refresh (apt).
    resolves_at_install: bool = False
    # The read of the named packages' installed versions and holds its installs make, which a stage
    # reads ahead with the rest of its reads (apt's DebPackageStates); None: its installs read as they run.
    states_read: Callable[[Iterable[str]], FactCall] | None = None
    # The command words removing packages apart from an install, leaving what depends on them (the
    # other kernel module type's: rpm -e --nodeps, pacman -Rdd); None: the install's own transaction
    # removes them (apt's ``name-``).
    forced_removal: tuple[str, ...] | None = None
    # Where a repository file named {name} goes; None: no third-party repository (the distro's own).
    repository_file: str | None = None
    # apt: a repository is trusted through a signed-by keyring fetched beside its source; the RPM
    # managers through the key imported into rpm's database, its checked copy kept at key_file
    # (a repository {name}'s), which the repository file names.
    signed_by_keyring: bool = False
    key_file: str | None = None
    # Shell that exits 0 when the repository file {candidate} works (its metadata signature verifies):
    # checked before the file goes where the manager reads it, so a refused one is not left behind;
    # run it as ``repository_check(manager, lock_timeout)`` words it, waiting for a busy manager.
    # It trusts the keys rpm's database has (the repository's, checked and imported first) and
    # imports none.
    repository_check: str | None = None
    # The operation enabling a module stream (module, stream, lock_timeout), for DriverPackages.module.
    module_operation: Callable[..., Any] | None = None
    # The command words listing every version the lists offer of the packages named after them, as a
    # function of the wait for a busy manager's lock (facts/packages.py, PackageVersions); None:
    # nothing to read (a rolling distro installs the one version its repositories carry).
    version_listing: Callable[[int], tuple[str, ...]] | None = None
