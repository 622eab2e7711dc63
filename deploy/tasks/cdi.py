"""
The runtimes stage, CDI: the Container Device Interface (deploy/operations/cdi.py): where CDI is on, the toolkit's
refresh units enabled and the spec generated once the driver answers; with cdi=false, the refresh
units gpu-node enabled turned off; the nvidia runtime's mode as nvidia_runtime_mode asks.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from ..runtimes.cdi import RUNTIME_CONFIG
from ..runtimes.containerd.installations import classify_installation, config_target
from ..distros.families import Platform
from ..facts.cdi import spec_stale
from ..facts.read_ahead import FactCall, known_fact, read
from ..facts.containerd import ContainerdInstallations
from ..operations import cdi as cdi_ops
from ..settings import Settings
from ..runtimes.wiring import runtime_wiring
from ..planning.findings import StepCheck


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead (the runtimes' reads are theirs)."""
    return [cdi_ops.state_read()]


def preflight_check(settings: Settings, platform: Platform, nvidia: dict) -> StepCheck:
    """What preflight checks for this stage (deploy/stages.py): nvidia_runtime_mode=cdi where the
    installed runtimes have CDI off, and a runtime config that cannot be edited, are refused before
    any change (runtimes this run installs are checked by the operation)."""
    if settings.nvidia_runtime_mode is None:
        return StepCheck()
    found = known_fact(host, ContainerdInstallations) if settings.wires("containerd") else None
    target = cdi_target(settings, {**found, "installation": classify_installation(found)} if found is not None else None)
    state = read(host, cdi_ops.state_read())
    problem = cdi_ops.runtime_mode_problem(target, state, cdi_decided=cdi_ops.runtime_versions_known(target))
    return StepCheck(errors=[problem] if problem else [])


def cdi_target(settings: Settings, containerd_found: dict | None) -> cdi_ops.CdiTarget:
    containerd = None
    if settings.wires("containerd") and containerd_found is not None:
        containerd = config_target(settings.containerd_config_path, containerd_found)
    return cdi_ops.CdiTarget(
        cdi=settings.cdi, wiring=runtime_wiring(settings), driver_root=settings.nvidia_driver_root,
        containerd=containerd, docker_config=settings.docker_daemon_config_path if settings.wires("docker") else None,
        runtime_mode=settings.nvidia_runtime_mode,
    )


@deploy("CDI")
def cdi(settings: Settings, containerd_found: dict | None):
    target = cdi_target(settings, containerd_found)
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
