"""
The DRA node stage (gpu_allocator=dra; deploy/k8s/dra.py decides): preflight refuses a node whose
host cannot serve the DRA driver (the driver's branch, CDI in containerd, the driver root, IMEX)
before any change (a node where a job holds an IMEX channel, unless drain_before_restart drains it
first); the run hands IMEX to the driver where dra_imex says; verify checks each
prerequisite, one step each of the node's report. A device-plugin node runs none of it.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host, logger

from ..distros.families import Platform
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..k8s.dra import imex_action, imex_in_use, node_prerequisites
from ..operations import dra as dra_ops
from ..operations import drain as drain_ops
from ..operations.containerd import target_read
from ..operations.drain import DrainTarget
from ..operations.verification import containerd_config_read, containerd_in_effect
from ..planning.findings import StepCheck
from ..rack.imex import IMEX_UNIT
from ..runtimes.containerd.installations import plain_target
from ..settings import Settings
from ..verification.options import VerifyOptions


def reads(settings: Settings) -> list[FactCall]:
    """What the stage decides on (NodeSurvey and the plain containerd's read are preflight's own)."""
    return [dra_ops.node_read(settings), target_read(plain_target(settings.containerd_config_path))]


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """Refuse, before any change, a node the DRA driver cannot serve; a prerequisite this run
    decides later (a containerd it installs) is checked by verify."""
    containerd = read(host, target_read(plain_target(settings.containerd_config_path)))
    found = node_prerequisites(
        settings,
        installed_driver=dra_ops.installed_driver(nvidia),
        cdi_on=dra_ops.containerd_cdi(settings, containerd),
        containerd_version=containerd["version"],
        node=read(host, dra_ops.node_read(settings)),
        after_run=False,
    )
    for prerequisite in found:
        logger.info(f"{host.print_prefix}dra {prerequisite.name}: {prerequisite.status}: {prerequisite.line}")
    return StepCheck(errors=[p.line for p in found if p.status == "fail"])


@deploy("DRA node")
def dra_node(settings: Settings, drain: DrainTarget | None = None) -> None:
    """Hand IMEX to the DRA driver where dra_imex says: where a job holds an IMEX channel, only after
    the drain ``drain`` (drain_before_restart) allows; preflight refused the node without one."""
    node = read(host, dra_ops.node_read(settings))
    if imex_action(settings.dra_compute_domains, settings.dra_imex, node["imex"]) == "mask":
        drain = drain if imex_in_use(node["imex"]) else None
        mask = dra_ops.mask_imex(
            name=f"Mask {IMEX_UNIT}: the DRA driver's ComputeDomain daemons own IMEX"
            + (" (the node drained first: an IMEX channel is in use)" if drain else ""),
            drain=drain,
        )
        drain_ops.watch(drain, mask)


def verify_reads(settings: Settings) -> list[FactCall]:
    return [dra_ops.node_read(settings)]


@deploy("Verify DRA")
def verify_dra(settings: Settings) -> None:
    containerd = containerd_in_effect(VerifyOptions.from_settings(settings))
    dra_ops.check_prerequisites(
        name="Verify the DRA prerequisites (read-only)",
        settings=settings,
        containerd_read=containerd_config_read(containerd),
    )
