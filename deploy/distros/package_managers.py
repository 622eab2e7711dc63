"""
How each package manager installs, pins, holds and finds packages (apt, dnf, zypper, pacman), and the
one way a stage installs through its family's (``install_packages``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from pyinfra.facts.deb import DebPackages
from pyinfra.facts.pacman import PacmanPackages
from pyinfra.facts.rpm import RpmPackages

from ..facts.packages import apt_listing, dnf_listing, zypper_listing
from ..operations import packages as package_ops


@dataclass(frozen=True)
class PackageManager:
    """How one package manager installs, pins, holds and finds packages."""

    name: str  # apt, dnf, zypper, pacman
    # The operation that installs {name: version or None} and holds them when asked; every one
    # takes (packages, hold, lock_timeout: the wait for a busy manager), see deploy/operations/packages.py.
    install: Callable[..., Any]
    # pyinfra's fact of every installed package ({name: {versions}})
    installed_fact: type
    # Shell that exits 0 when the package manager can install {package} (from its current lists).
    available_check: str
    # Refreshes the package lists before a choice made from them (apt); None: the manager does it.
    refresh_lists: Callable[[int], Iterator] | None = None
    # False: installs only the repository's current version (a rolling distro).
    can_pin: bool = True
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


APT = PackageManager(
    name="apt",
    version_listing=apt_listing,
    install=package_ops.apt_install,
    installed_fact=DebPackages,
    available_check="apt-cache show --no-all-versions {package} >/dev/null 2>&1",
    refresh_lists=package_ops.refresh_apt_lists,
    repository_file="/etc/apt/sources.list.d/{name}.list",
    signed_by_keyring=True,
)
DNF = PackageManager(
    name="dnf",
    version_listing=dnf_listing,
    install=package_ops.dnf_install,
    installed_fact=RpmPackages,
    available_check="dnf -q list {package} >/dev/null 2>&1",
    repository_file="/etc/yum.repos.d/{name}.repo",
    key_file="/etc/pki/rpm-gpg/gpu-node-{name}.asc",
    # skip_if_unavailable off: Fedora's and Amazon's dnf.conf skip a repository whose signature
    # fails, and makecache would then pass it
    repository_check=('tmp=$(mktemp -d) && cp {candidate} "$tmp/candidate.repo" && '
                      'dnf -y -q --setopt=reposdir="$tmp" --setopt=skip_if_unavailable=False makecache; status=$?; rm -rf "$tmp"; [ "$status" -eq 0 ]'),
    module_operation=package_ops.dnf_module_enable,
)
ZYPPER = PackageManager(
    name="zypper",
    version_listing=zypper_listing,
    install=package_ops.zypper_install,
    installed_fact=RpmPackages,
    available_check="zypper --quiet search --match-exact {package} >/dev/null 2>&1",
    repository_file="/etc/zypp/repos.d/{name}.repo",
    key_file="/etc/pki/rpm-gpg/gpu-node-{name}.asc",
    # zypper install skips a repository it refuses and goes on: a refresh of the candidate alone
    repository_check=('tmp=$(mktemp -d) && cp {candidate} "$tmp/candidate.repo" && zypper --non-interactive '
                      '--reposd-dir "$tmp" refresh; status=$?; rm -rf "$tmp"; [ "$status" -eq 0 ]'),
)
PACMAN = PackageManager(
    name="pacman",
    install=package_ops.pacman_install,
    installed_fact=PacmanPackages,
    available_check="pacman -Si {package} >/dev/null 2>&1",
    can_pin=False,
)


def install_packages(manager: PackageManager, name: str, packages, *, hold: bool = False, lock_timeout: int):
    """
    The one way a stage installs: ``packages`` is {name: version or None} (or names, unpinned);
    held when ``hold``. ``lock_timeout`` bounds the wait for another process holding the package
    manager's lock (settings.apt_lock_timeout).
    """
    wanted = dict(packages) if isinstance(packages, Mapping) else {package: None for package in packages}
    return manager.install(name=name, packages=wanted, hold=hold, lock_timeout=lock_timeout)


def repository_check(manager: PackageManager, lock_timeout: int) -> str | None:
    """``manager.repository_check`` (a template of {candidate}) waiting up to ``lock_timeout``
    seconds (settings.apt_lock_timeout) for another process holding the manager's lock, as its
    installs do (deploy/operations/packages.py)."""
    if manager.repository_check is None:
        return None
    # a wait that gives up fails the check, whose caller then removes the candidate
    return _after_lock_wait(manager, manager.repository_check, lock_timeout)


def version_listing(manager: PackageManager, lock_timeout: int) -> tuple[str, ...]:
    """The words PackageVersions and WaitedPackageVersions list ``manager``'s offered versions with,
    bounded by ``lock_timeout`` seconds (settings.apt_lock_timeout) where the manager has a bound;
    () where it lists none."""
    return manager.version_listing(lock_timeout) if manager.version_listing else ()


def lock_bounded_checks(manager: PackageManager, lock_timeout: int) -> PackageManager:
    """``manager`` whose ``available_check`` waits first, up to ``lock_timeout`` seconds, for another
    process holding dnf's lock, as its installs do: dnf itself waits for it without end (a wait that
    gives up fails the check). The other managers' checks as they are."""
    if manager.name != "dnf":
        return manager
    return replace(manager, available_check=_after_lock_wait(manager, manager.available_check, lock_timeout))


def _after_lock_wait(manager: PackageManager, template: str, lock_timeout: int) -> str:
    """``template`` (shell formatted later) in a subshell after the manager's bounded lock wait."""
    if manager.name == "zypper":
        wait = f"export ZYPP_LOCK_TIMEOUT={int(lock_timeout)};"
    else:
        wait = package_ops.lock_wait_script(manager.name, lock_timeout).replace("{", "{{").replace("}", "}}") + ";"
    return f"({wait} {template})"

