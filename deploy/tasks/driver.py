"""
Stage 3: the NVIDIA driver from the distro's or NVIDIA's packages, pinned and held.

``driver_plan`` turns the family's data (deploy/distros.py) and what preflight saw into the
packages, repositories and holds of this host; ``nvidia_driver`` applies it with pyinfra's
package operations. The nouveau / nova blacklist lives in the kernel stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from packaging.version import InvalidVersion, Version
from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import server

from .. import gpus
from ..distros import (APT, PackageManager, Platform, add_repository, by_distro_id, install_packages,
                            lock_bounded_checks, node_word)
from ..driver_versions import VersionRefusal, choose, matching, upstream_version
from ..fabric import fabric_of
from ..facts.combined import FactCall, known_fact, read, read_together
from ..facts.gpu_support import GpuSupportLists
from ..facts.nvidia import PackagesAvailable, RecommendedDriver
from ..facts.packages import DnfModuleStreams, PackageVersions, RepositoryPackageVersions, WaitedPackageVersions
from ..operations import download
from ..operations import drain as drain_ops
from ..operations import driver as driver_ops
from ..operations import files, units
from ..operations.drain import DrainTarget
from ..operations.failure import HostRefusal
from ..operations.files import put_text
from ..operations.packages import deb_states_read, lock_wait_script
from ..settings import MIN_DRIVER_VERSION, KeyPin, Settings, key_url_allowed
from .preflight import StageCheck
from . import kernel_modules

CUDA_PROFILE_PATH = "/etc/profile.d/cuda.sh"
REBOOT_DELAY = 10  # seconds before reconnecting
# apt: the driver's source packages pinned at the plan's version (deploy/distros.py pin_sources)
APT_PIN_PATH = "/etc/apt/preferences.d/gpu-node-nvidia-driver"
# NVIDIA's CUDA repository, where Fabric Manager comes from (apt: signed-by, as the toolkit's)
CUDA_REPOSITORY_NAME = "nvidia-cuda"
CUDA_APT_SOURCE = APT.repository_file.format(name=CUDA_REPOSITORY_NAME)
CUDA_APT_KEYRING = "/usr/share/keyrings/nvidia-cuda-keyring.asc"
HEADER = "# Managed by gpu-node (deploy/tasks/driver.py)\n"
# The units the stage enables, read ahead by preflight (the family's names on Debian and Ubuntu)
SERVICE_UNITS = ("nvidia-fabricmanager.service", "nvidia-persistenced.service")


class DriverPlanError(HostRefusal):
    """The driver settings do not fit this host: raised before any change."""


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
    repository: dict | None = None
    module: tuple[str, str] | None = None
    cuda_packages: tuple[str, ...] = ()
    cuda_repository: dict | None = None
    cuda_home: str = ""
    notes: list[str] = field(default_factory=list)
    flavour: str = gpus.PROPRIETARY
    # the other flavour's module packages, removed in the driver's install transaction
    remove: tuple[str, ...] = ()
    # apt preferences keeping the driver's dependencies at the pinned version (None: nothing pinned)
    apt_pin: str | None = None
    persistenced_package: str | None = None
    persistenced_with_driver: bool = False  # pinned and held with the driver (distros.DriverPackages)
    persistenced_service: str | None = None
    persistenced_start: bool = False
    # Fabric Manager: its packages are in ``packages`` (pinned to the driver's version)
    fabric_packages: tuple[str, ...] = ()
    fabric_service: str | None = None
    fabric_repository: dict | None = None  # name, url, key_url, pin (apt: signed-by source)
    state_names: tuple[str, ...] = ()  # what the install operation reads (read ahead by preflight)
    # apt: versions to choose when the install runs (preflight's lists did not have them yet)
    resolve: dict | None = None
    unreadable: tuple[str, ...] = ()  # Readings.unreadable: preflight warns with them


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


def detect_branch(pattern: str, names) -> str | None:
    branches = sorted({m.group(1) for name in names for m in [re.search(pattern, name)] if m}, reverse=True)
    return branches[0] if branches else None


def _render(templates, values: dict) -> tuple[str, ...]:
    """Render templates; those naming a value that is not set ({branch} without a branch) drop out."""
    rendered = []
    for template in templates or ():
        try:
            rendered.append(template.format(**values))
        except KeyError:
            continue
    return tuple(dict.fromkeys(rendered))


def _render_repository(repository, values: dict, settings: Settings) -> dict | None:
    """A family table's repository for this host: its key's URL (a setting's, else the table's) and the
    pin that key must match (settings.KeyPin); a key that cannot be checked before use is refused."""
    if not repository:
        return None
    baseurl = repository["baseurl"].format(**values)
    pin = settings.key_pin(repository["key"])
    key_url = pin.url or repository["gpgkey"].format(**values, baseurl=baseurl)
    return {"name": repository["name"].format(**values), "baseurl": baseurl, "gpgkey": checked_key_url(key_url, pin),
            "pin": pin}


def checked_key_url(key_url: str, pin: KeyPin) -> str:
    """``key_url``, unless its key cannot be checked before use (deploy/operations/download.py
    ``key_refusal``): refused before any change, naming the setting that fixes it."""
    refusal = download.key_refusal(key_url, pin.fingerprints, pin.setting)
    if refusal and not key_url_allowed(key_url):
        refusal += f"; set {pin.setting.replace('_fingerprint', '_url')} to one"
    if refusal:
        raise DriverPlanError(refusal)
    return key_url


@dataclass(frozen=True)
class Readings:
    """What the plan decides on beyond HostState, read ahead by preflight (``readings_calls``)."""

    installed: dict | None = None     # the family's installed-packages fact (branch detection)
    recommended: list | None = None   # the recommender's output (branch detection)
    states: dict = field(default_factory=dict)       # DebPackageStates of every package the plan may name
    offered: dict | None = None       # PackageVersions: {name: versions} from the lists (None: not read)
    fabric_offered: dict | None = None  # RepositoryPackageVersions of the CUDA repository not added yet
    gpu_lists: dict | None = None     # GpuSupportLists
    # dnf's and zypper's repositories they could not read, with the reason (WaitedPackageVersions)
    unreadable: tuple[str, ...] = ()


def repository_urls(settings: Settings) -> dict[str, str]:
    """{cuda_repo_url} and {driver_repo_url} of the family table's repositories: NVIDIA's, or a mirror."""
    return {"cuda_repo_url": settings.nvidia_cuda_repo_url.rstrip("/"),
            "driver_repo_url": settings.nvidia_driver_repo_url.rstrip("/")}


def _values(platform: Platform, data, kernel: str, branch: str | None) -> dict:
    values = {
        "kernel": node_word(kernel, "the running kernel's release"),
        "deb_arch": platform.deb_arch,
        "arch": platform.cuda_arch,
        "distro_id": platform.distro_id,
        "version_id": platform.version_id,
        "version_nodot": platform.version_id.replace(".", ""),
        "major": platform.major if platform.major is not None else platform.version_id.split(".")[0],
        "minor": (platform.version_id.split(".") + ["0"])[1],
    }
    values["dist"] = (by_distro_id(data.repo_dist, platform.distro_id) or "").format(**values)
    values["flavour"] = driver_ops.kernel_flavour(kernel, data.flavour_pattern, data.default_flavour.format(**values))
    if branch:
        values["branch"] = branch
    return values


def _names(data, values: dict, platform: Platform, branch: str | None, node: dict):
    """(driver package names, module package names, dnf module stream, notes) of one flavour's record."""
    if data.module and platform.major in data.module_majors:
        module_name, stream, default_stream = data.module
        module = (module_name, stream.format(branch=branch) if branch else default_stream)
        return _render(data.module_packages, values), (), module, []
    use_branch = bool(branch)
    names = _render(data.branch_packages if use_branch and data.branch_packages is not None else data.packages, values)
    dependencies = _render(
        data.branch_dependencies if use_branch and data.branch_dependencies is not None else data.dependencies, values)
    notes = []
    if data.kernel_modules is not None:
        # Arch: a prebuilt module package per stock kernel, DKMS as soon as any other is installed.
        kernels = node.get("kernel_pkgbases") or []
        modules = data.kernel_modules
        if kernels and all(name in modules for name in kernels):
            dependencies = tuple(modules[name] for name in kernels)
        else:
            dependencies = (data.dkms_package,) + tuple(
                data.dkms_headers.format(pkgbase=node_word(name, "a kernel's pkgbase")) for name in (kernels or ["linux"]))
            if not kernels:
                notes.append("no /usr/lib/modules/*/pkgbase found: assuming the linux kernel, with DKMS")
    return names, dependencies, None, notes


