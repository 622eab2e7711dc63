"""Preflight (read-only, before every run): what the node is, and whether it is safe to go on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyinfra import host, logger
from pyinfra.facts.server import Arch, LinuxDistribution

from ..distros.families import Platform, detect_platform
from ..facts.access import HostAccess
from ..facts.nvidia import NodeSurvey
from ..facts.read_ahead import FactCall, read_facts
from ..facts.recovery import PackageManagerState, PendingRestarts
from ..foundations.pyinfra_api import deploy
from ..operations import packages as package_ops
from ..operations.failure import HostRefusal
from ..planning.findings import Findings, PreflightStep
from ..settings import Settings, likely_typos, setting_source

DISK_MOUNTS = ("/", "/var")


class PreflightError(HostRefusal):
    """The node is not safe to change: raised before any change."""


def gpu_findings(
    nvidia: dict[str, Any], require_gpu: bool, module_signing: str = "auto"
) -> tuple[list[str], list[str]]:
    """(warnings, errors) about the GPUs, Secure Boot and the modules holding them."""
    warnings, errors = [], []
    if not nvidia["gpus"]:
        message = "no NVIDIA GPU on the PCI bus (vendor 0x10de, display class)"
        if require_gpu:
            errors.append(message + ": require_gpu=true")
        else:
            warnings.append(message + ": the node is prepared, but has no GPU to offer")
    if nvidia["secure_boot"] and module_signing == "false":
        # otherwise the driver stage signs the modules (module_signing, deploy/planning/module_signing.py)
        warnings.append(
            "Secure Boot is enabled and module_signing=false: an unsigned NVIDIA kernel module will not load. "
            "Set module_signing=auto for the driver stage to sign it and stage its key's enrollment "
            "(mokutil --import), or disable Secure Boot in the firmware"
        )
    for module in ("nouveau", "nova_core"):
        if module in nvidia["modules"]:
            warnings.append(
                f"{module} is loaded and holds the GPU: the NVIDIA module can load only after a reboot "
                "with the blacklist the kernel stage writes"
            )
    return warnings, errors


def disk_findings(nvidia: dict[str, Any], min_free_mb: int) -> list[str]:
    errors = []
    for mount in DISK_MOUNTS:
        free = nvidia["free_mb"].get(mount)
        if free is not None and free < min_free_mb:
            errors.append(
                f"only {free} MiB free on {mount}, less than min_free_disk_mb={min_free_mb}: "
                "free some space (the driver and its DKMS build need it) or lower the setting"
            )
    return errors


def access_refusal(access: dict[str, Any], image_root: bool = False) -> str | None:
    """Why gpu-node cannot work on this node at all (not Linux, not root, no systemd), in one line;
    an image root (a bake) has no running systemd: its units are enabled, not started."""
    if access["kernel"] != "Linux":
        return f"not a Linux host (uname -s: {access['kernel'] or 'nothing'}): gpu-node provisions Linux GPU nodes"
    if access["uid"] != 0:
        return (
            f"commands run as {access['user'] or 'an unknown user'} (uid {access['uid']}), not as root: "
            "gpu-node installs packages and edits /etc; run pyinfra with --sudo (passwordless sudo, or "
            "--use-sudo-password), or connect as root"
        )
    if not access["systemd"] and not image_root:
        return (
            f"systemd is not running as PID 1 (PID 1 is {access['init'] or 'unknown'}): gpu-node enables "
            "and restarts services through systemd; run it on a host booted with systemd"
        )
    return None


def package_manager_refusal(access: dict[str, Any], platform: Platform) -> str | None:
    manager = platform.family.package_manager.name
    if manager in access["managers"]:
        return None
    return (
        f"{platform.distro_id} installs packages with {manager}, which is not installed here: "
        "install it, or check /etc/os-release"
    )


def step_reads(settings: Settings, steps: Sequence[PreflightStep]) -> list[FactCall]:
    return [call for step in steps for call in step.reads(settings)]


def read_ahead(settings: Settings, steps: Sequence[PreflightStep]) -> None:
    """What ``steps`` read, in one remote command, for a run without preflight (deploy/verify.py)."""
    read_facts(host, read_ahead=step_reads(settings, steps))


@deploy("Preflight")
def preflight(settings: Settings, steps: Sequence[PreflightStep], image_root: bool = False) -> Findings:
    """Read the node once, refuse it before any change when it is unsupported or unsafe, and make
    each step's plan (``steps``: the run's steps, deploy/stages.py; ``image_root``: a bake)."""
    for note in likely_typos(
        host.data.dict(), command_line=host.inventory.get_override_data(), source=lambda key: setting_source(host, key)
    ):
        logger.warning(f"{host.print_prefix}{note}")
    # One remote command for what every node run needs first (re-runs from cron pay per command),
    # and for the facts the steps decide on (their ``reads``, see deploy/facts/read_ahead.py).
    facts = read_facts(
        host,
        HostAccess,
        LinuxDistribution,
        Arch,
        NodeSurvey,
        PackageManagerState,
        PendingRestarts,
        read_ahead=step_reads(settings, steps),
    )
    refusal = access_refusal(facts["HostAccess"], image_root)
    if refusal:
        raise PreflightError(refusal)
    platform = detect_platform(facts["LinuxDistribution"], facts["Arch"])
    refusal = package_manager_refusal(facts["HostAccess"], platform)
    if refusal:
        raise PreflightError(refusal)
    logger.info(f"{host.print_prefix}platform: {platform.description}, family {platform.family.name}")

    nvidia = facts["NodeSurvey"]
    warnings, errors = gpu_findings(nvidia, settings.require_gpu, settings.module_signing)
    errors += disk_findings(nvidia, settings.min_free_disk_mb)
    plans = {}
    for step in steps:
        if step.check is not None:
            check = step.check(settings, platform, nvidia)
            errors += check.errors
            warnings += check.warnings
            if check.plan is not None:
                plans[step.name] = check.plan
    for warning in warnings:
        logger.warning(f"{host.print_prefix}{warning}")
    if errors:
        raise PreflightError("; ".join(errors))
    if any(step.installs for step in steps):
        recover_package_manager(settings, facts["PackageManagerState"])
    pending = facts["PendingRestarts"]
    for unit, path in sorted(pending.items()):
        logger.warning(
            f"{host.print_prefix}an earlier run installed {path} but was interrupted before "
            f"{unit} restarted: restarting it"
        )
    runtimes = {wired.name: wired for wired in (step.wired(settings) for step in steps if step.wired is not None)}
    return Findings(platform=platform, nvidia=nvidia, runtimes=runtimes, pending_restarts=pending, plans=plans)


def recover_package_manager(settings: Settings, state: dict[str, Any]) -> None:
    """Busy or interrupted dpkg: wait for it (bounded) and finish it before the first change."""
    if not (state["held"] or state["interrupted"]):
        return
    for holder in state["held"]:
        logger.warning(
            f"{host.print_prefix}{holder['lock']} is held by process {holder['pid']} "
            f"({holder['command']}): waiting up to {settings.apt_lock_timeout} s (apt_lock_timeout)"
        )
    package_ops.recover_package_manager(
        name="Wait for other package managers and finish interrupted dpkg runs",
        lock_timeout=settings.apt_lock_timeout,
    )
