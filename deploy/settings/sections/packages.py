"""The driver and toolkit section: what is installed, from which repositories, and how long it may wait."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, model_validator

from ...driver.nvidia_repositories import (
    NVIDIA_TOOLKIT_GPGKEY_URL,
    NVIDIA_TOOLKIT_KEY_FINGERPRINT,
    NVIDIA_TOOLKIT_REPO_URL,
)
from ..values import DriverBranch, Fingerprints, PackageVersion, RepositoryUrl
from .base import Section, check_repository_urls, given_values


class PackageSettings(Section):
    """Driver and toolkit"""

    nvidia_driver_install: bool = Field(True, description="install the NVIDIA driver")
    nvidia_driver_branch: DriverBranch | None = Field(
        None,
        description="driver branch, e.g. 580 (default: distro's). Pick a long term support branch NVIDIA still "
        "supports: R580 (to June 2028) or R620 (to September 2029); R595, a production branch, ends in "
        "March 2027; R535 ended in June 2026 (preflight and verify name a branch past its end of life: "
        "docs/datacenter.md, deploy/driver/branches.py)",
    )
    nvidia_driver_version: PackageVersion | None = Field(None, description="exact driver package version")
    cuda_toolkit_install: bool = Field(False, description="install the CUDA toolkit")
    nvidia_toolkit_install: bool = Field(True, description="install the NVIDIA container toolkit")
    nvidia_toolkit_version: PackageVersion | None = Field(
        None, description="exact version of all four toolkit packages"
    )
    nvidia_toolkit_repo_url: RepositoryUrl = Field(
        NVIDIA_TOOLKIT_REPO_URL, description="toolkit package repository (a mirror for air-gapped sites)"
    )
    nvidia_toolkit_gpgkey_url: RepositoryUrl = Field(
        NVIDIA_TOOLKIT_GPGKEY_URL, description="the key that signs that repository"
    )
    nvidia_toolkit_gpgkey_fingerprint: Fingerprints = Field(
        (NVIDIA_TOOLKIT_KEY_FINGERPRINT,),
        min_length=1,
        description="the fingerprint the toolkit repository's key must have before it is trusted (NVIDIA's "
        "by default; a mirror that signs with its own key: its fingerprint)",
    )
    allow_insecure_repositories: bool = Field(
        False, description="accept http:// repository and key URLs (local mirrors)"
    )
    download_timeout: int = Field(
        30,
        ge=1,
        le=600,
        description="seconds a repository, key server or release download (kubectl-inspect-gpushare) has to "
        "answer before the run fails",
    )
    apt_lock_timeout: int = Field(
        120,
        ge=0,
        le=3600,
        description="seconds to wait for another package manager process (apt/dpkg, dnf, zypper, pacman) to "
        "release its lock before the run fails naming it",
    )

    @model_validator(mode="after")
    def _toolkit_urls_fit(self, info: ValidationInfo) -> PackageSettings:
        if given_values(info) is not None:
            check_repository_urls(
                self, ("nvidia_toolkit_gpgkey_url",), ("nvidia_toolkit_repo_url", "nvidia_toolkit_gpgkey_url")
            )
        return self
