"""
The driver stage's plan, pure: from the settings, the family's table (deploy/distros/families.py), what the
node showed (NodeSurvey) and what preflight read ahead (``Readings``), the packages, versions,
repositories, holds and services of this host, or a ``DriverPlanError`` naming why none fits.
No host and no facts: deploy/tasks/driver.py reads, then applies the plan.

The plan is made in steps, each taking what the one before decided: the branch
(``plan_branch``), the kernel module type and its packages (``module_packages``), one driver
version for them (``driver_versions``), its companions at that version, Fabric Manager and IMEX
(``companion_packages``), and what only the install can choose, after its refresh
(``resolve_at_install``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.version import InvalidVersion, Version

from ..distros.families import DriverCompanion, DriverPackages, Platform, by_distro_id
from ..distros.package_managers import APT_REPOSITORY_FILE, PackageManager, lock_bounded_checks
from ..driver import module_type
from ..driver.fabric import fabric_of
from ..driver.versions import MIN_DRIVER_VERSION, VersionRefusal, apt_pin_text, choose, upstream_version
from ..settings import Settings
from .driver_companions import CompanionPlan, companion_names, companion_packages, companions_wanted, companions_what
from .driver_names import DriverPlanError, package_names, render, render_repository, repository_urls, template_values
from .module_signing import SigningPlan, signing_plan

# apt: the driver's source packages pinned at the plan's version (deploy/distros/families.py pin_sources)
APT_PIN_PATH = "/etc/apt/preferences.d/gpu-node-nvidia-driver"
CUDA_PROFILE_PATH = "/etc/profile.d/cuda.sh"
# NVIDIA's CUDA repository, where Fabric Manager and IMEX come from (apt: signed-by, as the toolkit's)
CUDA_REPOSITORY_NAME = "nvidia-cuda"
CUDA_APT_SOURCE = APT_REPOSITORY_FILE.format(name=CUDA_REPOSITORY_NAME)
CUDA_APT_KEYRING = "/usr/share/keyrings/nvidia-cuda-keyring.asc"
HEADER = "# Managed by gpu-node (deploy/tasks/driver.py)\n"


@dataclass(frozen=True)
class DriverPlan:
    manager: PackageManager
    branch: str | None
    # name -> exact version or None; installed and held
    packages: dict[str, str | None]
    extra_packages: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    codename: str = ""
    repository: dict[str, Any] | None = None
    module: tuple[str, str] | None = None
    cuda_packages: tuple[str, ...] = ()
    cuda_repository: dict[str, Any] | None = None
    cuda_home: str = ""
    notes: list[str] = field(default_factory=list)
    kernel_module_type: str = module_type.PROPRIETARY
    # the other kernel module type's packages, removed in the driver's install transaction
    remove: tuple[str, ...] = ()
    # apt preferences keeping the driver's dependencies at the pinned version (None: nothing pinned)
    apt_pin: str | None = None
    persistenced_package: str | None = None
    persistenced_with_driver: bool = False  # pinned and held with the driver (distros.DriverPackages)
    persistenced_service: str | None = None
    persistenced_start: bool = False
    # Fabric Manager and IMEX: their packages are in ``packages`` (pinned to the driver's version)
    fabric_packages: tuple[str, ...] = ()
    fabric_service: str | None = None
    imex_packages: tuple[str, ...] = ()
    fabric_repository: dict[str, Any] | None = (
        None  # NVIDIA's CUDA repository: name, url, key_url, pin (apt: signed-by source)
    )
    state_names: tuple[str, ...] = ()  # what the install operation reads (read ahead by preflight)
    # apt: versions to choose when the install runs (preflight's lists did not have them yet)
    resolve: dict[str, Any] | None = None
    unreadable: tuple[str, ...] = ()  # Readings.unreadable: preflight warns with them
    signing: SigningPlan | None = None  # how the modules get signed (None: they need not be)


@dataclass(frozen=True)
class Readings:
    """What the plan decides on beyond NodeSurvey, read ahead by preflight (deploy/tasks/driver.py)."""

    installed: dict[str, Any] | None = None  # the family's installed-packages fact (branch detection)
    recommended: list[str] | None = None  # the recommender's output (branch detection)
    states: dict[str, Any] = field(default_factory=dict)  # DebPackageStates of every package the plan may name
    offered: dict[str, Any] | None = None  # PackageVersions: {name: versions} from the lists (None: not read)
    fabric_offered: dict[str, Any] | None = None  # RepositoryPackageVersions of the CUDA repository not added yet
    gpu_lists: dict[str, Any] | None = None  # GpuSupportLists
    # dnf's and zypper's repositories they could not read, with the reason (WaitedPackageVersions)
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModulePackages:
    """The kernel module type's record of the family table and the packages it names."""

    decision: module_type.KernelModuleTypeDecision
    data: DriverPackages  # for this kernel module type
    names: tuple[str, ...]
    dependencies: tuple[str, ...]
    module: tuple[str, str] | None
    notes: list[str]
    remove: tuple[str, ...]  # the other type's packages this one does not name
    signing: SigningPlan | None = None

    @property
    def pinned(self) -> list[str]:
        return [*self.names, *(self.dependencies if self.data.pin_dependencies else ())]

    @property
    def what(self) -> str:
        return f"the {self.decision.kernel_module_type} kernel modules"


