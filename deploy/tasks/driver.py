"""
Stage 3: the NVIDIA driver from the distro's or NVIDIA's packages, pinned and held.

``driver_plan`` turns the family's data (deploy/distros.py) and what preflight saw into the
packages, repositories and holds of this host; ``nvidia_driver`` applies it with pyinfra's
package operations. The nouveau / nova blacklist lives in the kernel stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version
from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import server

from deploy.distros import PackageManager, Platform, add_repository, by_distro_id, install_packages
from deploy.facts.nvidia import PackagesAvailable, RecommendedDriver
from deploy.operations import drain as drain_ops
from deploy.operations import driver as driver_ops
from deploy.operations.drain import DrainTarget
from deploy.operations.failure import HostRefusal
from deploy.operations.files import put_text
from deploy.settings import MIN_DRIVER_VERSION, Settings
from deploy.tasks.preflight import StageCheck

CUDA_PROFILE_PATH = "/etc/profile.d/cuda.sh"
REBOOT_DELAY = 10  # seconds before reconnecting


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


def upstream_version(version: str) -> str:
    """535.216.03-3~deb12u1 / 3:550.54.15-1.el9 -> the driver's own version."""
    return re.split(r"[-_~+]", version.split(":", 1)[-1], maxsplit=1)[0]


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


def _render_repository(repository, values: dict) -> dict | None:
    if not repository:
        return None
    baseurl = repository["baseurl"].format(**values)
    return {"name": repository["name"].format(**values), "baseurl": baseurl,
            "gpgkey": repository["gpgkey"].format(**values, baseurl=baseurl)}


def driver_plan(
    settings: Settings,
    platform: Platform,
    node: dict,
    installed: dict | None = None,
    recommended: list | None = None,
) -> DriverPlan:
    """What the driver stage installs on this host: packages, pins, holds, repositories."""
    data = platform.family.driver
    manager = platform.family.package_manager
    check_minimum(settings)
    version = settings.nvidia_driver_version
    if version and not manager.can_pin:
        raise DriverPlanError(
            f"nvidia_driver_version={version!r} cannot be pinned on {platform.distro_id}: its package "
            "manager installs only the repository's version; unset it (the driver is still held)"
        )

    branch = settings.nvidia_driver_branch
    if branch and data.branch == "unsupported":
        raise DriverPlanError(
            f"nvidia_driver_branch={branch!r} is not supported on {platform.distro_id}: it ships one "
            "driver branch; unset it" + (" or pin nvidia_driver_version" if manager.can_pin else "")
        )
    if data.branch == "required" and not branch:
        branch = detect_branch(data.branch_detect, list(installed or {}) + list(recommended or []))
        if not branch:
            raise DriverPlanError(
                f"nvidia_driver_branch is required on {platform.distro_id}: none is installed and "
                f"`{data.recommend_command or 'the recommender'}` recommends none; "
                "set it, e.g. nvidia_driver_branch=535"
            )

    kernel = node.get("kernel") or ""
    values = {
        "kernel": kernel,
        "deb_arch": platform.deb_arch,
        "arch": platform.cuda_arch,
        "distro_id": platform.distro_id,
        "version_id": platform.version_id,
        "major": platform.major if platform.major is not None else platform.version_id.split(".")[0],
        "minor": (platform.version_id.split(".") + ["0"])[1],
    }
    values["dist"] = (by_distro_id(data.repo_dist, platform.distro_id) or "").format(**values)
    values["flavour"] = driver_ops.kernel_flavour(kernel, data.flavour_pattern, data.default_flavour.format(**values))
    if branch:
        values["branch"] = branch

    module = None
    if data.module and platform.major in data.module_majors:
        module_name, stream, default_branch = data.module
        module = (module_name, stream.format(branch=branch or default_branch))
        names = _render(data.module_packages, values)
        dependencies: tuple[str, ...] = ()
    else:
        use_branch = bool(branch)
        names = _render(data.branch_packages if use_branch and data.branch_packages is not None else data.packages,
                        values)
        dependencies = _render(
            data.branch_dependencies if use_branch and data.branch_dependencies is not None else data.dependencies,
            values,
        )

    notes = []
    if data.kernel_modules is not None:
        # Arch: a prebuilt module package per stock kernel, DKMS as soon as any other is installed.
        kernels = node.get("kernel_pkgbases") or []
        modules = data.kernel_modules
        if kernels and all(name in modules for name in kernels):
            dependencies = tuple(modules[name] for name in kernels)
        else:
            dependencies = (data.dkms_package,) + tuple(
                data.dkms_headers.format(pkgbase=name) for name in (kernels or ["linux"])
            )
            if not kernels:
                notes.append("no /usr/lib/modules/*/pkgbase found: assuming the linux kernel, with DKMS")

    packages = {name: version for name in names}
    packages.update({name: version if data.pin_dependencies else None for name in dependencies})

    return DriverPlan(
        manager=manager,
        branch=branch,
        packages=packages,
        extra_packages=_render(data.extra_packages, values),
        headers=_render(data.headers, values),
        components=data.components,
        codename=platform.codename,
        repository=_render_repository(by_distro_id(data.repositories, platform.distro_id), values),
        module=module,
        cuda_packages=data.cuda_packages if settings.cuda_toolkit_install else (),
        cuda_repository=_render_repository(data.cuda_repository, values) if settings.cuda_toolkit_install else None,
        cuda_home=data.cuda_home,
        notes=notes,
    )