def _branch_number(settings: Settings, branch: str | None, names, readings: Readings, node: dict) -> int | None:
    """The driver branch the flavour decision goes by: set, pinned, installed, else the lists' candidate."""
    for version in (branch, settings.nvidia_driver_version,
                    *(readings.states.get(name, {}).get("version") for name in names),
                    node.get("built_version"),
                    *((readings.offered or {}).get(name, [None])[0] for name in names)):
        if version:
            head = upstream_version(str(version)).split(".")[0]
            if head.isdigit():
                return int(head)
    return None


def flavour_for(settings: Settings, platform: Platform, node: dict, branch: str | None, names,
                readings: Readings) -> gpus.FlavourDecision:
    """The kernel module flavour of this node (deploy/gpus.py), refused with one line when none fits."""
    number = _branch_number(settings, branch, names, readings, node)
    installed = node.get("built_version")
    branch_list = gpus.branch_list_from(readings.gpu_lists or {}, branch,
                                        upstream_version(installed).split(".")[0] if installed else None)
    try:
        decision = gpus.decide_flavour(settings.nvidia_kernel_modules, node.get("gpus") or [], number, branch_list)
    except gpus.FlavourRefusal as refusal:
        raise DriverPlanError(str(refusal)) from None
    data = platform.family.driver
    if decision.flavour == gpus.OPEN and data.open_modules is None:
        raise DriverPlanError(f"the open kernel modules are not packaged for {platform.distro_id} ({decision.why}): "
                              "set nvidia_kernel_modules=proprietary where the GPUs allow it")
    if decision.flavour == gpus.OPEN and branch and not data.open_with_branch:
        raise DriverPlanError(
            f"{platform.distro_id} packages no open kernel modules for nvidia_driver_branch={branch!r} "
            f"({decision.why}): unset nvidia_driver_branch (the default driver has them) or set "
            "nvidia_kernel_modules=proprietary")
    return decision


