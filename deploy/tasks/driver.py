"""
The driver stage: the NVIDIA driver from the distro's or NVIDIA's packages, pinned and held.

Preflight reads what the plan decides on, in one remote command (``plan_for_host``); the pure
plan (deploy/planning/driver_plan.py) turns it and the family's table into this host's packages,
repositories and holds; ``nvidia_driver`` applies it with the package operations. The nouveau /
nova blacklist lives in the kernel stage.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from typing import Any

from pyinfra import host, logger
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import server

from ..distros.families import Platform
from ..distros.package_managers import PackageManager, install_packages, lock_bounded_checks, version_listing
from ..distros.repositories import add_repository
from ..driver.branches import end_of_life_warning
from ..facts.apt import AptSourceFiles
from ..facts.gpu_support import GpuSupportLists
from ..facts.nvidia import PackagesAvailable, RecommendedDriver
from ..facts.packages import DnfModuleStreams, PackageVersions, RepositoryPackageVersions, WaitedPackageVersions
from ..facts.read_ahead import FactCall, known_fact, read, read_together
from ..foundations.pyinfra_api import deploy
from ..operations import download, files, units
from ..operations import drain as drain_ops
from ..operations import driver as driver_ops
from ..operations.drain import DrainTarget
from ..operations.failure import HostRefusal
from ..operations.files import put_text
from ..planning.driver_names import candidate_names, companion_records, render, template_values
from ..planning.driver_plan import (
    APT_PIN_PATH,
    CUDA_APT_KEYRING,
    CUDA_APT_SOURCE,
    CUDA_PROFILE_PATH,
    DriverPlan,
    Readings,
    branch_number,
    cuda_apt_source_text,
    cuda_profile_text,
    detect_branch,
    driver_plan,
    planned_branch,
)
from ..planning.findings import StepCheck
from ..settings import Settings
from . import kernel_modules, module_signing

REBOOT_DELAY = 10  # seconds before reconnecting
# The units the stage enables, read ahead by preflight (the family's names on Debian and Ubuntu)
SERVICE_UNITS = ("nvidia-fabricmanager.service", "nvidia-persistenced.service")


def readings_calls(
    settings: Settings,
    platform: Platform,
    node: dict[str, Any],
    branch: str | None,
    plan_names: dict[str, list[str]],
    fabric_url: str | None,
) -> list[FactCall]:
    manager = platform.family.package_manager
    calls: list[FactCall] = [(GpuSupportLists, {})]
    everything = plan_names["driver"] + plan_names["fabric"]
    if manager.version_listing and manager.lock.holders is not None:
        # dnf waits for a busy dnf's lock without end, zypper not at all: the read waits, bounded, first
        calls.append(
            (
                WaitedPackageVersions,
                {
                    "listing": version_listing(manager, settings.apt_lock_timeout),
                    "packages": everything,
                    "wait": manager.lock.script(settings.apt_lock_timeout),
                },
            )
        )
    elif manager.can_pin:
        calls.append(
            (PackageVersions, {"listing": version_listing(manager, settings.apt_lock_timeout), "packages": everything})
        )
    if fabric_url and plan_names["fabric"]:
        calls.append(
            (
                RepositoryPackageVersions,
                {"url": fabric_url, "packages": plan_names["fabric"], "timeout": settings.download_timeout},
            )
        )
    return calls


def plan_for_host(settings: Settings, platform: Platform, node: dict[str, Any]) -> tuple[DriverPlan, list[FactCall]]:
    """The plan of the current host, reading what it decides on in one remote command (read-only);
    also returns the calls its operations make, read in the same command."""
    data = platform.family.driver
    manager = platform.family.package_manager
    installed = recommended = None
    if data.branch == "required" and not settings.nvidia_driver_branch:
        installed = host.get_fact(manager.installed_fact)
        if data.recommend_command:
            recommended = host.get_fact(RecommendedDriver, recommend_command=data.recommend_command)
        branch = (
            detect_branch(data.branch_detect, list(installed or {}) + list(recommended or []))
            if data.branch_detect
            else None
        )
    else:
        branch = settings.nvidia_driver_branch
    names = candidate_names(settings, platform, node, branch)
    fabric_url = None
    companions = companion_records(settings, data, node)
    if companions and manager.pins_exact_versions:
        values = template_values(platform, data, node.get("kernel") or "", branch)
        fabric_url = f"{settings.nvidia_cuda_repo_url.rstrip('/')}/{values['dist']}/{platform.cuda_arch}"
    calls = readings_calls(settings, platform, node, branch, names, fabric_url)
    ahead = operation_reads(settings, platform, node, names)
    ahead.append(kernel_modules.KERNELS_READ)
    fabric_source = download.source_read(CUDA_APT_SOURCE, CUDA_APT_KEYRING)
    if fabric_url:
        ahead.append(fabric_source)
    found: dict[str, Any] = dict(
        zip((fact.__name__ for fact, _ in calls), read_together(host, calls + ahead)[: len(calls)])
    )
    waited = found.pop(WaitedPackageVersions.__name__, None)
    unreadable: tuple[str, ...] = ()
    if waited is not None:
        if waited["busy"]:
            raise HostRefusal(waited["busy"])  # the wait's line: the manager's lock and its holder
        found[PackageVersions.__name__] = waited["versions"]
        unreadable = tuple(waited["unreadable"])
    states = read(host, manager.states_read(names["driver"] + names["fabric"])) if manager.states_read else {}
    if fabric_url and not names["fabric"]:
        # The companions' names carry the branch, known now from the driver's versions: one more read, on
        # NVSwitch nodes and IMEX domains' hosts only
        number = branch_number(
            settings, None, names["driver"], Readings(states=states, offered=found.get("PackageVersions")), node
        )
        if number:
            values_now = template_values(platform, data, node.get("kernel") or "", str(number))
            names["fabric"] = [
                name
                for record in companions
                for name in (*render(record.names(number), values_now), *getattr(record, "nvlsm_packages", ()))
            ]
            more = readings_calls(
                settings, platform, node, str(number), {"driver": [], "fabric": names["fabric"]}, fabric_url
            )[1:]
            driver_offered = found.get("PackageVersions") or {}
            found.update(zip((fact.__name__ for fact, _ in more), read_together(host, more)))
            found["PackageVersions"] = {**driver_offered, **(found.get("PackageVersions") or {})}
    fabric_offered = found.get("RepositoryPackageVersions")
    if fabric_url and read(host, fabric_source).get(CUDA_APT_SOURCE) is not None:
        fabric_offered = None  # the repository is added: its versions are in the lists
    readings = Readings(
        installed=installed,
        recommended=recommended,
        states=states,
        offered=found.get("PackageVersions"),
        fabric_offered=fabric_offered,
        gpu_lists=found.get("GpuSupportLists"),
        unreadable=unreadable,
    )
    plan = driver_plan(settings, platform, node, readings=readings)
    return replace(plan, state_names=tuple(names["driver"] + names["fabric"])), ahead


def operation_reads(
    settings: Settings, platform: Platform, node: dict[str, Any], names: dict[str, list[str]]
) -> list[FactCall]:
    """What the stage's operations read, read ahead in the plan's one command (where the family's
    installs read a state fact the plan can name, all of it: a run that changes nothing then reads
    nothing more)."""
    data = platform.family.driver
    manager = lock_bounded_checks(platform.family.package_manager, settings.apt_lock_timeout)
    values = template_values(platform, data, node.get("kernel") or "", settings.nvidia_driver_branch)
    headers = render(data.headers, values)
    calls: list[FactCall] = module_signing.reads(settings, platform, node)
    if headers:
        calls.append((PackagesAvailable, {"check": manager.available_check, "packages": list(headers[:1])}))
    if data.module and platform.major in data.module_majors:
        calls.append((DnfModuleStreams, {}))
    if manager.states_read is None:
        return calls
    extra = render(data.extra_packages, values)
    return calls + [
        (AptSourceFiles, {}),  # enable_apt_components's (absent elsewhere: read as none)
        (manager.installed_fact, {}),
        *([manager.states_read(extra)] if extra else []),
        *(
            [manager.states_read([data.persistenced_package])]
            if data.persistenced_package and "{" not in data.persistenced_package
            else []
        ),
        manager.states_read(names["driver"] + names["fabric"]),
        files.digest_read(APT_PIN_PATH),
        (SystemdEnabled, {"services": list(SERVICE_UNITS)}),
        (SystemdStatus, {"services": list(SERVICE_UNITS)}),
    ]


def headers_findings(plan: DriverPlan | None, available: dict[str, Any]) -> list[str]:
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


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """What preflight checks for this stage (deploy/stages.py): the host's plan (its kernel module
    type and one driver version; a refusal fails the host before any change), and a warning
    when the running kernel's headers are not in the package lists."""
    plan, _ = plan_for_host(settings, platform, nvidia)
    warnings = []
    if plan.headers:
        available = known_fact(
            host, PackagesAvailable, check=plan.manager.available_check, packages=list(plan.headers[:1])
        )
        warnings = headers_findings(plan, available)
    if plan.unreadable:
        warnings.append(
            f"{plan.manager.name} cannot read {'; '.join(plan.unreadable)}: the versions it offers are "
            "unknown to this run, and an install would stop at it: repair or disable the repository"
        )
    number, where = planned_branch(plan, nvidia)
    lifecycle = end_of_life_warning(number, date.today(), where)
    warnings += [lifecycle] if lifecycle else []
    refusal = module_signing.refusal(plan.signing)
    logger.info(
        f"{host.print_prefix}NVIDIA kernel modules: {plan.kernel_module_type}"
        + (f", signed by {module_signing.signer_name(plan.signing)} ({plan.signing.why})" if plan.signing else "")
    )
    return StepCheck(warnings=warnings, errors=[refusal] if refusal else [], plan=plan)


