"""
Docker's wiring planned from the node: daemon.json and the unit that starts dockerd, read in one
fact, wired by the engine (``deploy/runtimes/docker/``), held to what dockerd will run with its
unit's flags, and checked by dockerd itself (``dockerd --validate``, Docker 23+) or, for an older
dockerd, by the engine's schema. The generic operation (``runtime_config.py``) applies the plan.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial
from typing import Any

from pyinfra import host, logger
from pyinfra.api.command import PyinfraCommand

from ..facts.docker import DockerState
from ..facts.read_ahead import FactCall, changes_so_far, read
from ..foundations.toml_layout import ConfigError
from ..node import bake
from ..runtimes.cdi import CdiUnsupported, for_docker
from ..runtimes.docker.daemon_json import (
    DockerEngine,
    DockerRunning,
    check_schema,
    default_runtime_problem,
    flag_conflicts,
    leave_to_flags,
)
from ..runtimes.docker.unit import DockerdFlag, UnitParseError, parse_docker_unit
from ..runtimes.wiring import RuntimeWiring
from . import safe_install
from .failure import failing_command
from .runtime_config import PlannedFile, RuntimeConfigPlan

ENGINE = DockerEngine()
# What Go's strconv.ParseBool reads as true: how dockerd reads --live-restore=VALUE.
GO_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


def state_read(path: str, service: str = "docker") -> FactCall:
    """What the wiring reads of Docker (the stage reads it ahead, and checks the install, with the same call)."""
    return (DockerState, {"path": path, "service": service})


def plan_docker_wiring(
    path: str, wiring: RuntimeWiring, service: str = "docker", restart_pending: bool = False
) -> RuntimeConfigPlan:
    """Read the node (the fact preflight read ahead) and plan daemon.json's wiring; nothing runs.
    ``restart_pending``: an interrupted run left dockerd's restart due (it restarts even unchanged)."""
    plan = RuntimeConfigPlan(
        ENGINE.file_format, service, [], f"{path} already wires the nvidia runtime", changes_so_far(host)
    )
    plan.refusal = _plan(plan, read(host, state_read(path, service)), path, wiring, service, restart_pending)
    return plan


def live_restore(config: dict[str, Any], flags: list[DockerdFlag]) -> bool:
    """Whether dockerd keeps its containers running through its own restart: the unit's
    --live-restore flag, else daemon.json's key (dockerd refuses both at once); off by default."""
    given = [flag for flag in flags if flag.name == "live-restore"]
    if given:
        return given[-1].value in GO_TRUE
    return config.get("live-restore") is True


def _plan(
    plan: RuntimeConfigPlan,
    state: dict[str, Any],
    path: str,
    wiring: RuntimeWiring,
    service: str,
    restart_pending: bool = False,
) -> str:
    """Fill ``plan`` in; the refusal, in one line, where daemon.json cannot or must not be wired."""
    if not state["dockerd"]:
        return (
            "docker is in container_runtimes but dockerd is not installed: install Docker Engine, "
            "or set docker_install=true to install the distribution's Docker package"
        )
    current = state["config"]
    try:
        wiring = for_docker(wiring, state["major"], state["version"]).wiring
    except CdiUnsupported as error:
        return str(error)
    try:
        existing = ENGINE.parse(current, path) if current is not None else {}
        wired = ENGINE.wire(existing, wiring, path)
        command_line = parse_docker_unit(state["unit"] or "", state["environment_files"])
    except (ConfigError, UnitParseError) as error:
        message = str(error)
        return message if message.startswith("/") else f"{path}: {message}"
    if state["unit"] and not command_line.runs_dockerd:
        host.log_styled(
            f"{service}.service: ExecStart (in {command_line.exec_start_file}) does not run dockerd "
            "directly: its flags are not checked against daemon.json",
            fg="yellow",
        )
    flags = command_line.flags
    config_files = [flag for flag in flags if flag.name == "config-file" and flag.value != path]
    if config_files:
        return (
            f"dockerd reads {config_files[-1].value}, not {path}: {config_files[-1].describe()}; "
            f"set docker_daemon_config_path={config_files[-1].value}"
        )
    conflicts = flag_conflicts(existing, flags, path)
    if conflicts:
        return (
            "; ".join(conflicts) + ": dockerd refuses to start when a directive is given both as a flag and "
            f"in daemon.json; remove it from {path} or from the unit, then run again"
        )
    config = leave_to_flags(wired.document, existing, flags)
    for flag in flags:
        if (
            flag.name == "add-runtime"
            and flag.value.startswith("nvidia=")
            and flag.value.partition("=")[2] != wiring.binary
        ):
            host.log_styled(
                f"{flag.describe()} is overridden by {path} runtimes.nvidia: dockerd takes the "
                "file's definition of a runtime both name",
                fg="yellow",
            )
    flag_runtimes = [flag.value.partition("=")[0] for flag in flags if flag.name == "add-runtime"]
    problems = list(ENGINE.effective(DockerRunning(config, flags, path), wiring).problems)
    default_problem = default_runtime_problem(config, state["major"], flag_runtimes)
    problems += [default_problem] if default_problem else []
    if problems:
        return f"{path}: " + "; ".join(problems)

    changed = current is None or config != existing
    plan.files = [PlannedFile(path, current, ENGINE.render(config) if changed else current, changed, wired.notes)]
    running = state["containers"]
    # Said once, where the operator sees it first: before the confirmation in pyinfra's default mode
    # (its change detection makes this plan, execution makes it again), when executing with -y.
    first_plan = not (host.state.is_executing and host.state.check_for_changes)
    if (
        first_plan
        and (changed or restart_pending)
        and running
        and not live_restore(config, flags)
        and not bake.is_image_root(host.connector)
    ):
        logger.warning(
            f"{host.print_prefix}{path}: live-restore is off and {running} container{'s' if running > 1 else ''} "
            f"run: the dockerd restart that wires the nvidia runtime stops them all; to keep them running, set "
            f'"live-restore": true there and run `systemctl reload {service}` before this run, or drain the node '
            "first (drain_before_restart=true)"
        )
    if state["can_validate"]:
        plan.validator = safe_install.Validator(
            argv=[state["dockerd"], "--validate", "--config-file", "{candidate}"],
            what="dockerd --validate",
        )
    else:
        # dockerd older than 23.0: strict parse of what will be written, plus the schema checks.
        plan.check = partial(_check_schema, docker_major=state["major"], flag_runtimes=flag_runtimes)
    return ""


def _check_schema(
    plan: RuntimeConfigPlan, docker_major: int | None, flag_runtimes: list[str]
) -> Generator[str | PyinfraCommand, Any, bool]:
    path = plan.path
    try:
        check_schema(ENGINE.parse(plan.files[0].text, path), path, docker_major, flag_runtimes)
    except ConfigError as error:
        yield failing_command(str(error))
        return False
    return True