def driver_plan(
    settings: Settings,
    platform: Platform,
    node: dict,
    installed: dict | None = None,
    recommended: list | None = None,
    readings: Readings | None = None,
) -> DriverPlan:
    """What the driver stage installs on this host: packages, pins, holds, repositories."""
    readings = readings or Readings(installed=installed, recommended=recommended)
    base = platform.family.driver
    manager = lock_bounded_checks(platform.family.package_manager, settings.apt_lock_timeout)
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
        branch = detect_branch(base.branch_detect,
                               list(readings.installed or {}) + list(readings.recommended or []))
        if not branch:
            raise DriverPlanError(
                f"nvidia_driver_branch is required on {platform.distro_id}: none is installed and "
                f"`{base.recommend_command or 'the recommender'}` recommends none; "
                "set it, e.g. nvidia_driver_branch=535"
            )

    kernel = node.get("kernel") or ""
    values = _values(platform, base, kernel, branch)
    proprietary_names = _names(base, values, platform, branch, node)
    decision = flavour_for(settings, platform, node, branch, proprietary_names[0], readings)
    data = base.flavoured(decision.flavour)
    names, dependencies, module, notes = _names(data, values, platform, branch, node)
    other = base.flavoured(gpus.PROPRIETARY if decision.flavour == gpus.OPEN else gpus.OPEN)
    # All of the other flavour's packages this one does not name: Ubuntu's -open headless package
    # depends on its module package, so a held one left behind would block the module's removal.
    other_names, other_dependencies, _, _ = _names(other, values, platform, branch, node)
    remove = tuple(sorted((set(other_names) | set(other_dependencies)) - set(names) - set(dependencies)))
    notes = notes + list(decision.warnings)

    packages: dict[str, str | None] = {}
    pinned = [*names, *(dependencies if data.pin_dependencies else ())]
    what = f"the {decision.flavour} kernel modules"
    fabric = fabric_of(node)
    fabric_data = data.fabric_manager
    wants_fabric = settings.fabric_manager_install and fabric.needs_fabric_manager
    # Fabric Manager's versioned packages choose the driver's version with it (apt lists known)
    offered_all = {**(readings.offered or {}), **(readings.fabric_offered or {})}
    together: list[str] = []
    if wants_fabric and fabric_data is not None and manager.name == "apt" and not version:
        number = _branch_number(settings, branch, pinned, readings, node)
        together = list(_render(fabric_data.names(number), {**values, "branch": str(number)})) if number else []
        if not all(offered_all.get(name) for name in together):
            together = []
    try:
        if together:
            chosen = choose(pinned + together, offered_all, readings.states, None, what + " and Fabric Manager")
            packages.update({name: chosen[name] for name in pinned})
        else:
            packages.update(choose(pinned, readings.offered, readings.states, version, what) if manager.can_pin
                            else {name: None for name in pinned})
    except VersionRefusal as refusal:
        raise DriverPlanError(str(refusal)) from None
    packages.update({name: None for name in dependencies if name not in packages})

    fabric_packages: tuple[str, ...] = ()
    fabric_repository = None
    deferred_fabric = None  # Fabric Manager's packages, named by the install operation (apt lists unknown)
    if wants_fabric:
        if fabric_data is None:
            raise DriverPlanError(f"Fabric Manager is not packaged for {platform.distro_id} ({fabric.evidence}): "
                                  "set fabric_manager_install=false to go on without it")
        driver_version = next((v for v in (packages.get(name) for name in pinned) if v), None)
        driver_version = driver_version or next(
            (readings.states[name]["version"] for name in pinned if name in readings.states), None)
        if driver_version is None and readings.offered and all(readings.offered.get(name) for name in pinned):
            driver_version = readings.offered[pinned[0]][0]
        # apt lists the run has yet to enable (contrib, non-free) or refresh: the install operation
        # chooses the driver's version and Fabric Manager's names with it, after the refresh
        defer = driver_version is None and manager.name == "apt" and not version \
            and not any((readings.offered or {}).get(name) for name in pinned)
        if driver_version is None and not defer:
            raise DriverPlanError(
                f"Fabric Manager must be pinned to the driver's version, and the {manager.name} lists name no "
                f"version of {', '.join(pinned)}{unread_note(manager.name, readings.unreadable)}: "
                f"set nvidia_driver_version ({fabric.evidence})")
        url = f"{settings.nvidia_cuda_repo_url.rstrip('/')}/{values['dist']}/{platform.cuda_arch}"
        pin = settings.key_pin("nvidia_cuda")
        fabric_repository = {"name": f"cuda-{values['dist']}-{platform.cuda_arch}", "url": url,
                             "key_url": checked_key_url(pin.url or f"{url}/{fabric_data.key_file}", pin), "pin": pin}
        if defer:
            deferred_fabric = fabric_data
        else:
            upstream = upstream_version(driver_version)
            fabric_values = {**values, "branch": upstream.split(".")[0]}
            fabric_packages = _render(fabric_data.names(int(upstream.split(".")[0])), fabric_values)
            offered = {**(readings.offered or {}), **(readings.fabric_offered or {})}
            try:
                if manager is APT or manager.name == "apt":
                    packages.update(matching(fabric_packages, offered, upstream, "Fabric Manager"))
                else:
                    # dnf and zypper take name-version without the release
                    packages.update({name: upstream for name in fabric_packages})
            except VersionRefusal as refusal:
                raise DriverPlanError(str(refusal)) from None
        nvlsm = _render(fabric_data.nvlsm_packages, values) if fabric.needs_nvlsm else ()
        packages.update({name: None for name in nvlsm})  # NVLSM has versions of its own
        fabric_packages += nvlsm

    resolve = None
    unknown = [name for name in pinned + list(together or ()) if not offered_all.get(name)]
    if manager.name == "apt" and not version and unknown and not all(packages.get(name) for name in pinned):
        fabric_names = [name for name in fabric_packages if name in packages and packages[name]] if wants_fabric else []
        resolve = {"names": [*pinned, *fabric_names],
                   "what": what + (" and Fabric Manager" if fabric_names or deferred_fabric else ""),
                   "pin_sources": list(_render(data.pin_sources, values)), "pin_path": APT_PIN_PATH,
                   "fabric": deferred_fabric}
    apt_pin = None
    if manager.name == "apt":
        apt_pin = driver_ops.apt_pin_text(_render(data.pin_sources, values),
                                {name: packages[name] for name in pinned if name in packages})

    persistenced_package = None
    if settings.nvidia_persistenced:
        persistenced_package = (_render([data.persistenced_package], values) or (None,))[0] \
            if data.persistenced_package else None

    urls = repository_urls(settings)
    return DriverPlan(
        manager=manager,
        branch=branch,
        packages=packages,
        extra_packages=_render(data.extra_packages, values),
        headers=_render(data.headers, values),
        components=data.components,
        codename=platform.codename,
        repository=_render_repository(by_distro_id(data.repositories, platform.distro_id), {**values, **urls}, settings),
        module=module,
        cuda_packages=data.cuda_packages if settings.cuda_toolkit_install else (),
        cuda_repository=_render_repository(data.cuda_repository, {**values, **urls}, settings)
        if settings.cuda_toolkit_install else None,
        cuda_home=data.cuda_home,
        notes=notes,
        flavour=decision.flavour,
        remove=remove,
        apt_pin=apt_pin,
        persistenced_package=persistenced_package,
        persistenced_with_driver=data.persistenced_with_driver,
        persistenced_service=data.persistenced_service if settings.nvidia_persistenced else None,
        persistenced_start=bool(node.get("gpus")),
        fabric_packages=fabric_packages,
        fabric_service=fabric_data.service if wants_fabric and fabric_data else None,
        fabric_repository=fabric_repository,
        resolve=resolve,
        unreadable=readings.unreadable,
    )


