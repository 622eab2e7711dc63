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

# Driver plans per family, read by deploy/tasks/driver.py (templates: {branch} {kernel}
# {flavour} {dist} {arch} {version_id} {major} {minor} {pkgbase}):
#   packages / branch_packages: the driver, without / with nvidia_driver_branch: installed,
#     pinned to nvidia_driver_version and held
#   dependencies / branch_dependencies: installed and held too (pinned unless pin_dependencies
#     is False): the kernel module package, so it cannot move away from the userspace
#   extra_packages: installed, never pinned or held (firmware, EPEL)
#   branch: "optional", "required" (set or detected), "unsupported"
#   branch_detect: regex over installed package names and recommend_command's output
#   components: apt components enabled for the release's Debian entries
#   repository: NVIDIA's repository (name, baseurl, gpgkey); repo_dist: its release directory
#   module: dnf module stream for releases in module_majors (packages then module_packages)
#   headers: header package candidates, first one found wins; flavour_pattern over uname -r
#   hold_list / hold_command: how holds are read and set where deploy/operations/packages.py
#   has no operation for that package manager (pacman)
#   kernel_modules / dkms_package / dkms_headers: Arch's module package per installed kernel
#   pin: False where the package manager cannot install an older version from its repository
#   cuda_packages / cuda_home / cuda_repository
DEBIAN_KERNEL_FLAVOUR = r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-(.+)$"
CUDA_REPO = {
    "name": "cuda-{dist}-{arch}",
    "baseurl": "https://developer.download.nvidia.com/compute/cuda/repos/{dist}/{arch}",
    "gpgkey": "https://developer.download.nvidia.com/compute/cuda/repos/{dist}/{arch}/D42D0685.pub",
}
RPM_DRIVER = {
    "repository": CUDA_REPO,
    "module": {"name": "nvidia-driver", "stream": "{branch}-dkms", "default_branch": "latest"},
    "module_packages": ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms"),
    "packages": ("cuda-drivers",),
    "branch_packages": ("cuda-drivers-{branch}",),
    "headers": ("kernel-devel-{kernel}", "kernel-devel"),
    "cuda_packages": ("cuda-toolkit",),
    "cuda_home": "/usr/local/cuda",
}
DEBIAN_DRIVER = {
    "components": ("contrib", "non-free", "non-free-firmware"),
    "packages": ("nvidia-driver", "nvidia-smi"),
    "branch_packages": ("nvidia-tesla-{branch}-driver", "nvidia-tesla-{branch}-smi"),
    "dependencies": ("nvidia-kernel-dkms",),
    "branch_dependencies": ("nvidia-tesla-{branch}-kernel-dkms",),
    "extra_packages": ("firmware-misc-nonfree",),
    "headers": ("linux-headers-{kernel}", "linux-headers-{flavour}"),
    "flavour_pattern": DEBIAN_KERNEL_FLAVOUR,
    "default_flavour": "{deb_arch}",
    "cuda_packages": ("nvidia-cuda-toolkit",),
    "cuda_home": "/usr/lib/nvidia-cuda-toolkit",
}
UBUNTU_DRIVER = {
    "branch": "required",
    "branch_detect": r"nvidia-(?:headless|driver|utils)-([0-9]{3})(?:-server)?(?:-open)?\b",
    "recommend_command": "ubuntu-drivers list --gpgpu",
    "packages": ("nvidia-headless-{branch}-server", "nvidia-utils-{branch}-server"),
    "branch_packages": ("nvidia-headless-{branch}-server", "nvidia-utils-{branch}-server"),
    "dependencies": ("nvidia-dkms-{branch}-server",),
    "headers": ("linux-headers-{kernel}", "linux-headers-{flavour}"),
    "flavour_pattern": DEBIAN_KERNEL_FLAVOUR,
    "default_flavour": "generic",
    "cuda_packages": ("nvidia-cuda-toolkit",),
    "cuda_home": "/usr/lib/nvidia-cuda-toolkit",
}
SUSE_DRIVER = {
    "branch": "unsupported",  # G06 is one branch line; pin with nvidia_driver_version
    "repository": {
        "name": "nvidia-{distro_id}",
        "baseurl": "https://download.nvidia.com/opensuse/leap/{version_id}",
        "gpgkey": "https://download.nvidia.com/opensuse/leap/{version_id}/repodata/repomd.xml.key",
    },
    "repository_by_id": {
        "opensuse-tumbleweed": "https://download.nvidia.com/opensuse/tumbleweed",
        "sles": "https://download.nvidia.com/suse/sle{major}sp{minor}",
    },
    "packages": ("nvidia-compute-utils-G06", "nvidia-compute-G06"),
    "dependencies": ("nvidia-driver-G06-kmp-{flavour}",),
    "pin_dependencies": False,  # the KMP's version carries the kernel's
    "flavour_pattern": r"-([a-z0-9]+)$",
    "default_flavour": "default",
    "headers": (),  # KMP packages carry modules built for the flavour
    "cuda_repository": CUDA_REPO,
    "repo_dist": "{suse_dist}",
    "cuda_packages": ("cuda-toolkit",),
    "cuda_home": "/usr/local/cuda",
}
ARCH_DRIVER = {
    "branch": "unsupported",  # Arch ships one branch
    "pin": False,
    "packages": ("nvidia-utils",),
    "kernel_modules": {"linux": "nvidia", "linux-lts": "nvidia-lts"},
    "dkms_package": "nvidia-dkms",
    "dkms_headers": "{pkgbase}-headers",
    "headers": (),
    # pacman reads every IgnorePkg line of [options]
    "hold_list": "sed -n 's/^[[:space:]]*IgnorePkg[[:space:]]*=//p' /etc/pacman.conf",
    "hold_command": "sed -i '/^\\[options\\]/a IgnorePkg = {packages}' /etc/pacman.conf",
    "cuda_packages": ("cuda",),
    "cuda_home": "/opt/cuda",
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
        driver=DEBIAN_DRIVER,
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
        driver=UBUNTU_DRIVER,
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
        driver={**RPM_DRIVER, "repo_dist": "rhel{major}", "module_majors": (8, 9), "extra_packages": ("epel-release",)},
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
        driver={**RPM_DRIVER, "repo_dist": "fedora{major}"},
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
        driver={**RPM_DRIVER, "repo_dist": "amzn{major}"},
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
        driver=SUSE_DRIVER,
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
        driver=ARCH_DRIVER,
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
