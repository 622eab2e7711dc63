"""The gpushare section (gpu_sharing=gpushare): Aliyun's scheduler extender, its device plugin and inspect tool."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field, ValidationInfo, model_validator

from ..errors import SettingsError
from ..values import AbsolutePath, ImageReference, Sha256, UrlOrFile
from .base import Section, given_values


class _SharingReads(Protocol):
    """What the gpushare rule reads: the Kubernetes section's sharing, the runtimes section's default."""

    gpu_sharing: str
    nvidia_runtime_default: bool


class GpushareSettings(Section):
    """
    gpushare (gpu_sharing=gpushare)

    gpushare needs `nvidia_runtime_default=true`: its device plugin drops a pod's
    runtimeClassName, so its pods need nvidia as the default runtime.
    """

    gpushare_memory_unit: Literal["GiB", "MiB"] = Field("GiB", description="gpushare memory unit")
    gpushare_extender_image: ImageReference = Field(
        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a",
        description="gpushare scheduler extender image",
    )
    gpushare_device_plugin_image: ImageReference = Field(
        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23",
        description="gpushare device plugin image",
    )
    gpushare_scheduler_config_path: AbsolutePath = Field(
        "/etc/kubernetes/gpushare/scheduler-config.yaml",
        description="the KubeSchedulerConfiguration file kube-scheduler loads (--config)",
    )
    gpushare_scheduler_ready_timeout: int = Field(
        180, ge=10, le=1800, description="seconds the edited kube-scheduler has to come back before rollback"
    )
    gpushare_inspect_install: bool = Field(
        True, description="install the kubectl-inspect-gpushare plugin on the control plane"
    )
    gpushare_inspect_source: UrlOrFile = Field(
        "https://github.com/AliyunContainerService/gpushare-device-plugin/releases/download/v0.3.0/"
        "kubectl-inspect-gpushare",
        description="where kubectl-inspect-gpushare comes from: a URL, or a file on the controller",
    )
    gpushare_inspect_sha256: Sha256 | None = Field(
        None, description="the SHA-256 kubectl-inspect-gpushare must have (required)"
    )
    gpushare_inspect_path: AbsolutePath = Field(
        "/usr/local/bin/kubectl-inspect-gpushare", description="where the plugin is installed"
    )

    @model_validator(mode="after")
    def _nvidia_is_the_default_runtime(self: _SharingReads, info: ValidationInfo) -> _SharingReads:
        if given_values(info) is not None and self.gpu_sharing == "gpushare" and not self.nvidia_runtime_default:
            # The gpushare device plugin (v0.3.0) updates each pod it serves with a client too old to
            # know runtimeClassName: the API server rejects that update and the pod runs without a GPU.
            # Its pods therefore cannot use the RuntimeClass: nvidia must be the default runtime.
            raise SettingsError(
                "invalid setting nvidia_runtime_default=false: allowed only true with gpu_sharing=gpushare "
                "(the gpushare device plugin drops a pod's runtimeClassName, so its pods need nvidia as the "
                "default runtime)"
            )
        return self
