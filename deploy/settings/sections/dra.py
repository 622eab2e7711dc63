"""The Dynamic Resource Allocation section (gpu_allocator=dra; docs/cluster.md)."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field, ValidationInfo, model_validator

from ..errors import SettingsError, shown
from ..values import BatchSizes, ReleaseTag
from .base import Section, given_values


class _AllocatorReads(Protocol):
    """What the DRA rule reads beyond this section: how pods share GPUs (Kubernetes), CDI and the
    runtimes (runtimes)."""

    gpu_allocator: str
    dra_compute_domains: bool
    dra_driver_install_method: str
    gpu_sharing: str
    mig_strategy: str
    cdi: str
    container_runtimes: tuple[str, ...]


class DraSettings(Section):
    """
    Dynamic Resource Allocation (gpu_allocator=dra; docs/cluster.md)

    Per node group: a group's `gpu_allocator` says whether its nodes' GPUs go to pods through
    NVIDIA's device plugin or through the DRA driver for NVIDIA GPUs (Kubernetes 1.34 or newer). A
    DRA node needs CDI on in containerd, a driver of branch 565 or newer (570.158.01 with
    ComputeDomains) and no gpushare or MIG strategy of the device plugin's.
    """

    gpu_allocator: Literal["device-plugin", "dra"] = Field(
        "device-plugin",
        description="how this node's GPUs reach pods: NVIDIA's device plugin (`nvidia.com/gpu`), or the DRA driver "
        "for NVIDIA GPUs (ResourceClaims of the DeviceClass `gpu-node.nvidia.com`); set it per node group",
    )
    dra_driver_version: ReleaseTag = Field(
        "v0.5.0", description="the DRA driver for NVIDIA GPUs' release (image tag; its chart's version without the v)"
    )
    dra_driver_install_method: Literal["static", "helm"] = Field(
        "static",
        description="the DRA driver as gpu-node's own manifests (its GPU kubelet plugin), or its Helm chart "
        "(needed for ComputeDomains: their controller and custom resources come with the chart)",
    )
    dra_compute_domains: bool = Field(
        False,
        description="ComputeDomains (multi-node NVLink, e.g. GB200 NVL72): the chart's ComputeDomain part, a driver "
        "of 570.158.01 or newer, and IMEX handed over as `dra_imex` says",
    )
    dra_imex: Literal["driver-managed", "host-managed"] = Field(
        "driver-managed",
        description="with dra_compute_domains, who runs IMEX on nodes that have `nvidia-imex.service`: "
        "driver-managed masks and stops the host's unit so the driver's ComputeDomain daemons own IMEX; "
        "host-managed leaves it running for the driver's alpha host-managed mode",
    )
    allocator_move_batches: BatchSizes = Field(
        "1",
        description="how many GPU nodes deploy/k8s_gpu.py moves between the device plugin and DRA at a time (the "
        "control plane's setting), as gpu-node-rollout's --batches: successive sizes, counts or "
        "percentages of the nodes that move, the last repeating (1,5,25%); the first batch is the "
        "canary, and a failed step stops the move there",
    )

    @model_validator(mode="after")
    def _dra_node_fits(self: _AllocatorReads, info: ValidationInfo) -> _AllocatorReads:
        """What a DRA node group cannot combine with: the option named is the one that does not fit."""
        if given_values(info) is None or self.gpu_allocator != "dra":
            return self
        if self.gpu_sharing == "gpushare":
            raise SettingsError(
                "invalid setting gpu_sharing='gpushare': allowed only with gpu_allocator=device-plugin "
                "(gpushare brings its own device plugin; a DRA node shares GPUs through its claims)"
            )
        if self.mig_strategy != "none":
            raise SettingsError(
                f"invalid setting mig_strategy={shown(self.mig_strategy)}: allowed: none with "
                "gpu_allocator=dra (the device plugin's MIG strategy; the DRA driver has its own MIG "
                "devices)"
            )
        if self.cdi == "false":
            raise SettingsError(
                "invalid setting cdi='false': allowed: auto or true with gpu_allocator=dra (the DRA "
                "driver hands GPUs to containers through CDI in containerd)"
            )
        if "containerd" not in self.container_runtimes:
            raise SettingsError(
                f"invalid setting container_runtimes={shown(','.join(self.container_runtimes))}: "
                "allowed: a list with containerd with gpu_allocator=dra (the kubelet's runtime, whose "
                "CDI the DRA driver needs)"
            )
        if self.dra_compute_domains and self.dra_driver_install_method != "helm":
            raise SettingsError(
                "invalid setting dra_driver_install_method='static': allowed: helm with "
                "dra_compute_domains=true (the ComputeDomain controller and its custom resources come "
                "with the driver's chart)"
            )
        return self
