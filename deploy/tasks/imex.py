"""
The IMEX step of the driver stage (imex_domain; deploy/rack/imex.py decides): the host's IMEX daemon at
the driver's version (in the driver's own transaction where the driver stage installs it, deploy/
planning/driver_companions.py; here, at the installed driver's version, where nvidia_driver_install=false),
``nodes_config.cfg`` listing every member of its domain, the IMEX channel as imex_channels says, and the
daemon enabled (started where a GPU is present).

A change of a domain's members rewrites nodes_config.cfg on each member, and IMEX restarts where it
runs: one host at a time across the run (pyinfra's ``_serial``), so a domain never loses every
member at once; a host whose file did not change is not restarted, so another domain's hosts are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyinfra import host
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import files as pyinfra_files
from pyinfra.operations import systemd

from ..distros.families import Platform
from ..distros.package_managers import install_packages, version_listing
from ..driver.fabric import fabric_of
from ..facts.packages import PackageVersions, RepositoryPackageVersions
from ..facts.read_ahead import FactCall, read
from ..facts.units import UnitsEnabled
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import deploy
from ..foundations.templates import render
from ..operations import download, files, units
from ..operations.failure import HostRefusal
from ..planning.driver_companions import companion_packages
from ..planning.driver_names import DriverPlanError, template_values
from ..planning.driver_plan import CUDA_APT_KEYRING, CUDA_APT_SOURCE
from ..planning.findings import StepCheck
from ..rack import imex
from ..settings import Settings, SettingsError, host_settings
from .driver import add_cuda_repository

HEADER = "# Managed by gpu-node (deploy/tasks/imex.py)\n"
UNIT_DIR = "/etc/systemd/system"
CHANNEL_UNIT_PATH = f"{UNIT_DIR}/{imex.CHANNEL_UNIT}"
SCRIPT_MODE = "755"


@dataclass(frozen=True)
class ImexPlan:
    domain: str
    members: tuple[imex.Member, ...]
    start: bool  # a GPU is present: the daemon is started, not only enabled
    # nvidia_driver_install=false: IMEX's packages at the installed driver's version, and their repository
    packages: dict[str, str | None] = field(default_factory=dict)
    repository: dict[str, Any] | None = None


def members_of(settings: Settings) -> tuple[imex.Member, ...]:
    """The members of this host's domain: every host of the inventory (this run's or not: --limit runs
    fewer, and the file lists them all) whose settings name the same imex_domain."""
    domain = settings.imex_domain
    if domain is None:
        return ()
    rows = []
    for other in host.inventory:
        try:
            theirs = settings if other.name == host.name else host_settings(other)
        except SettingsError as error:
            if other.data.get("imex_domain") == settings.imex_domain:
                raise HostRefusal(
                    f"IMEX domain {settings.imex_domain!r}: its host {other.name}'s settings are invalid ({error})"
                ) from None
            continue
        rows.append((other.name, theirs.imex_domain, theirs.imex_address, other.data.get("ssh_hostname") or other.name))
    try:
        return imex.domain_members(domain, rows)
    except imex.DomainRefusal as refusal:
        raise HostRefusal(str(refusal)) from None


def channel_files(settings: Settings) -> dict[str, tuple[str, str]]:
    """path -> (text, mode) of the files imex_channels keeps (the other way's are removed)."""
    if settings.imex_channels == "module-option":
        return {imex.CHANNEL_OPTION_PATH: (HEADER + imex.CHANNEL_OPTION, "644")}
    script = "#!/bin/sh\n" + shell_scripts.script(
        "imex_channel", proc_devices="/proc/devices", channel=imex.CHANNEL_DEVICE
    )
    unit = render(
        "gpu-node-imex-channel.service.j2",
        channel=imex.CHANNEL_DEVICE,
        imex_unit=imex.IMEX_UNIT,
        script=imex.CHANNEL_SCRIPT,
    )
    return {imex.CHANNEL_SCRIPT: (script, SCRIPT_MODE), CHANNEL_UNIT_PATH: (unit, "644")}


ALL_CHANNEL_FILES = (imex.CHANNEL_OPTION_PATH, imex.CHANNEL_SCRIPT, CHANNEL_UNIT_PATH)


def units_read() -> FactCall:
    return (UnitsEnabled, {"units": (imex.IMEX_UNIT, imex.CHANNEL_UNIT)})


def service_reads() -> list[FactCall]:
    """What pyinfra's systemd.service reads of the IMEX unit (read ahead: a no-op run reads nothing more)."""
    return [(SystemdEnabled, {"services": [imex.IMEX_UNIT]}), (SystemdStatus, {"services": [imex.IMEX_UNIT]})]


def reads(settings: Settings) -> list[FactCall]:
    """What the step decides on, for preflight to read ahead: the same calls its operations make."""
    return [
        files.digest_read(imex.NODES_CONFIG),
        *(files.digest_read(path) for path in ALL_CHANNEL_FILES),
        units_read(),
        *service_reads(),
    ]


def installed_driver_packages(
    settings: Settings, platform: Platform, nvidia: dict[str, Any]
) -> tuple[dict[str, str | None], dict[str, Any] | None]:
    """IMEX's packages at the installed driver's version, and NVIDIA's CUDA repository (where the driver
    stage does not install the driver, so not IMEX with it)."""
    data = platform.family.driver
    manager = platform.family.package_manager
    driver = nvidia.get("loaded_version") or nvidia.get("built_version")
    if data.imex is None:
        raise HostRefusal(f"IMEX is not packaged for {platform.distro_id}: unset imex_domain for this host")
    if not driver:
        raise HostRefusal(
            "IMEX must be at the driver's version, and this host has no NVIDIA driver (no nvidia module "
            "built or loaded; nvidia_driver_install=false): install the driver first"
        )
    branch = driver.split(".")[0]
    values = template_values(platform, data, nvidia.get("kernel") or "", branch)
    names = [name.format(branch=branch) for name in data.imex.names(int(branch))]
    offered: dict[str, Any] = {}
    if manager.pins_exact_versions:  # its pins name the release: the exact versions the lists offer
        offered = dict(
            read(
                host,
                (PackageVersions, {"listing": version_listing(manager, settings.apt_lock_timeout), "packages": names}),
            )
            or {}
        )
        if read(host, download.source_read(CUDA_APT_SOURCE, CUDA_APT_KEYRING)).get(CUDA_APT_SOURCE) is None:
            url = f"{settings.nvidia_cuda_repo_url.rstrip('/')}/{values['dist']}/{platform.cuda_arch}"
            offered.update(
                read(
                    host,
                    (RepositoryPackageVersions, {"url": url, "packages": names, "timeout": settings.download_timeout}),
                )
                or {}
            )
    packages: dict[str, Any] = {}
    try:
        plan = companion_packages(
            settings,
            platform,
            manager,
            [],
            (driver, False),
            packages,
            values,
            offered,
            "",
            fabric_of(nvidia),
            (data.imex,),
        )
    except DriverPlanError as refusal:
        raise HostRefusal(str(refusal)) from None
    return packages, plan.repository


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """The domain's members (a member without an address, two at one, refused before any change) and,
    without the driver stage's install, IMEX's packages at the installed driver's version."""
    if settings.imex_domain is None:  # the step runs only with a domain (deploy/stages.py)
        return StepCheck()
    try:
        members = members_of(settings)
        packages, repository = (
            ({}, None) if settings.nvidia_driver_install else installed_driver_packages(settings, platform, nvidia)
        )
    except HostRefusal as refusal:
        return StepCheck(errors=[str(refusal)])
    return StepCheck(plan=ImexPlan(settings.imex_domain, members, bool(nvidia.get("gpus")), packages, repository))


@deploy("IMEX domain")
def imex_domain(settings: Settings, platform: Platform, plan: ImexPlan) -> None:
    manager = platform.family.package_manager
    if plan.packages:
        if plan.repository:
            add_cuda_repository(settings, manager, plan.repository)
        install_packages(
            manager,
            f"Install IMEX at the driver's version ({', '.join(plan.packages)})",
            plan.packages,
            hold=True,
            lock_timeout=settings.apt_lock_timeout,
        )
    wanted = channel_files(settings)
    for path in ALL_CHANNEL_FILES:
        current = read(host, files.digest_read(path))
        if path in wanted and not files.text_up_to_date(current, wanted[path][0], mode=wanted[path][1]):
            files.put_text(
                name=f"Put {path} (imex_channels={settings.imex_channels})",
                dest=path,
                content=wanted[path][0],
                mode=wanted[path][1],
            )
        elif path not in wanted and current is not None:
            pyinfra_files.file(name=f"Remove {path} (imex_channels={settings.imex_channels})", path=path, present=False)
    enabled = read(host, units_read())
    if CHANNEL_UNIT_PATH in wanted and enabled.get(imex.CHANNEL_UNIT) != "enabled":
        units.enable_unit_files(
            name=f"Enable {imex.CHANNEL_UNIT} (at every boot)", units=[imex.CHANNEL_UNIT], enabled=enabled
        )
    text = imex.nodes_config_text(plan.members)
    if not files.text_up_to_date(read(host, files.digest_read(imex.NODES_CONFIG)), text):
        written = files.put_text(
            name=f"List IMEX domain {plan.domain}'s {len(plan.members)} members in {imex.NODES_CONFIG}",
            dest=imex.NODES_CONFIG,
            content=text,
        )
        # Where it runs, the daemon reads its members again: one host at a time across the run.
        systemd.service(
            name=f"Restart {imex.IMEX_UNIT} for its domain's members (one host at a time)",
            service=imex.IMEX_UNIT,
            running=None,
            restarted=True,
            _if=written.did_change,
            _serial=True,
        )
    enabled_now, running = (read(host, call).get(imex.IMEX_UNIT) for call in service_reads())
    if not (enabled_now and (running or not plan.start)):
        units.enable_service(
            name=f"Enable {imex.IMEX_UNIT}" + (" and start it" if plan.start else ""),
            service=imex.IMEX_UNIT,
            start=plan.start,
        )
