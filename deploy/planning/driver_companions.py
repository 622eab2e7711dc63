"""
The driver's companions, pure: NVIDIA's packages that come from its CUDA repository at the driver's
exact version and are held with it (deploy/distros/families.py ``DriverCompanion``): Fabric Manager
(with NVLSM) on NVSwitch and NVLink5 nodes, IMEX on the hosts of an IMEX domain. The driver plan
(driver_plan.py) asks which a host needs and pins them once it knows the driver's version.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..distros.families import DriverCompanion, DriverPackages, FabricManagerPackages, ImexPackages, Platform
from ..distros.package_managers import PackageManager
from ..distros.repositories import key_pin
from ..driver.fabric import Fabric
from ..driver.versions import VersionRefusal, matching, upstream_version
from ..settings import Settings
from .driver_names import DriverPlanError, checked_key_url, render


@dataclass(frozen=True)
class CompanionPlan:
    """The driver's companions at its version and their repository."""

    fabric_packages: tuple[str, ...] = ()  # Fabric Manager's, and NVLSM's
    imex_packages: tuple[str, ...] = ()
    repository: dict[str, Any] | None = None  # NVIDIA's CUDA repository: name, url, key_url, pin
    # the companions whose packages the install operation names (apt lists unknown)
    deferred: tuple[DriverCompanion, ...] | None = None

    @property
    def packages(self) -> tuple[str, ...]:
        return self.fabric_packages + self.imex_packages


def companions_wanted(
    settings: Settings, platform: Platform, data: DriverPackages, fabric: Fabric
) -> tuple[DriverCompanion, ...]:
    """The companions this host's driver comes with, each refused where the family packages none: Fabric
    Manager on an NVSwitch node (fabric_manager_install), IMEX in an IMEX domain (imex_domain)."""
    records: list[DriverCompanion] = []
    if settings.fabric_manager_install and fabric.needs_fabric_manager:
        if data.fabric_manager is None:
            raise DriverPlanError(
                f"Fabric Manager is not packaged for {platform.distro_id} ({fabric.evidence}): "
                "set fabric_manager_install=false to go on without it"
            )
        records.append(data.fabric_manager)
    if settings.imex_domain:
        if data.imex is None:
            raise DriverPlanError(
                f"IMEX is not packaged for {platform.distro_id}: unset imex_domain "
                f"({settings.imex_domain!r}) for this host"
            )
        records.append(data.imex)
    return tuple(records)


def companion_names(records: Iterable[DriverCompanion], branch: int, values: dict[str, Any]) -> tuple[str, ...]:
    """The companions' package names for the driver ``branch``."""
    return tuple(name for record in records for name in render(record.names(branch), {**values, "branch": str(branch)}))


def companions_what(records: Iterable[DriverCompanion]) -> str:
    return " and ".join(record.what for record in records)


def companion_packages(
    settings: Settings,
    platform: Platform,
    manager: PackageManager,
    pinned: list[str],
    driver: tuple[str | None, bool],
    packages: dict[str, Any],
    values: dict[str, Any],
    offered: dict[str, Any],
    unread: str,
    fabric: Fabric,
    companions: tuple[DriverCompanion, ...],
) -> CompanionPlan:
    """The companions' packages at the driver's version (added to ``packages``) and NVIDIA's CUDA
    repository they come from; ``driver``: (the driver's version, whether the install operation chooses
    it after its refresh, the companions' names with it); ``offered``: the lists' versions and the CUDA
    repository's; ``unread``: what the package manager could not read, for the refusal."""
    driver_version, defer = driver
    if driver_version is None and not defer:
        raise DriverPlanError(
            f"{companions_what(companions)} must be pinned to the driver's version, and the {manager.name} lists "
            f"name no version of {', '.join(pinned)}{unread}: set nvidia_driver_version ({fabric.evidence})"
        )
    url = f"{settings.nvidia_cuda_repo_url.rstrip('/')}/{values['dist']}/{platform.cuda_arch}"
    pin = key_pin(settings, "nvidia_cuda")
    repository = {
        "name": f"cuda-{values['dist']}-{platform.cuda_arch}",
        "url": url,
        "key_url": checked_key_url(pin.url or f"{url}/{companions[0].key_file}", pin),
        "pin": pin,
    }
    named: dict[DriverCompanion, tuple[str, ...]] = {}
    if driver_version is not None and not defer:  # (None without defer is refused above)
        upstream = upstream_version(driver_version)
        branch = int(upstream.split(".")[0])
        for record in companions:
            if isinstance(record, ImexPackages) and branch < record.first_branch:
                raise DriverPlanError(
                    f"IMEX is packaged from driver branch {record.first_branch} on, and the driver "
                    f"is {upstream}: set nvidia_driver_branch to {record.first_branch} or newer"
                )
            named[record] = companion_names((record,), branch, values)
            try:
                if manager.pins_exact_versions:
                    packages.update(matching(named[record], offered, upstream, record.what))
                else:
                    # dnf and zypper take name-version without the release
                    packages.update({name: upstream for name in named[record]})
            except VersionRefusal as refusal:
                raise DriverPlanError(str(refusal)) from None
    fabric_data = next((record for record in companions if isinstance(record, FabricManagerPackages)), None)
    nvlsm = render(fabric_data.nvlsm_packages, values) if fabric_data and fabric.needs_nvlsm else ()
    packages.update({name: None for name in nvlsm})  # NVLSM has versions of its own
    fabric_names = tuple(
        name for record, names in named.items() if isinstance(record, FabricManagerPackages) for name in names
    )
    imex_names = tuple(name for record, names in named.items() if isinstance(record, ImexPackages) for name in names)
    return CompanionPlan(fabric_names + nvlsm, imex_names, repository, companions if defer else None)