def check_minimum(settings: Settings) -> None:
    floor = Version(MIN_DRIVER_VERSION)
    if settings.nvidia_driver_branch and int(settings.nvidia_driver_branch) < floor.major:
        raise DriverPlanError(
            f"nvidia_driver_branch={settings.nvidia_driver_branch!r} is older than {MIN_DRIVER_VERSION}, "
            "the oldest driver the NVIDIA device plugin accepts"
        )
    if settings.nvidia_driver_version:
        try:
            too_old = Version(upstream_version(settings.nvidia_driver_version)) < floor
        except InvalidVersion:
            too_old = False
        if too_old:
            raise DriverPlanError(
                f"nvidia_driver_version={settings.nvidia_driver_version!r} is older than {MIN_DRIVER_VERSION}, "
                "the oldest driver the NVIDIA device plugin accepts"
            )
        branch = settings.nvidia_driver_branch
        if branch and not upstream_version(settings.nvidia_driver_version).startswith(branch + "."):
            raise DriverPlanError(
                f"nvidia_driver_version={settings.nvidia_driver_version!r} is not in "
                f"nvidia_driver_branch={branch!r}: set one of them, or both consistently"
            )


def detect_branch(pattern: str, names: Iterable[str]) -> str | None:
    branches = sorted({m.group(1) for name in names for m in [re.search(pattern, name)] if m}, reverse=True)
    return branches[0] if branches else None


def plan_branch(settings: Settings, platform: Platform, manager: PackageManager, readings: Readings) -> str | None:
    """The driver branch: the setting's, or (where the family needs one) the installed or recommended
    one; refused where the family cannot pin or has no branches."""
    base = platform.family.driver
    check_minimum(settings)
    version = settings.nvidia_driver_version
    if version and not manager.can_pin:
        raise DriverPlanError(
            f"nvidia_driver_version={version!r} cannot be pinned on {platform.distro_id}: its package "
            "manager installs only the repository's version; unset it (the driver is still held)"
        )
    branch = settings.nvidia_driver_branch
    if branch and base.branch == "unsupported":
        raise DriverPlanError(
            f"nvidia_driver_branch={branch!r} is not supported on {platform.distro_id}: it ships one "
            "driver branch; unset it" + (" or pin nvidia_driver_version" if manager.can_pin else "")
        )
    if base.branch == "required" and not branch:
        if base.branch_detect:
            branch = detect_branch(
                base.branch_detect, list(readings.installed or {}) + list(readings.recommended or [])
            )
        if not branch:
            found = (
                f"none is installed and `{base.recommend_command or 'the recommender'}` recommends none"
                if base.branch_detect
                else "gpu-node cannot detect one there"
            )
            raise DriverPlanError(
                f"nvidia_driver_branch is required on {platform.distro_id}: {found}; "
                "set it, e.g. nvidia_driver_branch=535"
            )
    return branch