def unread_note(manager: str, unreadable: tuple[str, ...]) -> str:
    """", which {manager} could not read all of: ..." when it could not (Readings.unreadable)."""
    return f", which {manager} could not read all of: {'; '.join(unreadable)}" if unreadable else ""


def cuda_profile_text(cuda_home: str) -> str:
    bin_dir = f"{cuda_home}/bin"
    return (
        "# Managed by gpu-node (deploy/tasks/driver.py): the CUDA toolkit's tools on PATH.\n"
        f'case ":$PATH:" in\n  *":{bin_dir}:"*) ;;\n  *) export PATH="$PATH:{bin_dir}" ;;\nesac\n'
    )


def cuda_apt_source_text(repository: dict) -> str:
    # The key URL and its pin are part of the file so that changing either checks the key again.
    return (HEADER + f"# signing key: {repository['key_url']} ({', '.join(repository['pin'].fingerprints)})\n"
            + f"deb [signed-by={CUDA_APT_KEYRING}] {repository['url']}/ /\n")


def _candidate_names(settings: Settings, platform: Platform, node: dict, branch: str | None) -> dict[str, list[str]]:
    """Every package name either flavour's plan may name, for reading their state and versions ahead."""
    base = platform.family.driver
    values = _values(platform, base, node.get("kernel") or "", branch)
    names: list[str] = []
    for flavour in (gpus.PROPRIETARY, gpus.OPEN):
        data = base.flavoured(flavour)
        driver, dependencies, module, _ = _names(data, values, platform, branch, node)
        names += [*driver, *dependencies]
    fabric = []
    if settings.fabric_manager_install and fabric_of(node).needs_fabric_manager and base.fabric_manager:
        data = base.fabric_manager
        if branch:
            fabric += _render(data.names(int(branch)), {**values, "branch": branch})
            fabric += list(data.nvlsm_packages)
    return {"driver": list(dict.fromkeys(names)), "fabric": list(dict.fromkeys(fabric))}


