"""
Install pinned packages and hold them, through pyinfra's own package operations.

pyinfra's ``apt.packages(update=True)`` refreshes the package lists on every run; these
operations read the package state first and touch the package manager only when a package
is missing or at another version, so a no-op re-run stays a single read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any

from pyinfra import host
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.command import PyinfraCommand
from pyinfra.facts.pacman import PacmanPackages
from pyinfra.operations import apt

from ..facts.nvidia import IgnoredPackages
from ..facts.packages import (
    DebPackageStates,
    DnfModuleStreams,
    MultiversionPackages,
    PackageVersions,
    RpmPackageStates,
    ZypperLocks,
    zypper_listing,
)
from ..facts.read_ahead import FactCall, known_fact, read
from ..facts.recovery import DPKG_LOCKS, lock_holders_script
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import Commands
from ..foundations.run_state import per_run
from ..node import records as node_records
from . import probes
from .failure import fail_host
from .package_manager import DNF_LOCK_WAIT, PACMAN_LOCK_WAIT, ZYPPER_LOCK_WAIT

if TYPE_CHECKING:
    from pyinfra.api import Host, State

# pacman holds with IgnorePkg lines of pacman.conf's [options]; it reads every one of them.
PACMAN_HOLD_LIST = "sed -n 's/^[[:space:]]*IgnorePkg[[:space:]]*=//p' /etc/pacman.conf"
PACMAN_CONF = "/etc/pacman.conf"


def pacman_hold_command(names: Iterable[str], conf: str = PACMAN_CONF) -> StringCommand:
    """One IgnorePkg line of ``names`` under pacman.conf's [options] (sed's script one quoted word)."""
    return StringCommand(
        "sed", "-i", QuoteString(f"/^\\[options\\]/a IgnorePkg = {' '.join(names)}"), QuoteString(conf)
    )


# One name off every IgnorePkg line (a line left with none goes)
PACMAN_UNHOLD_EXPRESSION = "s/([=[:space:]]){name}([[:space:]]|$)/\\1/"
PACMAN_EMPTY_HOLD_LINE = "/^[[:space:]]*IgnorePkg[[:space:]]*=[[:space:]]*$/d"


def apt_lock_option(lock_timeout: int) -> str:
    """apt's wait for dpkg's lock (settings.apt_lock_timeout): its own default is none, so a node
    where unattended-upgrades runs would fail at once."""
    return f"-o DPkg::Lock::Timeout={int(lock_timeout)}"


# Every installed package's name, one a line, as each manager's installs record what they add
# (PackageManager.installed_listing).
DPKG_INSTALLED = "dpkg-query -W -f '${Status} ${Package}\\n' 2>/dev/null | awk '$3 == \"installed\" { print $4 }'"
# rpm lists the keys it imported as packages named gpg-pubkey
RPM_INSTALLED = "rpm -qa --qf '%{NAME}\\n' | grep -vx gpg-pubkey"
PACMAN_INSTALLED = "pacman -Qq"


def recorded_install(installed_listing: str, commands: Iterable[str | PyinfraCommand]) -> Commands:
    """``commands`` (an install by the manager whose ``installed_listing`` this is) between the two
    halves of its record: the packages it adds (named or pulled in, none the node had) are recorded
    for the undo run (deploy/node/records.py)."""
    yield StringCommand(node_records.packages_before(installed_listing))
    yield from commands
    yield StringCommand(node_records.packages_installed(installed_listing))


class AptListsRefreshed(set[str]):
    """Hosts whose apt lists this run refreshed since their last apt source change (deploy/foundations/run_state.py)."""


def refresh_apt_lists(lock_timeout: int) -> Commands:
    """
    ``apt-get update``, unless this run refreshed the lists already and no apt source changed since.
    """
    refreshed = per_run(host.state, AptListsRefreshed)
    if host.name in refreshed:
        host.noop("apt lists were refreshed earlier in this run")
        return
    yield FunctionCommand(_update_apt_lists, (StringCommand("apt-get", apt_lock_option(lock_timeout), "update"),), {})


def _update_apt_lists(state: State, host: Host, command: StringCommand) -> bool:
    """Run ``apt-get update``; a failure (a bad signature, an unreachable mirror) fails the host in one
    line: apt's last error."""
    succeeded, output = host.run_shell_command(
        command, print_output=state.print_output, print_input=state.print_input, **probes.connector_arguments(host)
    )
    if not succeeded:
        lines = [line.strip() for line in output.output_lines]
        errors = [line for line in lines if line.startswith("E:")]
        # apt names a bad signature in its GPG warning, and says only "is not signed" in the error.
        gpg = [line for line in lines if line.startswith("W: GPG error")]
        return fail_host(
            state,
            host,
            "apt-get update failed: " + (errors[-1] if errors else "no error line") + (f" ({gpg[0]})" if gpg else ""),
        )
    per_run(state, AptListsRefreshed).add(host.name)
    return True