def branch_number(
    settings: Settings, branch: str | None, names: Sequence[str], readings: Readings, node: dict[str, Any]
) -> int | None:
    """The driver branch the kernel module type goes by: set, pinned, installed, else the lists' candidate."""
    for version in (
        branch,
        settings.nvidia_driver_version,
        *(readings.states.get(name, {}).get("version") for name in names),
        node.get("built_version"),
        *((readings.offered or {}).get(name, [None])[0] for name in names),
    ):
        if version:
            head = upstream_version(str(version)).split(".")[0]
            if head.isdigit():
                return int(head)
    return None


def kernel_module_type_for(
    settings: Settings,
    platform: Platform,
    node: dict[str, Any],
    branch: str | None,
    names: Sequence[str],
    readings: Readings,
) -> module_type.KernelModuleTypeDecision:
    """The kernel module type of this node (deploy/driver/module_type.py), refused with one line when none fits."""
    number = branch_number(settings, branch, names, readings, node)
    installed = node.get("built_version")
    branch_list = module_type.branch_list_from(
        readings.gpu_lists or {}, branch, upstream_version(installed).split(".")[0] if installed else None
    )
    try:
        decision = module_type.decide_kernel_module_type(
            settings.nvidia_kernel_modules, node.get("gpus") or [], number, branch_list
        )
    except module_type.KernelModuleTypeRefusal as refusal:
        raise DriverPlanError(str(refusal)) from None
    data = platform.family.driver
    if decision.kernel_module_type == module_type.OPEN and data.open_modules is None:
        raise DriverPlanError(
            f"the open kernel modules are not packaged for {platform.distro_id} ({decision.why}): "
            "set nvidia_kernel_modules=proprietary where the GPUs allow it"
        )
    if decision.kernel_module_type == module_type.OPEN and branch and not data.open_with_branch:
        raise DriverPlanError(
            f"{platform.distro_id} packages no open kernel modules for nvidia_driver_branch={branch!r} "
            f"({decision.why}): unset nvidia_driver_branch (the default driver has them) or set "
            "nvidia_kernel_modules=proprietary"
        )
    return decision


def module_packages(
    settings: Settings,
    platform: Platform,
    node: dict[str, Any],
    branch: str | None,
    values: dict[str, Any],
    readings: Readings,
) -> ModulePackages:
    """The kernel module type of this node and the packages of its record; the other type's are removed."""
    base = platform.family.driver
    proprietary_names = package_names(base, values, platform, branch, node)
    decision = kernel_module_type_for(settings, platform, node, branch, proprietary_names[0], readings)
    unsigned = base.for_module_type(decision.kernel_module_type)
    signing = signing_plan(settings, platform, decision.kernel_module_type, node.get("secure_boot"))
    data = replace(unsigned, **signing.packages) if signing and signing.packages else unsigned
    names, dependencies, module, notes = package_names(data, values, platform, branch, node)
    other = base.for_module_type(
        module_type.PROPRIETARY if decision.kernel_module_type == module_type.OPEN else module_type.OPEN
    )
    # All of the other type's packages this one does not name: Ubuntu's -open headless package
    # depends on its module package, so a held one left behind would block the module's removal.
    # The same for the unsigned packages the signed ones replace (Ubuntu's DKMS, Arch's prebuilt).
    replaced = [other] + ([unsigned] if data is not unsigned else [])
    left = {
        name
        for record in replaced
        for part in package_names(record, values, platform, branch, node)[:2]
        for name in part
    }
    remove = tuple(sorted(left - set(names) - set(dependencies)))
    return ModulePackages(decision, data, names, dependencies, module, notes + list(decision.warnings), remove, signing)


def offered_together(readings: Readings) -> dict[str, Any]:
    """The versions the lists offer, the CUDA repository's not added yet among them."""
    return {**(readings.offered or {}), **(readings.fabric_offered or {})}