def readings_calls(settings: Settings, platform: Platform, node: dict, branch: str | None,
                   plan_names: dict[str, list[str]], fabric_url: str | None) -> list[FactCall]:
    manager = platform.family.package_manager
    calls: list[FactCall] = [(GpuSupportLists, {})]
    everything = plan_names["driver"] + plan_names["fabric"]
    if manager.name in ("dnf", "zypper"):
        # dnf waits for a busy dnf's lock without end, zypper not at all: the read waits, bounded, first
        calls.append((WaitedPackageVersions, {"manager": manager.name, "packages": everything,
                                              "wait": lock_wait_script(manager.name, settings.apt_lock_timeout),
                                              "lock_timeout": settings.apt_lock_timeout}))
    elif manager.can_pin:
        calls.append((PackageVersions, {"manager": manager.name, "packages": everything}))
    if fabric_url and plan_names["fabric"]:
        calls.append((RepositoryPackageVersions, {"url": fabric_url, "packages": plan_names["fabric"],
                                                  "timeout": settings.download_timeout}))
    return calls


def plan_for_host(settings: Settings, platform: Platform, node: dict) -> tuple[DriverPlan, list]:
    """The plan of the current host, reading what it decides on in one remote command (read-only);
    also returns the calls its operations make, read in the same command."""
    data = platform.family.driver
    manager = platform.family.package_manager
    installed = recommended = None
    if data.branch == "required" and not settings.nvidia_driver_branch:
        installed = host.get_fact(manager.installed_fact)
        if data.recommend_command:
            recommended = host.get_fact(RecommendedDriver, recommend_command=data.recommend_command)
        branch = detect_branch(data.branch_detect, list(installed or {}) + list(recommended or []))
    else:
        branch = settings.nvidia_driver_branch
    names = _candidate_names(settings, platform, node, branch)
    fabric_url = None
    wants_fabric = settings.fabric_manager_install and fabric_of(node).needs_fabric_manager and data.fabric_manager
    if wants_fabric and manager.name == "apt":
        values = _values(platform, data, node.get("kernel") or "", branch)
        fabric_url = f"{settings.nvidia_cuda_repo_url.rstrip('/')}/{values['dist']}/{platform.cuda_arch}"
    calls = readings_calls(settings, platform, node, branch, names, fabric_url)
    ahead = operation_reads(settings, platform, node, names)
    ahead.append(kernel_modules.KERNELS_READ)
    fabric_source = download.source_read(CUDA_APT_SOURCE, CUDA_APT_KEYRING)
    if fabric_url:
        ahead.append(fabric_source)
    values = read_together(host, calls + ahead)[: len(calls)]
    found = dict(zip((fact.__name__ for fact, _ in calls), values))
    waited = found.pop(WaitedPackageVersions.__name__, None)
    unreadable: tuple[str, ...] = ()
    if waited is not None:
        if waited["busy"]:
            raise HostRefusal(waited["busy"])  # the wait's line: the manager's lock and its holder
        found[PackageVersions.__name__] = waited["versions"]
        unreadable = tuple(waited["unreadable"])
    states = read(host, deb_states_read(names["driver"] + names["fabric"])) if manager.name == "apt" else {}
    if fabric_url and not names["fabric"] and data.fabric_manager:
        # Fabric Manager's names carry the branch, known now from the driver's versions: one more read,
        # on NVSwitch nodes only
        number = _branch_number(settings, None, names["driver"], Readings(states=states, offered=found.get("PackageVersions")), node)
        if number:
            values_now = _values(platform, data, node.get("kernel") or "", str(number))
            names["fabric"] = [*_render(data.fabric_manager.names(number), values_now), *data.fabric_manager.nvlsm_packages]
            more = readings_calls(settings, platform, node, str(number), {"driver": [], "fabric": names["fabric"]}, fabric_url)[1:]
            driver_offered = found.get("PackageVersions") or {}
            found.update(zip((fact.__name__ for fact, _ in more), read_together(host, more)))
            found["PackageVersions"] = {**driver_offered, **(found.get("PackageVersions") or {})}
    fabric_offered = found.get("RepositoryPackageVersions")
    if fabric_url and read(host, fabric_source).get(CUDA_APT_SOURCE) is not None:
        fabric_offered = None  # the repository is added: its versions are in the lists
    readings = Readings(installed=installed, recommended=recommended, states=states,
                        offered=found.get("PackageVersions"), fabric_offered=fabric_offered,
                        gpu_lists=found.get("GpuSupportLists"), unreadable=unreadable)
    plan = driver_plan(settings, platform, node, readings=readings)
    return replace(plan, state_names=tuple(names["driver"] + names["fabric"])), ahead