@deploy("NVIDIA driver")
def nvidia_driver(
    settings: Settings, platform: Platform, plan: DriverPlan, drain: DrainTarget | None = None
) -> DriverPlan:
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
        add_repository(
            manager,
            f"Add NVIDIA's repository {plan.repository['name']}",
            plan.repository,
            plan.repository["pin"],
            timeout=settings.download_timeout,
            lock_timeout=lock_timeout,
        )
    if plan.extra_packages:
        install_packages(
            manager, "Install the driver's companion packages", plan.extra_packages, lock_timeout=lock_timeout
        )
    if plan.module and manager.module_operation is not None:  # (a manager with module streams has their operation)
        manager.module_operation(
            name=f"Enable the {manager.name} module stream {':'.join(plan.module)}",
            module=plan.module[0],
            stream=plan.module[1],
            lock_timeout=lock_timeout,
        )
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
    if plan.signing:
        module_signing.before_install(manager, plan.signing, lock_timeout)
    driver = driver_ops.install_driver(
        name="Install the NVIDIA driver",
        manager=manager,
        packages=plan.packages,
        remove=list(plan.remove),
        state_names=list(plan.state_names),
        lock_timeout=lock_timeout,
        resolve=plan.resolve,
    )
    if plan.persistenced_package:
        with_driver = plan.persistenced_with_driver
        version = next((version for version in plan.packages.values() if version), None) if with_driver else None
        install_packages(
            manager,
            "Install nvidia-persistenced",
            {plan.persistenced_package: version},
            hold=with_driver,
            lock_timeout=lock_timeout,
        )
    for service, start in ((plan.persistenced_service, plan.persistenced_start), (plan.fabric_service, True)):
        if service:
            enable_service(service, start, read_ahead=manager.states_read is not None)

    kernel_modules.cover_installed_kernels(settings, platform)
    if plan.signing:
        module_signing.after_install(settings, manager, plan.signing, lock_timeout)
    kernel_modules.reload_without_reboot(settings, driver)
    reboot = driver_ops.mark_reboot_required(
        name="Mark the node for a reboot after the driver change",
        packages=list(plan.packages),
        _if=driver.did_change,
    )
    if settings.reboot_allowed:
        kernel_modules.refuse_reboot_without_module(_if=reboot.did_change)
        if drain:
            drain_ops.drain_before_reboot(
                name=f"Drain Kubernetes node {drain.node} before the reboot", target=drain, _if=reboot.did_change
            )
            drain_ops.watch(drain, driver)
        server.reboot(
            name="Reboot to load the new NVIDIA driver", delay=REBOOT_DELAY, reboot_timeout=600, _if=reboot.did_change
        )

    if plan.cuda_packages:
        if plan.cuda_repository:
            add_repository(
                manager,
                f"Add NVIDIA's CUDA repository {plan.cuda_repository['name']}",
                plan.cuda_repository,
                plan.cuda_repository["pin"],
                timeout=settings.download_timeout,
                lock_timeout=lock_timeout,
            )
        install_packages(manager, "Install the CUDA toolkit", plan.cuda_packages, lock_timeout=lock_timeout)
        put_text(name="Put the CUDA toolkit on PATH", dest=CUDA_PROFILE_PATH, content=cuda_profile_text(plan.cuda_home))
    return plan


