"""
The one table of per-distro-family facts: package names, repositories, commands.

Tasks look a host up here (``detect_platform``) instead of branching on distro names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pyinfra.api.exceptions import PyinfraError


class UnsupportedPlatform(PyinfraError):
    """The host's distro or architecture is not one this tool supports."""


@dataclass(frozen=True)
class Family:
    name: str
    # os-release IDs that belong to this family
    ids: tuple[str, ...]
    package_manager: str  # apt, dnf, zypper, pacman
    containerd_package: str
    docker_package: str | None
    initramfs_command: str
    # Repository of containerd.io when the distro ships no containerd (RHEL family).
    containerd_repo: Mapping[str, str] | None = None
    kernel_headers: str = ""  # package for the running kernel's headers, {kernel} = uname -r
    # Where NVIDIA's toolkit tree keeps this family's packages, under the repository base URL;
    # None: the distro ships the toolkit itself.
    toolkit_repo_path: str | None = None
    # Driver packages: filled in by the driver task's plan; keys documented there.
    driver: Mapping[str, Any] = field(default_factory=dict)


DOCKER_CE_RHEL_REPO = {
    "name": "docker-ce-stable",
    "baseurl": "https://download.docker.com/linux/centos/$releasever/$basearch/stable",
    "gpgkey": "https://download.docker.com/linux/centos/gpg",
}

FAMILIES: tuple[Family, ...] = (
    Family(
        name="debian",
        ids=("debian",),
        package_manager="apt",
        containerd_package="containerd",
        docker_package="docker.io",
        initramfs_command="update-initramfs -u",
        kernel_headers="linux-headers-{kernel}",
        toolkit_repo_path="deb/$(ARCH)",
    ),
    Family(
        name="ubuntu",
        ids=("ubuntu",),
        package_manager="apt",
        containerd_package="containerd",
        docker_package="docker.io",
        initramfs_command="update-initramfs -u",
        kernel_headers="linux-headers-{kernel}",
        toolkit_repo_path="deb/$(ARCH)",
    ),
    Family(
        name="rhel",
        ids=("rhel", "rocky", "almalinux", "centos", "ol"),
        package_manager="dnf",
        containerd_package="containerd.io",
        docker_package=None,
        initramfs_command="dracut -f",
        containerd_repo=DOCKER_CE_RHEL_REPO,
        kernel_headers="kernel-devel-{kernel}",
        toolkit_repo_path="rpm/$basearch",
    ),
    Family(
        name="fedora",
        ids=("fedora",),
        package_manager="dnf",
        containerd_package="containerd",
        docker_package="moby-engine",
        initramfs_command="dracut -f",
        kernel_headers="kernel-devel-{kernel}",
        toolkit_repo_path="rpm/$basearch",
    ),
    Family(
        name="amazon",
        ids=("amzn",),
        package_manager="dnf",
        containerd_package="containerd",
        docker_package="docker",
        initramfs_command="dracut -f",
        kernel_headers="kernel-devel-{kernel}",
        toolkit_repo_path="rpm/$basearch",
    ),
    Family(
        name="suse",
        ids=("opensuse-leap", "opensuse-tumbleweed", "opensuse", "sles", "sled", "sle-micro"),
        package_manager="zypper",
        containerd_package="containerd",
        docker_package="docker",
        initramfs_command="dracut -f",
        kernel_headers="kernel-default-devel",
        toolkit_repo_path="rpm/$basearch",
    ),
    Family(
        name="arch",
        ids=("arch", "archarm", "endeavouros", "manjaro"),
        package_manager="pacman",
        containerd_package="containerd",
        docker_package="docker",
        initramfs_command="mkinitcpio -P",
        kernel_headers="linux-headers",
        toolkit_repo_path=None,
    ),
)

# uname -m -> (Debian arch, NVIDIA's CUDA repository arch)
ARCHES = {
    "x86_64": ("amd64", "x86_64"),
    "amd64": ("amd64", "x86_64"),
    "aarch64": ("arm64", "sbsa"),
    "arm64": ("arm64", "sbsa"),
}


@dataclass(frozen=True)
class Platform:
    family: Family
    distro_id: str
    version_id: str
    major: int | None
    codename: str
    arch: str  # uname -m, normalised
    deb_arch: str
    cuda_arch: str

    @property
    def description(self) -> str:
        return f"{self.distro_id} {self.version_id or ''} ({self.arch})".replace("  ", " ")


def supported_summary() -> str:
    distros = ", ".join(f"{family.name} ({'/'.join(family.ids)})" for family in FAMILIES)
    return f"supported: {distros}; arches: x86_64, aarch64"


def family_for(distro_id: str, id_like: str = "") -> Family | None:
    for family in FAMILIES:
        if distro_id in family.ids:
            return family
    # Derivatives (e.g. Linux Mint, Pop!_OS) name their parent in ID_LIKE.
    for parent in id_like.split():
        for family in FAMILIES:
            if parent in family.ids:
                return family
    return None


def detect_platform(linux_distribution: Mapping[str, Any], arch: str | None) -> Platform:
    """Map pyinfra's ``server.LinuxDistribution`` and ``server.Arch`` facts to a Platform."""
    meta = linux_distribution.get("release_meta") or {}
    distro_id = str(meta.get("ID") or linux_distribution.get("name") or "").strip().lower()
    family = family_for(distro_id, str(meta.get("ID_LIKE") or "").lower())
    if family is None:
        shown = distro_id or "an unknown distribution"
        raise UnsupportedPlatform(f"unsupported distribution {shown!r}: {supported_summary()}")
    machine = (arch or "").strip().lower()
    if machine not in ARCHES:
        raise UnsupportedPlatform(
            f"unsupported architecture {machine or 'unknown'!r} on {distro_id}: {supported_summary()}"
        )
    deb_arch, cuda_arch = ARCHES[machine]
    return Platform(
        family=family,
        distro_id=distro_id,
        version_id=str(meta.get("VERSION_ID") or ""),
        major=linux_distribution.get("major"),
        codename=str(meta.get("VERSION_CODENAME") or meta.get("UBUNTU_CODENAME") or ""),
        arch="aarch64" if machine in ("aarch64", "arm64") else "x86_64",
        deb_arch=deb_arch,
        cuda_arch=cuda_arch,
    )