def operation_reads(settings: Settings, platform: Platform, node: dict, names: dict[str, list[str]]) -> list[FactCall]:
    """What the stage's operations read, read ahead in the plan's one command (Debian family: all of
    it, so that a run that changes nothing reads nothing more)."""
    data = platform.family.driver
    manager = lock_bounded_checks(platform.family.package_manager, settings.apt_lock_timeout)
    values = _values(platform, data, node.get("kernel") or "", settings.nvidia_driver_branch)
    headers = _render(data.headers, values)
    calls: list[FactCall] = []
    if headers:
        calls.append((PackagesAvailable, {"check": manager.available_check, "packages": list(headers[:1])}))
    if data.module and platform.major in data.module_majors:
        calls.append((DnfModuleStreams, {}))
    if manager.name != "apt":
        return calls
    extra = _render(data.extra_packages, values)
    return calls + [
        (driver_ops.AptSourceFiles, {}),
        (manager.installed_fact, {}),
        *([deb_states_read(extra)] if extra else []),
        *([deb_states_read([data.persistenced_package])] if data.persistenced_package and "{" not in data.persistenced_package else []),
        deb_states_read(names["driver"] + names["fabric"]),
        files.digest_read(APT_PIN_PATH),
        (SystemdEnabled, {"services": list(SERVICE_UNITS)}),
        (SystemdStatus, {"services": list(SERVICE_UNITS)}),
    ]


