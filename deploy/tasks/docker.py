"""The runtimes stage, Docker: its daemon.json wired to the NVIDIA runtime."""

from __future__ import annotations

from functools import partial
from typing import Any

from pyinfra import host

from ..distros.families import Family, Platform
from ..distros.package_managers import install_packages
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..operations import docker, failure, units
from ..operations import drain as drain_ops
from ..operations.drain import DrainTarget
from ..operations.runtime_config import WiredRuntime, configure_nvidia_runtime
from ..planning.findings import StepCheck
from ..runtimes.cdi import CdiUnsupported, for_docker
from ..runtimes.registry import DOCKER
from ..runtimes.wiring import runtime_wiring
from ..settings import Settings


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead: the same call the wiring makes."""
    return [docker.state_read(settings.docker_daemon_config_path)]


def wired(settings: Settings) -> WiredRuntime:
    """Docker as this run wires it: the read of its version (and its daemon.json's state)."""
    return WiredRuntime(DOCKER.name, docker.state_read(settings.docker_daemon_config_path))


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """What preflight checks for this stage (deploy/stages.py): cdi=true on an installed Docker
    without CDI is refused before any change."""
    state = read(host, docker.state_read(settings.docker_daemon_config_path))
    try:
        for_docker(runtime_wiring(settings), state["major"], state["version"])
    except CdiUnsupported as error:
        return StepCheck(errors=[str(error)])
    return StepCheck()


@deploy("Docker")
def docker_runtime(
    settings: Settings, family: Family, drain: DrainTarget | None = None, pending_restarts: dict[str, Any] | None = None
) -> None:
    # Installing Docker Engine is the site's business; docker_install=true takes the distribution's
    # own package (Debian/Ubuntu docker.io, Fedora moby-engine, ...), never Docker's repository.
    installed = read(host, docker.state_read(settings.docker_daemon_config_path))["dockerd"]
    if not installed:
        if not settings.docker_install:
            failure.fail(
                name="Check that Docker is installed",
                message="docker is in container_runtimes but Docker is not installed: install Docker "
                "Engine, or set docker_install=true to install the distribution's package"
                + (f" ({family.docker_package})" if family.docker_package else ""),
            )
            return
        if not family.docker_package:
            failure.fail(
                name="Check that Docker can be installed",
                message=f"docker_install=true, but {family.name} ships no Docker package: "
                "install Docker Engine (docker-ce) from Docker's repository first",
            )
            return
        install_packages(
            family.package_manager, "Install Docker", [family.docker_package], lock_timeout=settings.apt_lock_timeout
        )
        units.enable_service(name="Enable and start Docker", service="docker")

    path = settings.docker_daemon_config_path
    restart_pending = (pending_restarts or {}).get("docker") == path
    wired = configure_nvidia_runtime(
        name=f"Wire the nvidia runtime into {path}",
        # Planned as the operation runs: its warnings (live-restore's too) show in the operation's place.
        make_plan=partial(docker.plan_docker_wiring, path, runtime_wiring(settings), restart_pending=restart_pending),
        restart_timeout=settings.service_restart_timeout,
        restart_pending=restart_pending,
        before_restart=drain_ops.before_restart(drain),
        keep_backups=settings.runtime_config_backups,
    )
    drain_ops.watch(drain, wired)
