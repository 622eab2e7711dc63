"""The runtimes stage, containerd: installed when missing, and wired to the NVIDIA runtime."""

from __future__ import annotations

from functools import partial
from typing import Any

from pyinfra import host, logger

from ..distros.families import Family, Platform
from ..distros.package_managers import install_packages
from ..distros.repositories import add_repository
from ..facts.containerd import ContainerdInstallations, config_read
from ..facts.read_ahead import FactCall, known_fact, read
from ..foundations.pyinfra_api import deploy
from ..operations import drain as drain_ops
from ..operations import failure, units
from ..operations.containerd import plan_node_wiring, target_read
from ..operations.drain import DrainTarget
from ..operations.runtime_config import WiredRuntime, configure_nvidia_runtime
from ..planning.findings import StepCheck
from ..runtimes.cdi import CdiUnsupported, for_containerd
from ..runtimes.containerd.installations import classify_installation, config_target, plain_target
from ..runtimes.registry import CONTAINERD
from ..runtimes.wiring import runtime_wiring
from ..settings import Settings


def reads(settings: Settings) -> list[FactCall]:
    """
    The facts the runtimes stage decides on, for preflight to read ahead: which installation runs
    containerd, and a plain containerd's config, as the wiring reads it (the other installations'
    files, known only after preflight, are read by the operation).
    """
    return [(ContainerdInstallations, {}), target_read(plain_target(settings.containerd_config_path))]


def wired(settings: Settings) -> WiredRuntime:
    """containerd as this run wires it (preflight's reading, Findings.runtimes): who owns it (plain,
    k3s, rke2, k0s, microk8s: ContainerdInstallations and its "installation") and the read of the
    version of the containerd that installation runs."""
    found = known_fact(host, ContainerdInstallations)
    found = {**found, "installation": classify_installation(found)}
    target = config_target(settings.containerd_config_path, found)
    return WiredRuntime(CONTAINERD.name, config_read(target.path, target.base_path, target.binary), found)


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """What preflight checks for this stage (deploy/stages.py): cdi=true on an installed containerd
    without CDI is refused before any change (a containerd this run installs is checked by its plan)."""
    state = read(host, target_read(plain_target(settings.containerd_config_path)))
    try:
        for_containerd(runtime_wiring(settings), state["major"], state["minor"], state["version"])
    except CdiUnsupported as error:
        return StepCheck(errors=[str(error)])
    return StepCheck()


def install_containerd(settings: Settings, family: Family) -> None:
    """The distribution's containerd (Docker's containerd.io on the RHEL family), enabled and started."""
    manager = family.package_manager
    version = settings.containerd_version
    if version and not manager.can_pin:
        logger.warning(f"{host.print_prefix}{manager.name} cannot pin containerd_version: installing the current one")
        version = None
    if family.containerd_repo and family.containerd_repo_key is not None:  # (the table gives a repository its key)
        add_repository(
            manager,
            "Add Docker's repository for containerd.io",
            family.containerd_repo,
            family.containerd_repo_key,
            timeout=settings.download_timeout,
            lock_timeout=settings.apt_lock_timeout,
        )
    install_packages(
        manager, "Install containerd", {family.containerd_package: version}, lock_timeout=settings.apt_lock_timeout
    )
    units.enable_service(name="Enable and start containerd", service="containerd")


@deploy("containerd")
def containerd_runtime(
    settings: Settings,
    family: Family,
    containerd_found: dict[str, Any],
    drain: DrainTarget | None = None,
    pending_restarts: dict[str, Any] | None = None,
) -> None:
    installation = containerd_found["installation"]["name"]
    if installation == "plain" and not containerd_found.get("binary"):
        if not settings.containerd_install:
            failure.fail(
                name="Check that containerd is installed",
                message="containerd is not installed and containerd_install=false: install containerd, "
                "or set containerd_install=true to install the distribution's package",
            )
            return
        install_containerd(settings, family)
    elif installation != "plain":
        logger.info(f"{host.print_prefix}containerd belongs to {installation}: wiring its own config")

    target = config_target(settings.containerd_config_path, containerd_found)
    wiring = runtime_wiring(settings)
    restart_pending = bool(target.service and (pending_restarts or {}).get(target.service) == target.path)
    # Planned once: the operation applies this plan (and makes it again only if the host changed first).
    plan = plan_node_wiring(target, wiring)
    if plan.in_place() and not restart_pending:
        # No operation for what is in place: a fleet's no-op pays pyinfra's per-operation cost per node.
        return
    wired = configure_nvidia_runtime(
        name=f"Wire the nvidia runtime into {target.path}",
        make_plan=partial(plan_node_wiring, target, wiring),
        plan=plan,
        restart_timeout=settings.service_restart_timeout,
        restart_pending=restart_pending,
        before_restart=drain_ops.before_restart(drain),
        keep_backups=settings.runtime_config_backups,
    )
    drain_ops.watch(drain, wired)