def headers_findings(plan: DriverPlan | None, available: dict) -> list[str]:
    if not plan or not plan.headers:
        return []
    exact = plan.headers[0]
    if available.get(exact):
        return []
    fallback = ", ".join(plan.headers[1:]) or "none"
    return [
        f"kernel headers {exact} for the running kernel are not in the {plan.manager.name} lists (as of "
        f"their last refresh): the driver stage will try {fallback} after refreshing them"
    ]


def preflight_check(settings: Settings, platform: Platform, nvidia: dict) -> StageCheck:
    """What preflight checks for this stage (deploy/stages.py): the host's plan (its kernel module
    flavour and one driver version; a refusal fails the host before any change), and a warning
    when the running kernel's headers are not in the package lists."""
    plan, _ = plan_for_host(settings, platform, nvidia)
    warnings = []
    if plan.headers:
        available = known_fact(host, PackagesAvailable, check=plan.manager.available_check,
                               packages=list(plan.headers[:1]))
        warnings = headers_findings(plan, available)
    if plan.unreadable:
        warnings.append(f"{plan.manager.name} cannot read {'; '.join(plan.unreadable)}: the versions it offers are "
                        "unknown to this run, and an install would stop at it: repair or disable the repository")
    logger.info(f"{host.print_prefix}NVIDIA kernel modules: {plan.flavour}")
    return StageCheck(warnings=warnings, plan=plan)


@deploy("NVIDIA driver")
def nvidia_driver(settings: Settings, platform: Platform, plan: DriverPlan, drain: DrainTarget | None = None):
    manager = plan.manager
    lock_timeout = settings.apt_lock_timeout
    for note in plan.notes:
        logger.warning(f"{host.print_prefix}{note}")

    if plan.components:
        driver_ops.enable_apt_components(
            name=f"Enable {' '.join(plan.components)} for {plan.codename}",
            codename=plan.codename,
            components=list(plan.components),
        )
    if plan.repository:
        add_repository(manager, f"Add NVIDIA's repository {plan.repository['name']}", plan.repository,
                       plan.repository["pin"], timeout=settings.download_timeout, lock_timeout=lock_timeout)
    if plan.extra_packages:
        install_packages(manager, "Install the driver's companion packages", plan.extra_packages,
                         lock_timeout=lock_timeout)
    if plan.module:
        manager.module_operation(name=f"Enable the {manager.name} module stream {':'.join(plan.module)}",
                                 module=plan.module[0], stream=plan.module[1], lock_timeout=lock_timeout)
    if plan.headers:
        driver_ops.install_first_available(
            name="Install kernel headers for the driver's module",
            manager=manager,
            candidates=list(plan.headers),
            lock_timeout=lock_timeout,
            what="kernel headers",
        )
    if plan.fabric_repository:
        add_cuda_repository(settings, manager, plan.fabric_repository)
    if plan.apt_pin:
        put_text(name="Pin the NVIDIA driver's packages at one version", dest=APT_PIN_PATH, content=plan.apt_pin)
    driver = driver_ops.install_driver(
        name="Install the NVIDIA driver",
        manager=manager, packages=plan.packages, remove=list(plan.remove), state_names=list(plan.state_names),
        lock_timeout=lock_timeout, resolve=plan.resolve,
    )
    if plan.persistenced_package:
        with_driver = plan.persistenced_with_driver
        version = next((version for version in plan.packages.values() if version), None) if with_driver else None
        install_packages(manager, "Install nvidia-persistenced", {plan.persistenced_package: version},
                         hold=with_driver, lock_timeout=lock_timeout)
    for service, start in ((plan.persistenced_service, plan.persistenced_start), (plan.fabric_service, True)):
        if service:
            enable_service(manager, service, start)

    kernel_modules.cover_installed_kernels(settings, platform)
    kernel_modules.reload_without_reboot(settings, driver)
    reboot = driver_ops.mark_reboot_required(
        name="Mark the node for a reboot after the driver change",
        packages=list(plan.packages),
        _if=driver.did_change,
    )
    if settings.reboot_allowed:
        kernel_modules.refuse_reboot_without_module(_if=reboot.did_change)
        if drain:
            drain_ops.drain_before_reboot(name=f"Drain Kubernetes node {drain.node} before the reboot",
                                          target=drain, _if=reboot.did_change)
            drain_ops.watch(drain, driver)
        server.reboot(name="Reboot to load the new NVIDIA driver", delay=REBOOT_DELAY, reboot_timeout=600, _if=reboot.did_change)

    if plan.cuda_packages:
        if plan.cuda_repository:
            add_repository(manager, f"Add NVIDIA's CUDA repository {plan.cuda_repository['name']}", plan.cuda_repository,
                           plan.cuda_repository["pin"], timeout=settings.download_timeout, lock_timeout=lock_timeout)
        install_packages(manager, "Install the CUDA toolkit", plan.cuda_packages, lock_timeout=lock_timeout)
        put_text(name="Put the CUDA toolkit on PATH", dest=CUDA_PROFILE_PATH, content=cuda_profile_text(plan.cuda_home))
    return plan