def apt_sources_changed() -> None:
    """Call when an operation changes apt sources: the next install refreshes the lists."""
    per_run(host.state, AptListsRefreshed).discard(host.name)


def _needed(states: dict[str, Any], packages: dict[str, str | None]) -> list[str]:
    return [
        name
        for name, version in packages.items()
        if name not in states or (version and states[name]["version"] != version)
    ]


def _rpm_version_matches(installed: str, wanted: str) -> bool:
    """An RPM pin as dnf and zypper read it: a version without a release matches any release of it
    (RpmPackageStates reads version-release, without the epoch), and a SUSE kernel module package's
    ``VERSION_kKERNEL`` matches its driver VERSION (the KMP pinned with the driver's userspace)."""
    wanted = wanted.split(":", 1)[-1]
    installed = installed.split(":", 1)[-1]
    return installed == wanted or installed.startswith((wanted + "-", wanted + "_k"))


def _rpm_needed(states: dict[str, Any], packages: dict[str, str | None]) -> list[str]:
    return [
        name
        for name, version in packages.items()
        if name not in states or (version and not _rpm_version_matches(states[name]["version"], version))
    ]


def apt_install_needed(states: dict[str, Any], packages: dict[str, str | None], hold: bool = False) -> bool:
    """Whether apt_install would change anything, from its DebPackageStates fact."""
    return bool(_needed(states, packages)) or (hold and not all(states[name]["held"] for name in packages))


# Every install operation takes the same arguments, so the package-manager table in
# deploy/distros/package_managers.py calls them alike: ``packages`` {name: version or None}, ``hold`` and
# ``lock_timeout`` (apt's wait for dpkg's lock, settings.apt_lock_timeout).


def deb_states_read(packages: Iterable[str]) -> FactCall:
    """What ``apt_install`` reads of ``packages`` (a stage reads it ahead with the same call)."""
    return (DebPackageStates, {"packages": sorted(packages)})


@operation()
def apt_install(packages: dict[str, Any], hold: bool = False, *, lock_timeout: int) -> Commands:
    """
    Ensure Debian packages are installed, at ``version`` where one is given ({name: version or None}),
    refreshing the lists first only when something must be installed; hold them when asked.
    """
    states = read(host, deb_states_read(packages))
    needed = _needed(states, packages)
    if needed:
        yield from refresh_apt_lists(lock_timeout)
        yield from recorded_install(
            DPKG_INSTALLED,
            apt.packages._inner(
                packages=[f"{name}={packages[name]}" if packages[name] else name for name in needed],
                # We manage holds ourselves: a new pin must be able to move a held package.
                extra_install_args=f"{apt_lock_option(lock_timeout)} --allow-change-held-packages --allow-downgrades",
            ),
        )
    else:
        host.noop("packages are installed: " + ", ".join(f"{n} {states[n]['version']}" for n in sorted(packages)))
    if hold:
        # Installing a held package at another version releases its hold: hold again.
        to_hold = sorted(name for name in packages if name in needed or not states[name]["held"])
        if to_hold:
            yield from apt_holds(to_hold, states)


def recorded_holds(names: Iterable[str], held_before: Container[str], command: StringCommand) -> Commands:
    """``command`` (a hold of ``names``), after the record of those not in ``held_before`` for the undo
    run to release (deploy/node/records.py)."""
    newly = [name for name in names if name not in held_before]
    if newly:
        yield StringCommand(node_records.record_holds(newly))
    yield command


def apt_holds(names: list[str], states: dict[str, Any]) -> Commands:
    """apt-mark hold of ``names``; those not held before (DebPackageStates ``states``) recorded first."""
    held = {name for name, state in states.items() if state.get("held")}
    yield from recorded_holds(names, held, StringCommand("apt-mark", "hold", *[QuoteString(name) for name in names]))


