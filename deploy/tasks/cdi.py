"""
The runtimes stage, CDI: the Container Device Interface (deploy/operations/cdi.py): where CDI is on, the toolkit's
refresh units enabled and the spec generated once the driver answers; with cdi=false, the refresh
units gpu-node enabled turned off; the nvidia runtime's mode as nvidia_runtime_mode asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyinfra import host, logger

from ..distros.families import Platform
from ..facts.cdi import spec_stale
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..operations import cdi as cdi_ops
from ..operations.runtime_config import WiredRuntime
from ..planning.findings import StepCheck
from ..runtimes.cdi import RUNTIME_CONFIG
from ..runtimes.wiring import runtime_wiring
from ..settings import Settings


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead (the runtimes' reads are theirs)."""
    return [cdi_ops.state_read()]


def preflight_check(
    settings: Settings, platform: Platform, nvidia: dict[str, Any], runtimes: Sequence[WiredRuntime]
) -> StepCheck:
    """What preflight checks for this stage (deploy/stages.py): nvidia_runtime_mode=cdi where the
    installed ``runtimes`` (those wired) have CDI off, and a runtime config that cannot be edited, are
    refused before any change (runtimes this run installs are checked by the operation)."""
    if settings.nvidia_runtime_mode is None:
        return StepCheck()
    target = cdi_target(settings, runtimes)
    state = read(host, cdi_ops.state_read())
    problem = cdi_ops.runtime_mode_problem(target, state, cdi_decided=cdi_ops.runtime_versions_known(target))
    return StepCheck(errors=[problem] if problem else [])


def cdi_target(settings: Settings, runtimes: Sequence[WiredRuntime]) -> cdi_ops.CdiTarget:
    return cdi_ops.CdiTarget(
        cdi=settings.cdi,
        wiring=runtime_wiring(settings),
        driver_root=settings.nvidia_driver_root,
        runtimes=tuple(runtimes),
        runtime_mode=settings.nvidia_runtime_mode,
    )


@deploy("CDI")
def cdi(settings: Settings, runtimes: Sequence[WiredRuntime]) -> None:
    """``runtimes``: the runtimes this run wires (Findings.runtimes)."""
    target = cdi_target(settings, runtimes)
    state = read(host, cdi_ops.state_read())
    # No operation for what is in place (a fleet's no-op pays pyinfra's cost per operation); a node
    # whose toolkit or runtimes this run installs is decided by the operation when it runs.
    known = cdi_ops.runtime_versions_known(target)
    if not (known and cdi_ops.in_place(target, state)):
        cdi_ops.configure_cdi(name="Configure CDI (the spec and its refresh)", target=target)
    elif cdi_ops.cdi_on(target) and spec_stale(state):
        logger.warning(f"{host.print_prefix}cdi: {cdi_ops.no_spec_message(state)}")
    if target.runtime_mode is not None and not (known and cdi_ops.runtime_mode_in_place(target, state)):
        cdi_ops.configure_runtime_mode(name=f"Set the nvidia runtime's mode in {RUNTIME_CONFIG}", target=target)