def enable_service(service: str, start: bool, read_ahead: bool) -> None:
    """Enable ``service`` (and start it where ``start``: a GPU is present) with pyinfra's operation,
    unless preflight's reading shows it is so already (a no-op run then reads nothing more;
    ``read_ahead``: preflight read the units, ``operation_reads``)."""
    unit = f"{service}.service"
    if read_ahead and unit in SERVICE_UNITS:
        enabled = read(host, (SystemdEnabled, {"services": list(SERVICE_UNITS)})).get(unit)
        running = read(host, (SystemdStatus, {"services": list(SERVICE_UNITS)})).get(unit)
        if enabled and (running or not start):
            return
    units.enable_service(name=f"Enable {service}" + (" and start it" if start else ""), service=unit, start=start)


def add_cuda_repository(settings: Settings, manager: PackageManager, repository: dict[str, Any]) -> None:
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
            path=CUDA_APT_SOURCE,
            content=source_text,
            keyring=CUDA_APT_KEYRING,
            key_url=repository["key_url"],
            fingerprints=pin.fingerprints,
            fingerprint_setting=pin.setting,
            repository=repository["url"],
            timeout=settings.download_timeout,
            lock_timeout=settings.apt_lock_timeout,
        )
        return
    add_repository(
        manager,
        f"Add NVIDIA's CUDA repository {repository['name']}",
        {"name": repository["name"], "baseurl": repository["url"], "gpgkey": repository["key_url"]},
        pin,
        timeout=settings.download_timeout,
        lock_timeout=settings.apt_lock_timeout,
    )