def recovery_script(lock_timeout: int) -> str:
    """Wait, bounded, for apt/dpkg locks held by others; then finish an interrupted dpkg run."""
    return lock_holders_script() + shell_scripts.script(
        "package_manager_recovery", DPKG_LOCKS, lock_timeout=int(lock_timeout)
    )


@operation(is_idempotent=False)
def recover_package_manager(lock_timeout: int) -> Commands:
    """
    Before any change: wait up to ``lock_timeout`` seconds for another apt or dpkg (unattended-upgrades,
    an operator) to release its locks, failing with the lock and its holder; then finish what an
    interrupted dpkg run left half-configured (``dpkg --configure -a``).
    """
    yield StringCommand(recovery_script(lock_timeout))


@operation()
def dnf_install(packages: dict[str, Any], hold: bool = False, *, lock_timeout: int) -> Commands:
    """The dnf counterpart of apt_install; holds with dnf's versionlock plugin."""
    yield from DNF_LOCK_WAIT.bounded(_dnf_commands(packages, hold), lock_timeout)


# dnf's own command, not pyinfra's dnf.packages: that reads `dnf repoquery --whatprovides` of each
# missing package while the deploy is prepared, and dnf waits without end for a busy dnf's metadata
# lock there, before the bounded wait runs (RpmPackageStates already says what is missing).
DNF_INSTALL = "dnf install -y"
DNF_VERSIONLOCK = "python3-dnf-plugin-versionlock"


def _dnf_commands(packages: dict[str, Any], hold: bool) -> Commands:
    states = host.get_fact(RpmPackageStates, packages=sorted(packages))
    needed = _rpm_needed(states, packages)
    locked = sorted(name for name in needed if states.get(name, {}).get("held"))
    if locked:
        # versionlock pins the old version: release it so the new pin can install.
        yield StringCommand("dnf", "versionlock", "delete", *[QuoteString(name) for name in locked])
    if needed:
        yield from recorded_install(
            RPM_INSTALLED,
            [
                StringCommand(
                    DNF_INSTALL,
                    *[QuoteString(f"{name}-{packages[name]}" if packages[name] else name) for name in needed],
                )
            ],
        )
    else:
        host.noop("packages are installed: " + ", ".join(f"{n} {states[n]['version']}" for n in sorted(packages)))
    if hold:
        to_hold = sorted(name for name in packages if name in needed or not states[name]["held"])
        if to_hold:
            yield from recorded_install(
                RPM_INSTALLED,
                [StringCommand(f"rpm -q {DNF_VERSIONLOCK} >/dev/null 2>&1 || {DNF_INSTALL} {DNF_VERSIONLOCK}")],
            )
            held = {name for name in to_hold if states.get(name, {}).get("held")}
            yield from recorded_holds(
                to_hold, held, StringCommand("dnf", "versionlock", "add", *[QuoteString(name) for name in to_hold])
            )


# dnf's own command, not pyinfra's dnf.module: that first reads `dnf module list --enabled`, where dnf
# waits without end for a busy dnf's metadata lock, before any bounded wait.
@operation()
def dnf_module_enable(module: str, stream: str, *, lock_timeout: int) -> Commands:
    """Enable the dnf module stream ``module:stream``, unless dnf's module state has it enabled
    (DnfModuleStreams, read ahead by the driver stage's preflight). Another stream of the module
    enabled (the other kernel module type) is reset first: dnf refuses to switch enabled streams,
    and the driver's install then replaces the module's packages at their pins."""
    enabled = known_fact(host, DnfModuleStreams).get(module)
    if enabled == stream:
        host.noop(f"dnf module {module}:{stream} is enabled")
        return
    commands = [StringCommand("dnf module reset -y", QuoteString(module))] if enabled else []
    commands.append(StringCommand("dnf module enable -y", QuoteString(f"{module}:{stream}")))
    yield from DNF_LOCK_WAIT.bounded(commands, lock_timeout)


