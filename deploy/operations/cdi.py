"""
The Container Device Interface on a node: whether it is on (the cdi setting and the wired runtimes'
versions, deploy/runtimes/cdi.py), the toolkit's refresh units, the spec nvidia-ctk generates, and the
nvidia runtime's own mode (nvidia_runtime_mode) in its config.toml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation

from ..facts.cdi import REFRESH_PATH_UNIT, CdiState, spec_stale
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import Commands
from ..foundations.toml_layout import ConfigError
from ..node import records as node_records
from ..runtimes import registry
from ..runtimes.cdi import RUNTIME_CONFIG, SPEC_PATH, runtime_mode_of, runtime_mode_refusal, with_runtime_mode
from ..runtimes.wiring import RuntimeWiring
from .failure import failing_command
from .files import put_text
from .runtime_config import WiredRuntime

# Where the toolkit's refresh service reads its settings (the driver root, for one).
REFRESH_ENV = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
HEADER = "# Managed by gpu-node (deploy/operations/cdi.py): the driver root the CDI refresh generates the spec for.\n"


def state_read() -> FactCall:
    """What the CDI operation reads (preflight reads it ahead with the same call)."""
    return (CdiState, {"spec": SPEC_PATH, "env": REFRESH_ENV, "runtime_config": RUNTIME_CONFIG})


@dataclass(frozen=True)
class CdiTarget:
    """What decides CDI on a node: the setting, the wiring, and the runtimes wired."""

    cdi: str  # auto, true, false
    wiring: RuntimeWiring
    driver_root: str
    runtimes: tuple[WiredRuntime, ...] = ()
    runtime_mode: str | None = None  # nvidia_runtime_mode; None: the runtime's config left alone


def runtime_versions_known(target: CdiTarget) -> bool:
    """Whether every wired runtime is installed (its version decides cdi=auto)."""
    versions = [read(host, wired.version_read) for wired in target.runtimes]  # each read, as the stage reads them
    return all(version["major"] is not None for version in versions)


def cdi_on(target: CdiTarget) -> bool:
    """Whether CDI is on: asked, or (auto) some wired runtime's version has it."""
    if target.cdi != "auto":
        return target.cdi == "true"
    return any(
        registry.runtime_named(wired.name).cdi(target.wiring, read(host, wired.version_read)).on
        for wired in target.runtimes
    )


def systemd_environment_value(value: str) -> str:
    """``value`` as systemd's EnvironmentFile reads it back: double-quoted, with the four characters
    systemd unescapes there escaped, where it holds anything but a plain path."""
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", value):
        return value
    return '"' + re.sub(r'(["\\`$])', r"\\\1", value) + '"'


def refresh_env_text(driver_root: str) -> str | None:
    if driver_root == "/":
        return None
    return f"{HEADER}NVIDIA_CTK_DRIVER_ROOT={systemd_environment_value(driver_root)}\n"


def in_place(target: CdiTarget, state: dict[str, Any]) -> bool:
    """Whether nothing is to do, from what the node holds (the operation decides the same way)."""
    if not cdi_on(target):
        return not (target.cdi == "false" and state["refresh_enabled"] == "enabled")
    refresh_on = state["refresh_enabled"] == "enabled" and state["refresh_active"] == "active"
    env = state["env"] if (state["env"] or "").startswith(HEADER) else None
    spec_done = not spec_stale(state) or not driver_answers(state)
    return (
        bool(state["ctk"])
        and spec_done
        and (not state["refresh_unit"] or (refresh_on and env == refresh_env_text(target.driver_root)))
    )


def driver_answers(state: dict[str, Any]) -> bool:
    """Whether nvidia-smi -L answered with GPUs (asked only for a missing or stale spec)."""
    return state["smi_exit_code"] == 0 and bool(state["smi_gpus"])


def no_spec_message(state: dict[str, Any]) -> str:
    return "no spec written: the driver does not answer with a GPU (nvidia-smi -L); " + (
        "the refresh unit writes it once it does" if state["refresh_unit"] else "run again once it does"
    )


def generate_command(ctk: str, driver_root: str) -> StringCommand:
    root = ["--driver-root", QuoteString(driver_root)] if driver_root != "/" else []
    return StringCommand(QuoteString(ctk), "cdi", "generate", "--output", QuoteString(SPEC_PATH), *root)


