"""Stage 1 (read-only): what the node is, and whether it is safe to go on."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.server import Arch, LinuxDistribution

from deploy.distros import Platform, detect_platform
from deploy.facts.combined import read_facts
from deploy.facts.containerd import ContainerdFlavour, classify_flavour
from deploy.facts.nvidia import HostState, PackagesAvailable
from deploy.facts.recovery import PackageManagerState, PendingRestarts
from deploy.operations import packages as package_ops
from deploy.operations.failure import HostRefusal
from deploy.settings import Settings, likely_typos
from deploy.tasks.driver import DriverPlan, plan_for_host
from deploy.tasks.toolkit import pin_findings as toolkit_pin_findings

DISK_MOUNTS = ("/", "/var")


class PreflightError(HostRefusal):
    """The node is not safe to change: raised before any change."""


@dataclass(frozen=True)
class Node:
    platform: Platform
    # deploy/facts/nvidia.py HostState: GPUs, Secure Boot, modules, kernel, free disk
    nvidia: dict | None = None
    # the driver stage's plan, when that stage runs
    driver_plan: DriverPlan | None = None
    # deploy/facts/containerd.py ContainerdFlavour plus "flavour": {"name", "service"}:
    # who owns containerd (plain, k3s, rke2, k0s, microk8s)
    containerd: dict | None = None
    # deploy/facts/recovery.py PendingRestarts: {unit: config} an interrupted run did not restart
    pending_restarts: dict | None = None


def gpu_findings(nvidia: dict, require_gpu: bool) -> tuple[list[str], list[str]]:
    """(warnings, errors) about the GPUs, Secure Boot and the modules holding them."""
    warnings, errors = [], []
    if not nvidia["gpus"]:
        message = "no NVIDIA GPU on the PCI bus (vendor 0x10de, display class)"
        if require_gpu:
            errors.append(message + ": require_gpu=true")
        else:
            warnings.append(message + ": the node is prepared, but has no GPU to offer")
    if nvidia["secure_boot"]:
        warnings.append(
            "Secure Boot is enabled: an unsigned NVIDIA kernel module will not load. Enroll the DKMS "
            "signing key (mokutil --import /var/lib/dkms/mok.pub, confirm at the next boot) or use "
            "signed modules, or disable Secure Boot in the firmware"
        )
    for module in ("nouveau", "nova_core"):
        if module in nvidia["modules"]:
            warnings.append(
                f"{module} is loaded and holds the GPU: the NVIDIA module can load only after a reboot "
                "with the blacklist the kernel stage writes"
            )
    return warnings, errors


def disk_findings(nvidia: dict, min_free_mb: int) -> list[str]:
    errors = []
    for mount in DISK_MOUNTS:
        free = nvidia["free_mb"].get(mount)
        if free is not None and free < min_free_mb:
            errors.append(
                f"only {free} MiB free on {mount}, less than min_free_disk_mb={min_free_mb}: "
                "free some space (the driver and its DKMS build need it) or lower the setting"
            )
    return errors


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


@deploy("Preflight")
def preflight(settings: Settings, read_ahead: list[tuple[type, dict]] | tuple = ()) -> Node:
    for note in likely_typos(host.data.dict()):
        logger.warning(f"{host.print_prefix}{note}")
    # One remote command for what every node run needs first (re-runs from cron pay per command),
    # and for the facts the later stages decide on (``read_ahead``, see deploy/facts/combined.py).
    facts = read_facts(host, LinuxDistribution, Arch, HostState, ContainerdFlavour, PackageManagerState,
                       PendingRestarts, read_ahead=read_ahead)
    platform = detect_platform(facts["LinuxDistribution"], facts["Arch"])
    logger.info(f"{host.print_prefix}platform: {platform.description}, family {platform.family.name}")

    nvidia = facts["HostState"]
    warnings, errors = gpu_findings(nvidia, settings.require_gpu)
    errors += disk_findings(nvidia, settings.min_free_disk_mb)
    if settings.runs("toolkit") and settings.nvidia_toolkit_install:
        errors += toolkit_pin_findings(settings, platform)
    plan = None
    if settings.runs("driver") and settings.nvidia_driver_install:
        plan = plan_for_host(settings, platform, nvidia)
        if plan.headers:
            available = host.get_fact(PackagesAvailable, check=plan.manager.available_check,
                                     packages=list(plan.headers[:1]))
            warnings += headers_findings(plan, available)
    for warning in warnings:
        logger.warning(f"{host.print_prefix}{warning}")
    if errors:
        raise PreflightError("; ".join(errors))
    containerd = facts["ContainerdFlavour"]
    containerd["flavour"] = classify_flavour(containerd)
    recover_package_manager(settings, facts["PackageManagerState"])
    pending = facts["PendingRestarts"]
    for unit, path in sorted(pending.items()):
        logger.warning(f"{host.print_prefix}an earlier run installed {path} but was interrupted before "
                       f"{unit} restarted: restarting it")
    return Node(platform=platform, nvidia=nvidia, driver_plan=plan, containerd=containerd,
                pending_restarts=pending)


def recover_package_manager(settings: Settings, state: dict) -> None:
    """Busy or interrupted dpkg: wait for it (bounded) and finish it before the first change."""
    if not any(settings.runs(stage) for stage in ("driver", "toolkit", "runtimes")):
        return
    if not (state["held"] or state["interrupted"]):
        return
    for holder in state["held"]:
        logger.warning(f"{host.print_prefix}{holder['lock']} is held by process {holder['pid']} "
                       f"({holder['command']}): waiting up to {settings.apt_lock_timeout} s (apt_lock_timeout)")
    package_ops.recover_package_manager(
        name="Wait for other package managers and finish interrupted dpkg runs",
        lock_timeout=settings.apt_lock_timeout,
    )
