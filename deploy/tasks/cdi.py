"""
Stage 5c: the Container Device Interface (deploy/operations/cdi.py): where CDI is on, the toolkit's
refresh units enabled and the spec generated once the driver answers; with cdi=false, the refresh
units gpu-node enabled turned off.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from deploy.containerd.flavours import config_target
from deploy.facts.cdi import spec_stale
from deploy.facts.combined import FactCall, read
from deploy.operations import cdi as cdi_ops
from deploy.settings import Settings


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead (the runtimes' reads are theirs)."""
    return [cdi_ops.state_read()]


def cdi_target(settings: Settings, containerd_found: dict | None) -> cdi_ops.CdiTarget:
    containerd = None
    if settings.wires("containerd") and containerd_found is not None:
        containerd = config_target(settings.containerd_config_path, containerd_found)
    return cdi_ops.CdiTarget(
        cdi=settings.cdi, wiring=settings.runtime_wiring, driver_root=settings.nvidia_driver_root,
        containerd=containerd, docker_config=settings.docker_daemon_config_path if settings.wires("docker") else None,
    )


@deploy("CDI")
def cdi(settings: Settings, containerd_found: dict | None):
    target = cdi_target(settings, containerd_found)
    state = read(host, cdi_ops.state_read())
    # No operation for what is in place (a fleet's no-op pays pyinfra's cost per operation); a node
    # whose toolkit or runtimes this run installs is decided by the operation when it runs.
    if cdi_ops.runtime_versions_known(target) and cdi_ops.in_place(target, state):
        if cdi_ops.cdi_on(target) and spec_stale(state):
            logger.warning(f"{host.print_prefix}cdi: {cdi_ops.no_spec_message(state)}")
        return
    cdi_ops.configure_cdi(name="Configure CDI (the spec and its refresh)", target=target)
