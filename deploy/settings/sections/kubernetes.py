"""
The Kubernetes section (deploy/k8s_gpu.py, on the control plane): kubectl's config, the device plugin
and how pods share a GPU.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from ..errors import SettingsError, shown
from ..values import AbsolutePath, ImageReference, NodeNames, ReleaseTag
from .base import Section, given_values


class KubernetesSettings(Section):
    """
    Kubernetes (deploy/k8s_gpu.py, control plane)

    `gpu_sharing_replicas` only with `gpu_sharing=time-slicing` or `mps`; the `time_slicing_*`
    settings only with `time-slicing` (MPS and time-slicing are exclusive); `mig_strategy` stays
    `none` with `mps`.
    """

    kubeconfig: AbsolutePath | None = Field(
        None,
        description="the kubeconfig kubectl and helm use on the control-plane host; unset: kubectl's own there, "
        "as kubectl reads it (the KUBECONFIG variable of the commands pyinfra runs there, a list of "
        "files merged, else ~/.kube/config), else kubeadm's /etc/kubernetes/admin.conf",
    )
    kube_node_names: NodeNames = Field((), description="inventory host name -> Kubernetes node name, where they differ")
    device_plugin_version: ReleaseTag = Field(
        "v0.17.0", description="NVIDIA device plugin release (image tag and chart version)"
    )
    device_plugin_install_method: Literal["static", "helm"] = Field(
        "static", description="static manifests, or the helm chart"
    )
    gpu_sharing: Literal["none", "time-slicing", "mps", "gpushare"] = Field("none", description="how pods share a GPU")
    gpu_sharing_replicas: int = Field(4, ge=2, le=1024, description="time-slicing / MPS replicas per GPU")
    time_slicing_rename_by_default: bool = Field(
        False, description="advertise nvidia.com/gpu.shared instead of nvidia.com/gpu"
    )
    time_slicing_fail_requests_greater_than_one: bool = Field(
        False, description="reject pods asking for more than one shared GPU"
    )
    mig_strategy: Literal["none", "single", "mixed"] = Field("none", description="MIG strategy")
    nvidia_driver_root: AbsolutePath = Field(
        "/",
        description="where the NVIDIA driver lives on GPU nodes, for the device plugin (`nvidiaDriverRoot`; "
        "another root is mounted read-only at `/driver-root`, as NVIDIA's chart does), e.g. "
        "`/run/nvidia/driver` with a driver container",
    )
    smoke_test: bool = Field(True, description="run the vector-add pod after deploying")
    smoke_test_image: ImageReference = Field(
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", description="the smoke test pod's image"
    )
    smoke_test_timeout: int = Field(300, ge=10, le=3600, description="seconds to wait for the smoke pod")

    @model_validator(mode="after")
    def _sharing_options_fit(self, info: ValidationInfo) -> KubernetesSettings:
        """The option named is the one that does not fit."""
        data = given_values(info)
        if data is None:
            return self
        sharing = self.gpu_sharing
        if "gpu_sharing_replicas" in data and sharing not in ("time-slicing", "mps"):
            raise SettingsError(
                f"invalid setting gpu_sharing_replicas={shown(data['gpu_sharing_replicas'])}: "
                f"allowed only with gpu_sharing=time-slicing or mps (gpu_sharing is {sharing!r})"
            )
        for key in ("time_slicing_rename_by_default", "time_slicing_fail_requests_greater_than_one"):
            if getattr(self, key) and sharing != "time-slicing":
                raise SettingsError(
                    f"invalid setting {key}={shown(data.get(key, True))}: allowed only with "
                    f"gpu_sharing=time-slicing (gpu_sharing is {sharing!r}; MPS and time-slicing are exclusive)"
                )
        if sharing == "mps" and self.mig_strategy != "none":
            raise SettingsError(
                f"invalid setting mig_strategy={shown(self.mig_strategy)}: allowed: none with "
                "gpu_sharing=mps (the NVIDIA device plugin does not share MIG devices through MPS)"
            )
        return self