def enable_service(manager: PackageManager, service: str, start: bool) -> None:
    """Enable ``service`` (and start it where ``start``: a GPU is present) with pyinfra's operation,
    unless preflight's reading shows it is so already (a no-op run then reads nothing more)."""
    unit = f"{service}.service"
    if manager.name == "apt" and unit in SERVICE_UNITS:
        enabled = read(host, (SystemdEnabled, {"services": list(SERVICE_UNITS)})).get(unit)
        running = read(host, (SystemdStatus, {"services": list(SERVICE_UNITS)})).get(unit)
        if enabled and (running or not start):
            return
    units.enable_service(name=f"Enable {service}" + (" and start it" if start else ""), service=unit, start=start)


def add_cuda_repository(settings: Settings, manager: PackageManager, repository: dict) -> None:
    """NVIDIA's CUDA repository for Fabric Manager: on apt a signed-by source as the toolkit's
    (deploy/operations/download.py), elsewhere the family's repository file; its key checked
    against its pin either way."""
    pin = repository["pin"]
    if manager.signed_by_keyring:
        source_text = cuda_apt_source_text(repository)
        digests = read(host, download.source_read(CUDA_APT_SOURCE, CUDA_APT_KEYRING))
        if download.source_state(digests, CUDA_APT_SOURCE, source_text, CUDA_APT_KEYRING) == download.IN_PLACE:
            return
        download.signed_apt_source(
            name=f"Add NVIDIA's CUDA repository {repository['name']} (signed-by keyring)",
            path=CUDA_APT_SOURCE, content=source_text, keyring=CUDA_APT_KEYRING, key_url=repository["key_url"],
            fingerprints=pin.fingerprints, fingerprint_setting=pin.setting,
            repository=repository["url"], timeout=settings.download_timeout, lock_timeout=settings.apt_lock_timeout,
        )
        return
    add_repository(manager, f"Add NVIDIA's CUDA repository {repository['name']}",
                   {"name": repository["name"], "baseurl": repository["url"], "gpgkey": repository["key_url"]}, pin,
                   timeout=settings.download_timeout, lock_timeout=settings.apt_lock_timeout)


@deploy("Driver report")
def driver_report(settings: Settings, plan: DriverPlan | None):
    driver_ops.report_driver_state(
        name="Report the NVIDIA driver's state",
        require_gpu=settings.require_gpu,
        driver_packages=sorted(plan.packages) if plan else [],
    )