def _say(message: str) -> None:
    # The change detection before a confirmation runs this too: say it once, when executing.
    if host.state.is_executing:
        logger.warning(f"{host.print_prefix}cdi: {message}")


@operation()
def configure_cdi(target: CdiTarget) -> Commands:
    """
    CDI as the setting and the runtimes' versions say, decided from what the node holds when this
    runs (after the toolkit and the runtimes are installed): the refresh units enabled, pointed at the
    driver root, and the spec generated when it is missing or stale and the driver answers with GPUs;
    with cdi=false, the refresh units turned off.

    + target: the setting, the wiring and the wired runtimes (``CdiTarget``)
    """
    state = read(host, state_read())
    unit = QuoteString(REFRESH_PATH_UNIT)
    if not cdi_on(target):
        if target.cdi == "false" and state["refresh_enabled"] == "enabled":
            yield StringCommand(node_records.record_units([REFRESH_PATH_UNIT]))
            yield StringCommand("systemctl disable --now", unit)
        else:
            host.noop("CDI is off: no wired runtime of this node has it" if target.cdi == "auto" else "CDI is off")
        return
    if not state["ctk"]:
        _say("nvidia-ctk is not installed (the toolkit stage installs it): no spec")
        host.noop("no nvidia-ctk")
        return
    if state["refresh_unit"]:
        env_text = refresh_env_text(target.driver_root)
        ours = (state["env"] or "").startswith(HEADER)
        if env_text is not None and state["env"] != env_text:
            yield from put_text._inner(dest=REFRESH_ENV, content=env_text)
        elif env_text is None and ours:
            yield StringCommand("rm -f", QuoteString(REFRESH_ENV))
        if state["refresh_enabled"] != "enabled" or state["refresh_active"] != "active":
            # its state before recorded, for the undo run to put back
            yield StringCommand(node_records.record_units([REFRESH_PATH_UNIT]))
            yield StringCommand("systemctl enable --now", unit)
    if not spec_stale(state):
        return
    if driver_answers(state):
        yield generate_command(state["ctk"], target.driver_root)
    else:
        _say(no_spec_message(state))


def runtime_mode_problem(target: CdiTarget, state: dict[str, Any], cdi_decided: bool = True) -> str | None:
    """Why the runtime's mode cannot be set (one line), from what the node holds; None: it can.
    ``cdi_decided``: false while a wired runtime is not installed yet (CDI is decided by its version)."""
    if target.runtime_mode is None:
        return None
    try:
        runtime_mode_of(state["runtime_config"])
    except ConfigError as error:
        return str(error)
    if not cdi_decided and target.cdi == "auto":
        return None
    return runtime_mode_refusal(
        target.runtime_mode, cdi_on(target), target.cdi, [runtime.cdi_since for runtime in registry.RUNTIMES]
    )


def runtime_mode_in_place(target: CdiTarget, state: dict[str, Any]) -> bool:
    """Whether the runtime's config says the mode asked (or none is asked)."""
    if target.runtime_mode is None:
        return True
    try:
        return (
            state["runtime_config"] is not None
            and with_runtime_mode(state["runtime_config"], target.runtime_mode) == state["runtime_config"]
        )
    except ConfigError:
        return False


@operation()
def configure_runtime_mode(target: CdiTarget) -> Commands:
    """
    The nvidia runtime's mode in its config.toml as ``nvidia_runtime_mode`` asks, the file's
    comments and layout kept, decided from what the node holds when this runs (after the toolkit
    and the runtimes are installed); a file that cannot be edited safely is left byte for byte and
    the host fails with one line, as does cdi mode where CDI is off.

    + target: the setting, the wiring and the wired runtimes (``CdiTarget``)
    """
    state = read(host, state_read())
    problem = runtime_mode_problem(target, state)
    if problem is not None:
        yield failing_command(problem)
        return
    mode = target.runtime_mode
    if mode is None or runtime_mode_in_place(target, state):
        host.noop(f"{RUNTIME_CONFIG} has mode {mode}")
        return
    # The runtime reads its config at each container start: nothing to restart.
    yield from put_text._inner(
        dest=RUNTIME_CONFIG, content=with_runtime_mode(state["runtime_config"], mode), record_format=node_records.TOML
    )
