"""
Verify's check of the rack's parts (read-only): the host's IMEX domain, GPUDirect RDMA's nvidia-peermem
and its MIG layout, each a step of the node's report (deploy/verification/rack.py), for the hosts whose
settings ask for any of them.
"""

from __future__ import annotations

from pyinfra import host

from ..facts.nvidia import NodeSurvey
from ..facts.rack import ImexState, MigState, PeermemState
from ..facts.read_ahead import FactCall, known_fact
from ..foundations.pyinfra_api import deploy
from ..operations import rack
from ..operations.failure import HostRefusal, fail
from ..rack import peermem
from ..rack.imex import Member
from ..settings import Settings
from .imex import members_of


def verify_reads(settings: Settings) -> list[FactCall]:
    """What the check reads, for the run's one read ahead (NodeSurvey is preflight's own)."""
    calls: list[FactCall] = [(ImexState, {})] if settings.imex_domain else []
    calls += [(PeermemState, {})] if settings.gpudirect_rdma != "false" else []
    calls += [(MigState, {"layout": settings.mig_layout.name})] if settings.mig_layout else []
    return calls


@deploy("Verify the rack")
def verify_rack(settings: Settings) -> None:
    members: tuple[Member, ...] = ()
    if settings.imex_domain:
        try:
            members = members_of(settings)
        except HostRefusal as refusal:
            fail(name="Refuse this host (its IMEX domain)", message=str(refusal))
            return
    nvidia = known_fact(host, NodeSurvey)
    peermem_wanted = peermem.wants_peermem(
        settings.gpudirect_rdma, nvidia.get("mellanox") or [], nvidia.get("gpus") or []
    )
    rack.check_rack(
        name="Verify the rack's parts: IMEX domain, GPUDirect RDMA, MIG layout (read-only)",
        domain=settings.imex_domain,
        members=members,
        peermem_wanted=peermem_wanted,
        layout=settings.mig_layout,
    )