def cuda_profile_text(cuda_home: str) -> str:
    bin_dir = f"{cuda_home}/bin"
    return (
        "# Managed by gpu-node (deploy/tasks/driver.py): the CUDA toolkit's tools on PATH.\n"
        f'case ":$PATH:" in\n  *":{bin_dir}:"*) ;;\n  *) export PATH="$PATH:{bin_dir}" ;;\nesac\n'
    )


def plan_for_host(settings: Settings, platform: Platform, node: dict) -> DriverPlan:
    """The plan of the current host, reading what branch detection needs (read-only)."""
    data = platform.family.driver
    installed = recommended = None
    if data.branch == "required" and not settings.nvidia_driver_branch:
        installed = host.get_fact(platform.family.package_manager.installed_fact)
        if data.recommend_command:
            recommended = host.get_fact(RecommendedDriver, recommend_command=data.recommend_command)
    return driver_plan(settings, platform, node, installed, recommended)


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
    """What preflight checks for this stage (deploy/stages.py): the host's plan, and a warning when
    the running kernel's headers are not in the package lists."""
    plan = plan_for_host(settings, platform, nvidia)
    warnings = []
    if plan.headers:
        available = host.get_fact(PackagesAvailable, check=plan.manager.available_check,
                                  packages=list(plan.headers[:1]))
        warnings = headers_findings(plan, available)
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
        add_repository(manager, f"Add NVIDIA's repository {plan.repository['name']}", plan.repository)
    if plan.extra_packages:
        install_packages(manager, "Install the driver's companion packages", plan.extra_packages,
                         lock_timeout=lock_timeout)
    if plan.module:
        manager.module_operation(name=f"Enable the {manager.name} module stream {':'.join(plan.module)}",
                                 module=plan.module[0], stream=plan.module[1])
    if plan.headers:
        driver_ops.install_first_available(
            name="Install kernel headers for the driver's module",
            manager=manager,
            candidates=list(plan.headers),
            lock_timeout=lock_timeout,
            what="kernel headers",
        )
    driver = install_packages(manager, "Install the NVIDIA driver", plan.packages, hold=True, lock_timeout=lock_timeout)

    reboot = driver_ops.mark_reboot_required(
        name="Mark the node for a reboot after the driver change",
        packages=list(plan.packages),
        _if=driver.did_change,
    )
    if settings.reboot_allowed:
        if drain:
            drain_ops.drain_before_reboot(name=f"Drain Kubernetes node {drain.node} before the reboot",
                                          target=drain, _if=reboot.did_change)
            drain_ops.watch(drain, driver)
        server.reboot(name="Reboot to load the new NVIDIA driver", delay=REBOOT_DELAY, reboot_timeout=600, _if=reboot.did_change)

    if plan.cuda_packages:
        if plan.cuda_repository:
            add_repository(manager, f"Add NVIDIA's CUDA repository {plan.cuda_repository['name']}", plan.cuda_repository)
        install_packages(manager, "Install the CUDA toolkit", plan.cuda_packages, lock_timeout=lock_timeout)
        put_text(name="Put the CUDA toolkit on PATH", dest=CUDA_PROFILE_PATH, content=cuda_profile_text(plan.cuda_home))
    return plan


@deploy("Driver report")
def driver_report(settings: Settings, plan: DriverPlan | None):
    driver_ops.report_driver_state(
        name="Report the NVIDIA driver's state",
        require_gpu=settings.require_gpu,
        driver_packages=sorted(plan.packages) if plan else [],
    )