def driver_versions(
    settings: Settings,
    manager: PackageManager,
    chosen: ModulePackages,
    branch: str | None,
    values: dict[str, Any],
    readings: Readings,
    node: dict[str, Any],
    companions: tuple[DriverCompanion, ...],
) -> tuple[dict[str, str | None], list[str]]:
    """One version for every pinned package ({name: version or None}, dependencies unpinned), and
    the companions' names where their versions chose the driver's with them (apt lists known)."""
    version = settings.nvidia_driver_version
    pinned = chosen.pinned
    offered_all = offered_together(readings)
    together: list[str] = []
    if companions and manager.pins_exact_versions and not version:
        number = branch_number(settings, branch, pinned, readings, node)
        together = list(companion_names(companions, number, values)) if number else []
        if not all(offered_all.get(name) for name in together):
            together = []
    packages: dict[str, str | None] = {}
    try:
        if together:
            picked = choose(
                pinned + together,
                offered_all,
                readings.states,
                None,
                f"{chosen.what} and {companions_what(companions)}",
            )
            packages.update({name: picked[name] for name in pinned})
        else:
            packages.update(
                choose(pinned, readings.offered, readings.states, version, chosen.what)
                if manager.can_pin
                else {name: None for name in pinned}
            )
    except VersionRefusal as refusal:
        raise DriverPlanError(str(refusal)) from None
    packages.update({name: None for name in chosen.dependencies if name not in packages})
    return packages, together


def driver_version_known(
    settings: Settings, manager: PackageManager, pinned: list[str], packages: dict[str, Any], readings: Readings
) -> tuple[str | None, bool]:
    """The driver's version the companions are pinned at (chosen, installed, else the lists' newest),
    and whether the install operation chooses it instead (apt lists the run has yet to enable or
    refresh: ``defer``)."""
    version = next((v for v in (packages.get(name) for name in pinned) if v), None)
    version = version or next((readings.states[name]["version"] for name in pinned if name in readings.states), None)
    if version is None and readings.offered and all(readings.offered.get(name) for name in pinned):
        version = readings.offered[pinned[0]][0]
    defer = (
        version is None
        and manager.resolves_at_install
        and not settings.nvidia_driver_version
        and not any((readings.offered or {}).get(name) for name in pinned)
    )
    return version, defer


def resolve_at_install(
    settings: Settings,
    manager: PackageManager,
    chosen: ModulePackages,
    packages: dict[str, Any],
    together: list[str],
    companions: CompanionPlan,
    records: tuple[DriverCompanion, ...],
    values: dict[str, Any],
    readings: Readings,
) -> dict[str, Any] | None:
    """apt: what the install operation chooses after its refresh, where preflight's lists did not
    name every pinned package's versions (None: all chosen now)."""
    pinned = chosen.pinned
    unknown = [name for name in pinned + list(together or ()) if not offered_together(readings).get(name)]
    if (
        not manager.resolves_at_install
        or settings.nvidia_driver_version
        or not unknown
        or all(packages.get(name) for name in pinned)
    ):
        return None
    companion_pins = [name for name in companions.packages if name in packages and packages[name]]
    named = companions_what(records) if companion_pins or companions.deferred else ""
    return {
        "names": [*pinned, *companion_pins],
        "what": chosen.what + (f" and {named}" if named else ""),
        "pin_sources": list(render(chosen.data.pin_sources, values)),
        "pin_path": APT_PIN_PATH,
        "fabric": companions.deferred,
    }


