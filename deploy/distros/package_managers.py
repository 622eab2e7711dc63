"""
How each package manager installs, pins, holds and finds packages (apt, dnf, zypper, pacman), and the
one way a stage installs through its family's (``install_packages``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from pyinfra.facts.deb import DebPackages
from pyinfra.facts.pacman import PacmanPackages
from pyinfra.facts.rpm import RpmPackages

from ..facts.packages import apt_listing, dnf_listing, zypper_listing
from ..operations import packages as package_ops
from ..operations.package_manager import DNF_LOCK_WAIT, PACMAN_LOCK_WAIT, ZYPPER_LOCK_WAIT, PackageManager

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

__all__ = [
    "APT",
    "APT_REPOSITORY_FILE",
    "DNF",
    "PACKAGE_MANAGERS",
    "PACMAN",
    "ZYPPER",
    "PackageManager",
    "install_packages",
    "lock_bounded_checks",
    "repository_check",
    "version_listing",
]

# Where apt's third-party sources go, {name} theirs (the toolkit's and NVIDIA's CUDA repository's are named)
APT_REPOSITORY_FILE = "/etc/apt/sources.list.d/{name}.list"
# The rows: what each capability means is said where the record is declared
# (deploy/operations/package_manager.py, PackageManager), beside the operations that read it.
APT = PackageManager(
    name="apt",
    version_listing=apt_listing,
    install=package_ops.apt_install,
    installed_fact=DebPackages,
    available_check="apt-cache show --no-all-versions {package} >/dev/null 2>&1",
    installed_listing=package_ops.DPKG_INSTALLED,
    released_holds=package_ops.apt_released_holds,
    removal=package_ops.apt_removal,
    refresh_lists=package_ops.refresh_apt_lists,
    pins_exact_versions=True,
    resolves_at_install=True,
    states_read=package_ops.deb_states_read,
    repository_file=APT_REPOSITORY_FILE,
    signed_by_keyring=True,
)
DNF = PackageManager(
    name="dnf",
    version_listing=dnf_listing,
    install=package_ops.dnf_install,
    installed_fact=RpmPackages,
    available_check="dnf -q list {package} >/dev/null 2>&1",
    installed_listing=package_ops.RPM_INSTALLED,
    released_holds=package_ops.dnf_released_holds,
    removal=package_ops.rpm_removal,
    lock=DNF_LOCK_WAIT,
    forced_removal=("rpm", "-e", "--nodeps"),
    repository_file="/etc/yum.repos.d/{name}.repo",
    key_file="/etc/pki/rpm-gpg/gpu-node-{name}.asc",
    # skip_if_unavailable off: Fedora's and Amazon's dnf.conf skip a repository whose signature
    # fails, and makecache would then pass it
    repository_check=(
        'tmp=$(mktemp -d) && cp {candidate} "$tmp/candidate.repo" && '
        'dnf -y -q --setopt=reposdir="$tmp" --setopt=skip_if_unavailable=False makecache; status=$?; rm -rf "$tmp"; [ "$status" -eq 0 ]'
    ),
    module_operation=package_ops.dnf_module_enable,
)
ZYPPER = PackageManager(
    name="zypper",
    version_listing=zypper_listing,
    install=package_ops.zypper_install,
    installed_fact=RpmPackages,
    available_check="zypper --quiet search --match-exact {package} >/dev/null 2>&1",
    installed_listing=package_ops.RPM_INSTALLED,
    released_holds=package_ops.zypper_released_holds,
    removal=package_ops.rpm_removal,
    lock=ZYPPER_LOCK_WAIT,
    forced_removal=("rpm", "-e", "--nodeps"),
    repository_file="/etc/zypp/repos.d/{name}.repo",
    key_file="/etc/pki/rpm-gpg/gpu-node-{name}.asc",
    # zypper install skips a repository it refuses and goes on: a refresh of the candidate alone
    repository_check=(
        'tmp=$(mktemp -d) && cp {candidate} "$tmp/candidate.repo" && zypper --non-interactive '
        '--reposd-dir "$tmp" refresh; status=$?; rm -rf "$tmp"; [ "$status" -eq 0 ]'
    ),
)
PACMAN = PackageManager(
    name="pacman",
    install=package_ops.pacman_install,
    installed_fact=PacmanPackages,
    available_check="pacman -Si {package} >/dev/null 2>&1",
    installed_listing=package_ops.PACMAN_INSTALLED,
    released_holds=package_ops.pacman_released_holds,
    removal=package_ops.pacman_removal,
    lock=PACMAN_LOCK_WAIT,
    forced_removal=("pacman", "-Rdd", "--noconfirm"),
    can_pin=False,
)
PACKAGE_MANAGERS: tuple[PackageManager, ...] = (APT, DNF, ZYPPER, PACMAN)


def install_packages(
    manager: PackageManager,
    name: str,
    packages: Mapping[str, str | None] | Iterable[str],
    *,
    hold: bool = False,
    lock_timeout: int,
) -> OperationMeta:
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
    return manager.lock.before(manager.repository_check, lock_timeout)


def version_listing(manager: PackageManager, lock_timeout: int) -> tuple[str, ...]:
    """The words PackageVersions and WaitedPackageVersions list ``manager``'s offered versions with,
    bounded by ``lock_timeout`` seconds (settings.apt_lock_timeout) where the manager has a bound;
    () where it lists none."""
    return manager.version_listing(lock_timeout) if manager.version_listing else ()


def lock_bounded_checks(manager: PackageManager, lock_timeout: int) -> PackageManager:
    """``manager`` whose ``available_check`` waits first, up to ``lock_timeout`` seconds, for another
    process holding its lock where the manager itself would wait without end (dnf; a wait that
    gives up fails the check). The other managers' checks as they are."""
    if not manager.lock.waits_unbounded:
        return manager
    return replace(manager, available_check=manager.lock.before(manager.available_check, lock_timeout))