@operation()
def zypper_install(packages: dict[str, Any], hold: bool = False, *, lock_timeout: int) -> Commands:
    """The zypper counterpart of dnf_install (``name=version`` pins, matched as zypper reads them, a
    SUSE kernel module package's ``VERSION_kKERNEL`` by its driver VERSION); refreshes the
    repositories first so that one whose signature zypper refuses stops the run there (zypper
    install skips it and goes on); imports no key (a repository's own is checked and imported when it
    is added, deploy/operations/download.py: one whose key rpm's database lacks stops the run
    here, in zypper's words); holds with zypper locks."""
    yield from ZYPPER_LOCK_WAIT.bounded(_zypper_commands(packages, hold, lock_timeout), lock_timeout)


# zypper's own command, not pyinfra's zypper.packages: that cannot remove a package in the install's
# transaction (``-name=edition``), which a KMP's new version needs
ZYPPER_INSTALL = "zypper --non-interactive install -y"


def _zypper_commands(packages: dict[str, Any], hold: bool, lock_timeout: int) -> Commands:
    states = host.get_fact(RpmPackageStates, packages=sorted(packages))
    locks = host.get_fact(ZypperLocks)
    held = set(locks)
    needed = _rpm_needed(states, packages)
    locked = sorted(name for name in needed if name in held)
    if locked:
        # A lock keeps the installed version: release it so the new pin can install.
        yield StringCommand("zypper", "--non-interactive", "removelock", *[QuoteString(name) for name in locked])
    if needed:
        yield "zypper --non-interactive refresh"
        pins = {name: packages[name] for name in needed if packages[name]}
        if pins:
            # zypper installs ``name=version`` only at a version it offers as written: a KMP's
            # carries the kernel's, so a pin becomes the offered edition it matches, read after the
            # refresh (none matches: the pin as written, refused by zypper in its words).
            offered = host.get_fact(PackageVersions, listing=zypper_listing(lock_timeout), packages=sorted(pins))
            pins = {
                name: next(
                    (version for version in offered.get(name, ()) if _rpm_version_matches(version, wanted)), wanted
                )
                for name, wanted in pins.items()
            }
        # zypper installs a package that provides multiversion(kernel) (SUSE's KMPs) beside its
        # installed version, whose files then conflict: that version goes in the same transaction
        side_by_side = host.get_fact(MultiversionPackages) if pins else {}
        replaced = [
            f"-{name}={edition}"
            for name in needed
            if name in pins
            for edition in side_by_side.get(name, ())
            if not _rpm_version_matches(edition, packages[name])
        ]
        words = [f"{name}={pins[name]}" if name in pins else name for name in needed]
        # --oldpackage: without it zypper keeps a newer installed version, says so and exits 0
        # (apt's --allow-downgrades; dnf's install downgrades to the version named)
        yield from recorded_install(
            RPM_INSTALLED,
            [
                StringCommand(
                    ZYPPER_INSTALL,
                    *(["--oldpackage"] if pins else []),
                    *(["--"] if replaced else []),
                    *[QuoteString(word) for word in replaced + words],
                )
            ],
        )
    else:
        host.noop("packages are installed: " + ", ".join(f"{n} {states[n]['version']}" for n in sorted(packages)))
    if hold:
        to_lock = sorted(name for name in packages if name in locked or name not in held)
        if to_lock:
            yield from recorded_holds(
                to_lock,
                held,
                StringCommand("zypper", "--non-interactive", "addlock", *[QuoteString(name) for name in to_lock]),
            )


# What releases each manager's holds on packages (PackageManager.released_holds): the holds read now,
# before a removal; a hold left on a package that is gone keeps an operator's own install of it back
# later (zypper refuses a locked package; dnf versionlock and IgnorePkg list it).


def apt_released_holds(names: list[str], lock_timeout: int) -> list[str | PyinfraCommand]:
    """``apt-mark unhold`` of those of ``names`` held now."""
    states = host.get_fact(DebPackageStates, packages=sorted(names))
    held = sorted(name for name in names if states.get(name, {}).get("held"))
    return [StringCommand("apt-mark", "unhold", *[QuoteString(name) for name in held])] if held else []


def dnf_released_holds(names: list[str], lock_timeout: int) -> list[str | PyinfraCommand]:
    """``dnf versionlock delete`` of those of ``names`` locked now, after the bounded wait."""
    names = sorted(names)
    states = host.get_fact(RpmPackageStates, packages=names)
    held = [name for name in names if states.get(name, {}).get("held")]
    commands = [StringCommand("dnf", "versionlock", "delete", *[QuoteString(name) for name in held])]
    return list(DNF_LOCK_WAIT.bounded(commands, lock_timeout)) if held else []


