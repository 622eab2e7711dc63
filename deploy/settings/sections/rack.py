"""
The rack section (docs/datacenter.md): multi-node NVLink domains (IMEX), GPUDirect RDMA's
nvidia-peermem, MIG layouts applied at every boot.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field, ValidationInfo, model_validator

from ..errors import SettingsError, shown
from ..values import Cdi, DomainName, IpAddress, MigLayout
from .base import Section, given_values


class _ImexReads(Protocol):
    """What the IMEX rule reads beyond this section: the DRA driver's ComputeDomains (DRA)."""

    imex_domain: str | None
    gpu_allocator: str
    dra_compute_domains: bool
    dra_imex: str


class RackSettings(Section):
    """
    The rack: NVLink domains, GPUDirect RDMA, MIG at boot (docs/datacenter.md)

    Per host or per node group: a host's `imex_domain` (in its host data, or in
    `group_data/<group>.py` of an inventory group per NVLink domain) makes it a member of that IMEX
    domain, whose members are the inventory's hosts with the same value; `mig_layout` in a node
    group's data gives its nodes one MIG layout, applied at every boot.
    """

    imex_domain: DomainName | None = Field(
        None,
        description="the multi-node NVLink domain (e.g. a GB200/GB300 NVL72 rack) this host is a member of: NVIDIA "
        "IMEX installed and held at the driver's version, its nodes_config.cfg listing every host of the "
        "inventory with the same imex_domain; unset: no IMEX (a DRA group's IMEX is dra_imex's)",
    )
    imex_address: IpAddress | None = Field(
        None,
        description="the address this host's IMEX peers reach it at (its line in nodes_config.cfg); unset: the "
        "inventory's SSH host, where that is an IP address",
    )
    imex_channels: Literal["module-option", "device-node"] = Field(
        "module-option",
        description="how the IMEX channel CUDA's fabric memory needs is made: module-option sets the driver's "
        "NVreg_CreateImexChannel0=1 (channel0 created as the module loads); device-node creates "
        "/dev/nvidia-caps-imex-channels/channel0 at every boot from a unit (gpu-node-imex-channel.service)",
    )
    gpudirect_rdma: Cdi = Field(
        "false",
        description="GPUDirect RDMA through nvidia-peermem, loaded after the node's RDMA stack (inbox or DOCA-OFED) "
        "by a module soft dependency; auto: where the node has an NVIDIA GPU and a ConnectX RDMA NIC; "
        "false: DMA-BUF (NVIDIA's recommendation, no module) or none",
    )
    mig_layout: MigLayout | None = Field(
        None,
        description="the MIG layout NVIDIA's nvidia-mig-manager.service applies at every boot (its package "
        "installed): a name and each GPU's profiles, set per node group; a change is applied by the run "
        'where nothing but the driver\'s services holds the GPU, else the run says "drain required"',
    )
    mig_manager_package: DomainName = Field(
        "nvidia-mig-manager",
        description="the package of NVIDIA's mig-parted service, from the node's repositories (NVIDIA publishes it "
        "with mig-parted's releases; a site's mirror carries it)",
    )

    @model_validator(mode="after")
    def _imex_owner_fits(self: _ImexReads, info: ValidationInfo) -> _ImexReads:
        """A host's own IMEX domain and the DRA driver's ComputeDomain daemons cannot both own IMEX."""
        if given_values(info) is None or self.imex_domain is None:
            return self
        if self.gpu_allocator == "dra" and self.dra_compute_domains and self.dra_imex == "driver-managed":
            raise SettingsError(
                f"invalid setting imex_domain={shown(self.imex_domain)}: allowed only with "
                "dra_imex=host-managed on a DRA node group with dra_compute_domains (driver-managed: "
                "the DRA driver's ComputeDomain daemons own IMEX, and the run masks the host's)"
            )
        return self