def driver_plan(
    settings: Settings,
    platform: Platform,
    node: dict[str, Any],
    installed: dict[str, Any] | None = None,
    recommended: list[str] | None = None,
    readings: Readings | None = None,
) -> DriverPlan:
    """What the driver stage installs on this host: packages, pins, holds, repositories."""
    readings = readings or Readings(installed=installed, recommended=recommended)
    manager = lock_bounded_checks(platform.family.package_manager, settings.apt_lock_timeout)
    branch = plan_branch(settings, platform, manager, readings)
    values = template_values(platform, platform.family.driver, node.get("kernel") or "", branch)
    chosen = module_packages(settings, platform, node, branch, values, readings)
    data = chosen.data
    fabric = fabric_of(node)
    records = companions_wanted(settings, platform, data, fabric)
    packages, together = driver_versions(settings, manager, chosen, branch, values, readings, node, records)
    companions = CompanionPlan()
    if records:
        driver_version, defer = driver_version_known(settings, manager, chosen.pinned, packages, readings)
        companions = companion_packages(
            settings,
            platform,
            manager,
            chosen.pinned,
            (driver_version, defer),
            packages,
            values,
            offered_together(readings),
            unread_note(manager.name, readings.unreadable),
            fabric,
            records,
        )
    # the families whose driver's source packages apt pins name them (DriverPackages.pin_sources)
    apt_pin = apt_pin_text(
        render(data.pin_sources, values), {name: packages[name] for name in chosen.pinned if name in packages}
    )
    persistenced_package = None
    if settings.nvidia_persistenced and data.persistenced_package:
        persistenced_package = (render([data.persistenced_package], values) or (None,))[0]
    urls = repository_urls(settings)
    return DriverPlan(
        manager=manager,
        branch=branch,
        packages=packages,
        extra_packages=render(data.extra_packages, values),
        headers=render(data.headers, values),
        components=data.components,
        codename=platform.codename,
        repository=render_repository(by_distro_id(data.repositories, platform.distro_id), {**values, **urls}, settings),
        module=chosen.module,
        cuda_packages=data.cuda_packages if settings.cuda_toolkit_install else (),
        cuda_repository=render_repository(data.cuda_repository, {**values, **urls}, settings)
        if settings.cuda_toolkit_install
        else None,
        cuda_home=data.cuda_home,
        notes=chosen.notes,
        kernel_module_type=chosen.decision.kernel_module_type,
        remove=chosen.remove,
        apt_pin=apt_pin,
        persistenced_package=persistenced_package,
        persistenced_with_driver=data.persistenced_with_driver,
        persistenced_service=data.persistenced_service if settings.nvidia_persistenced else None,
        persistenced_start=bool(node.get("gpus")),
        fabric_packages=companions.fabric_packages,
        fabric_service=data.fabric_manager.service if data.fabric_manager in records else None,
        imex_packages=companions.imex_packages,
        fabric_repository=companions.repository,
        resolve=resolve_at_install(
            settings, manager, chosen, packages, together, companions, records, values, readings
        ),
        unreadable=readings.unreadable,
        signing=chosen.signing,
    )


def planned_branch(plan: DriverPlan, node: dict[str, Any]) -> tuple[int | None, str]:
    """The driver branch the node is left on, and what says so (deploy/driver/branches.py names one past
    its end of life): the plan's branch, the version it installs, else the node's built module."""
    if plan.branch:
        return int(plan.branch), f"the driver this run installs (nvidia_driver_branch {plan.branch})"
    for version, what in [
        *((version, "the driver this run installs") for version in plan.packages.values()),
        (node.get("built_version"), "the node's installed driver"),
    ]:
        head = upstream_version(str(version)).split(".")[0] if version else ""
        if head.isdigit():
            return int(head), f"{what} ({upstream_version(str(version))})"
    return None, ""


def unread_note(manager: str, unreadable: tuple[str, ...]) -> str:
    """ ", which {manager} could not read all of: ..." when it could not (Readings.unreadable)."""
    return f", which {manager} could not read all of: {'; '.join(unreadable)}" if unreadable else ""


def cuda_profile_text(cuda_home: str) -> str:
    bin_dir = f"{cuda_home}/bin"
    return (
        "# Managed by gpu-node (deploy/tasks/driver.py): the CUDA toolkit's tools on PATH.\n"
        f'case ":$PATH:" in\n  *":{bin_dir}:"*) ;;\n  *) export PATH="$PATH:{bin_dir}" ;;\nesac\n'
    )


def cuda_apt_source_text(repository: dict[str, Any]) -> str:
    # The key URL and its pin are part of the file so that changing either checks the key again.
    return (
        HEADER
        + f"# signing key: {repository['key_url']} ({', '.join(repository['pin'].fingerprints)})\n"
        + f"deb [signed-by={CUDA_APT_KEYRING}] {repository['url']}/ /\n"
    )