def zypper_released_holds(names: list[str], lock_timeout: int) -> list[str | PyinfraCommand]:
    """``zypper removelock`` of those of ``names`` locked now, with zypper's bounded wait."""
    names = sorted(names)
    locks = host.get_fact(ZypperLocks)
    locked = set(locks)
    held = [name for name in names if name in locked]
    commands = [StringCommand("zypper", "--non-interactive", "removelock", *[QuoteString(name) for name in held])]
    return list(ZYPPER_LOCK_WAIT.bounded(commands, lock_timeout)) if held else []


def pacman_released_holds(names: list[str], lock_timeout: int) -> list[str | PyinfraCommand]:
    """Those of ``names`` pacman.conf's IgnorePkg lines list now taken off them, after the bounded wait."""
    names = sorted(names)
    listed = host.get_fact(IgnoredPackages, list_command=PACMAN_HOLD_LIST)
    ignored = set(listed)
    held = [name for name in names if name in ignored]
    expressions = [PACMAN_UNHOLD_EXPRESSION.format(name=re.escape(name)) for name in held]
    arguments = [
        word
        for expression in expressions
        for word in ("-e", QuoteString(f"/^[[:space:]]*IgnorePkg[[:space:]]*=/{expression}"))
    ]
    commands = [
        StringCommand("sed", "-i", "-E", *arguments, "-e", QuoteString(PACMAN_EMPTY_HOLD_LINE), "/etc/pacman.conf")
    ]
    return list(PACMAN_LOCK_WAIT.bounded(commands, lock_timeout)) if held else []


# How each manager removes packages without taking any other with it (PackageManager.removal, the
# undo's): apt's removal is simulated first (apt-get would remove what depends on them), rpm and
# pacman refuse to break a dependency.


def apt_removal(names: list[str], lock_timeout: int) -> StringCommand:
    words = " ".join(shlex.quote(name) for name in names)
    allowed = " ".join(f"-e {shlex.quote(name)}" for name in names)
    return StringCommand(
        f"others=$(apt-get -s -o DPkg::Lock::Timeout={int(lock_timeout)} purge {words} 2>&1 "
        f"| awk '$1 == \"Purg\" || $1 == \"Remv\" {{ print $2 }}' | grep -vxF {allowed} | tr '\\n' ' ')\n"
        'if [ -n "$others" ]; then echo "gpu-node: the packages gpu-node installed were not removed: '
        'removing them would also remove ${others% }, which gpu-node did not install" >&2; exit 1; fi\n'
        f"DEBIAN_FRONTEND=noninteractive apt-get -y -o DPkg::Lock::Timeout={int(lock_timeout)} purge {words}"
    )


def rpm_removal(names: list[str], lock_timeout: int) -> StringCommand:
    return StringCommand(f"rpm -e {' '.join(shlex.quote(name) for name in names)}")


def pacman_removal(names: list[str], lock_timeout: int) -> StringCommand:
    return StringCommand(f"pacman -Rn --noconfirm {' '.join(shlex.quote(name) for name in names)}")


@operation()
def pacman_install(packages: dict[str, Any], hold: bool = False, *, lock_timeout: int) -> Commands:
    """Install the repository's version (pacman cannot pin) of the packages not installed yet; hold
    with IgnorePkg in pacman.conf, for the packages not listed there yet."""
    installed = host.get_fact(PacmanPackages)
    missing = [name for name in packages if name not in installed]
    if missing:
        # Arch supports no partial upgrade and its mirrors keep only the current files: an install
        # from old lists fails on 404s. pyinfra's update/upgrade would run on every call, no-op or not.
        yield from PACMAN_LOCK_WAIT.bounded(
            recorded_install(
                PACMAN_INSTALLED,
                [StringCommand("pacman", "--noconfirm", "-Syu", "--needed", *[QuoteString(name) for name in missing])],
            ),
            lock_timeout,
        )
    else:
        host.noop("packages are installed: " + ", ".join(sorted(packages)))
    if not hold:
        return
    listed = host.get_fact(IgnoredPackages, list_command=PACMAN_HOLD_LIST)
    held = set(listed)
    missing = [name for name in packages if name not in held]
    if not missing:
        host.noop("held: " + ", ".join(packages))
        return
    yield from recorded_holds(missing, held, pacman_hold_command(missing))
