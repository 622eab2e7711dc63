"""
The data-center GPUs section (docs/datacenter.md): the kernel module type, persistence, the first-boot
unit, Fabric Manager, NVIDIA's driver and CUDA repositories.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import Field, ValidationInfo, model_validator

from ...driver.nvidia_repositories import NVIDIA_CUDA_KEY_FINGERPRINTS, NVIDIA_CUDA_REPO_URL, NVIDIA_DRIVER_REPO_URL
from ..values import Fingerprints, KernelModules, RepositoryUrl
from .base import Section, check_repository_urls, given_values


class _RepositoryReads(Protocol):
    """What the repository rule reads beyond this section: the packages section's switch."""

    allow_insecure_repositories: bool


class DataCenterSettings(Section):
    """Data-center GPUs (docs/datacenter.md)"""

    nvidia_kernel_modules: KernelModules = Field(
        "auto",
        description="the driver's kernel module type (open or proprietary); auto: from the node's GPUs and the driver branch",
    )
    nvidia_persistenced: bool = Field(
        True, description="install and enable nvidia-persistenced (started where a GPU is present)"
    )
    first_boot_unit: bool = Field(
        True,
        description="with every run that makes a GPU node (the driver or runtimes stage, the toolkit stage where it "
        "installs the toolkit; a bake too), install and enable gpu-node-boot.service: at every boot, before "
        "gpu-node-ready.target, the GPUs' kernel module checked and loaded, the CDI spec regenerated, "
        "persistenced and Fabric Manager started, the node verified (docs/without-controller.md)",
    )
    fabric_manager_install: bool = Field(
        True,
        description="install NVIDIA Fabric Manager at the driver's version on NVSwitch nodes (with ib_umad and "
        "NVLSM on NVLink5 nodes); nodes without NVSwitch get none of it",
    )
    nvidia_driver_repo_url: RepositoryUrl = Field(
        NVIDIA_DRIVER_REPO_URL,
        description="NVIDIA's driver repository for SUSE (`.../opensuse/leap/<version>`, `.../suse/sle<N>sp<M>`; "
        "a mirror keeps that layout)",
    )
    nvidia_cuda_repo_url: RepositoryUrl = Field(
        NVIDIA_CUDA_REPO_URL,
        description="NVIDIA's CUDA repository: Fabric Manager, and the RHEL family's driver and CUDA toolkit "
        "(a mirror keeps its {dist}/{arch} layout)",
    )
    nvidia_cuda_gpgkey_url: RepositoryUrl | None = Field(
        None,
        description="the CUDA repository's key; unset: beside each repository, as NVIDIA publishes it "
        "(`3bf863cc.pub` on apt, `D42D0685.pub` on dnf and zypper)",
    )
    nvidia_cuda_gpgkey_fingerprint: Fingerprints = Field(
        NVIDIA_CUDA_KEY_FINGERPRINTS,
        min_length=1,
        description="the fingerprints the CUDA repository's key may have before it is trusted (NVIDIA's 3bf863cc "
        "and D42D0685 by default; a mirror that signs with its own key: its fingerprint)",
    )
    nvidia_driver_gpgkey_url: RepositoryUrl | None = Field(
        None, description="the SUSE driver repository's key; unset: `repodata/repomd.xml.key` beside it"
    )
    nvidia_driver_gpgkey_fingerprint: Fingerprints = Field(
        (),
        description="the fingerprint the SUSE driver repository's key must have before it is trusted: required "
        "where the driver stage adds that repository, because NVIDIA publishes no fingerprint for it "
        "(check the key yourself, e.g. `gpg --show-keys` of the key file)",
    )

    @model_validator(mode="after")
    def _repository_urls_fit(self: _RepositoryReads, info: ValidationInfo) -> _RepositoryReads:
        if given_values(info) is not None:
            check_repository_urls(
                self,
                ("nvidia_cuda_gpgkey_url", "nvidia_driver_gpgkey_url"),
                ("nvidia_driver_repo_url", "nvidia_cuda_repo_url"),
            )
        return self
