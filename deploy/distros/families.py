"""
The one table of per-distro-family facts: each family's package manager, package names,
repositories and commands (``FAMILIES``), and the host's platform looked up in it
(``detect_platform``). Tasks look a host up here instead of branching on distro names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..operations.failure import HostRefusal
from .package_managers import APT, DNF, PACMAN, ZYPPER, PackageManager
from .repositories import KeyPin
from .signing import ARCH_SIGNING, SUSE_SIGNING, UBUNTU_SIGNING, ModuleSigning


class UnsupportedPlatform(HostRefusal):
    """The host's distro or architecture is not one this tool supports."""


# What a node's own names (os-release's ID, VERSION_ID and codename, its kernel's release and package
# base) may hold where gpu-node names packages, repositories and URLs after them. Those names reach
# package managers' files as well as shells, so anything else is refused, not quoted.
NODE_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]*")


def node_word(value: str, what: str) -> str:
    """``value``, read from the node as ``what``, or UnsupportedPlatform in one line."""
    if value and not NODE_WORD.fullmatch(value):
        raise UnsupportedPlatform(
            f"{what} is {value!r}: gpu-node names packages and repositories after it, "
            "and takes only letters, digits and . _ + ~ - there"
        )
    return value


def by_distro_id(choices: tuple[tuple[str, Any], ...], distro_id: str) -> Any:
    """The value of the first (os-release ID prefix, value) pair whose prefix starts ``distro_id``."""
    return next((value for prefix, value in choices if distro_id.startswith(prefix)), None)


@dataclass(frozen=True)
class DriverCompanion:
    """NVIDIA's packages that come from its CUDA repository at the driver's exact version and are held
    with it (Fabric Manager, IMEX); templates as DriverPackages's."""

    packages: tuple[str, ...]
    # NVIDIA drops the branch from the names from branch ``renamed_from`` on
    renamed_packages: tuple[str, ...] = ()
    renamed_from: int = 580
    service: str = "nvidia-fabricmanager"
    what: str = "Fabric Manager"  # in the plan's refusals
    # the CUDA repository's signing key, beside its packages
    key_file: str = "3bf863cc.pub"

    def names(self, branch: int) -> tuple[str, ...]:
        return self.renamed_packages if self.renamed_packages and branch >= self.renamed_from else self.packages


@dataclass(frozen=True)
class FabricManagerPackages(DriverCompanion):
    """NVIDIA Fabric Manager for NVSwitch nodes (with NVLSM on NVLink5 nodes)."""

    nvlsm_packages: tuple[str, ...] = ("nvlsm",)  # NVLink5 nodes' subnet manager


@dataclass(frozen=True)
class ImexPackages(DriverCompanion):
    """NVIDIA IMEX for the hosts of a multi-node NVLink domain (imex_domain): packaged from branch
    ``first_branch`` on, as NVIDIA's driver container installs it."""

    service: str = "nvidia-imex"
    what: str = "IMEX"
    first_branch: int = 550


@dataclass(frozen=True)
class DriverPackages:
    """
    How a family installs the NVIDIA driver, read by deploy/tasks/driver.py. Templates may name
    {branch} {kernel} {kernel_variant} {dist} {arch} {deb_arch} {distro_id} {version_id} {major} {minor};
    a template naming {branch} drops out when no branch is set.
    """

    # The driver, without / with nvidia_driver_branch: installed, pinned to nvidia_driver_version, held.
    packages: tuple[str, ...]
    branch_packages: tuple[str, ...] | None = None  # None: ``packages``
    # Installed and held too (pinned unless pin_dependencies is False): the kernel module package,
    # so it cannot move away from the userspace.
    dependencies: tuple[str, ...] = ()
    branch_dependencies: tuple[str, ...] | None = None  # None: ``dependencies``
    pin_dependencies: bool = True
    extra_packages: tuple[str, ...] = ()  # installed, never pinned or held (firmware, EPEL)
    # nvidia_driver_branch: "optional", "required" (set, or detected by branch_detect over the
    # installed package names and recommend_command's output), "unsupported"
    branch: str = "optional"
    branch_detect: str | None = None
    recommend_command: str | None = None
    components: tuple[str, ...] = ()  # apt components enabled for the release's Debian entries
    # NVIDIA's repository (name, baseurl, gpgkey: its key's URL, which may name {baseurl}; key: the
    # settings that pin that key, key_pin), by os-release ID prefix
    repositories: tuple[tuple[str, Mapping[str, str]], ...] = ()
    # {dist} of the repository templates, by os-release ID prefix
    repo_dist: tuple[tuple[str, str], ...] = ()
    # dnf module (name, stream template, branch when none is set), enabled on releases in
    # module_majors: module_packages are then installed instead of packages
    module: tuple[str, str, str] | None = None
    module_majors: tuple[int, ...] = ()
    module_packages: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()  # header package candidates, the first one found wins
    # {kernel_variant}, the kernel's build (Debian's cloud-amd64, SUSE's default): group 1 of
    # kernel_variant_pattern over uname -r, else default_kernel_variant
    kernel_variant_pattern: str | None = None
    default_kernel_variant: str = ""
    # Arch: a prebuilt module package per stock kernel package base, else DKMS and each kernel's headers
    kernel_modules: Mapping[str, str] | None = None
    dkms_package: str = ""
    dkms_headers: str = ""
    cuda_packages: tuple[str, ...] = ()
    cuda_home: str = ""
    cuda_repository: Mapping[str, str] | None = None
    # nvidia_kernel_modules=open: these fields of this record replace the proprietary ones
    # (None: the family packages no open kernel modules); open_with_branch: they exist for a branch
    open_modules: Mapping[str, Any] | None = None
    open_with_branch: bool = True
    # apt: the driver's source packages, pinned in apt preferences at the plan's version so that
    # every package of the driver (dependencies too) comes at that one version
    pin_sources: tuple[str, ...] = ()
    # nvidia_persistenced: its package (None: one of the driver's packages carries it) and unit
    persistenced_package: str | None = None
    # it comes from the driver's own source (NVIDIA's RPM repositories, Ubuntu): pinned and held with
    # the driver; Debian builds it apart, at its own version
    persistenced_with_driver: bool = False
    persistenced_service: str = "nvidia-persistenced"
    fabric_manager: FabricManagerPackages | None = None
    imex: ImexPackages | None = None
    # (pattern over an installed kernel metapackage's name, template of its headers metapackage from
    # group 1): that headers metapackage is kept installed and held with it, so that DKMS finds the
    # headers of each kernel an update brings (deploy/driver/kernel_coverage.py); None: the family has none
    headers_following: tuple[str, str] | None = None

    def for_module_type(self, kernel_module_type: str) -> DriverPackages:
        """This record for the ``kernel_module_type`` (open or proprietary)."""
        if kernel_module_type != "open" or self.open_modules is None:
            return self
        return replace(self, **self.open_modules)


@dataclass(frozen=True)
class Family:
    name: str
    # os-release IDs that belong to this family
    ids: tuple[str, ...]
    package_manager: PackageManager
    containerd_package: str
    docker_package: str | None
    initramfs_command: str
    driver: DriverPackages
    # Repository of containerd.io when the distro ships no containerd (RHEL family).
    containerd_repo: Mapping[str, str] | None = None
    containerd_repo_key: KeyPin | None = None  # what that repository's key must be
    # Where NVIDIA's toolkit tree keeps this family's packages, under the repository base URL;
    # None: the distro ships the toolkit itself.
    toolkit_repo_path: str | None = None
    module_signing: ModuleSigning = ModuleSigning()


DOCKER_CE_RHEL_REPO = {
    "name": "docker-ce-stable",
    "baseurl": "https://download.docker.com/linux/centos/$releasever/$basearch/stable",
    "gpgkey": "https://download.docker.com/linux/centos/gpg",
}
# Docker's key for its RPM repositories, as Docker's install guide gives it
# (https://docs.docker.com/engine/install/centos/); no setting names Docker's repository, so none pins it.
DOCKER_CE_RHEL_KEY = KeyPin(
    fingerprints=("060A61C51B558A7F742B77AAC52FEB6B621E9F35",),
    setting="Docker's install guide, deploy/distros/families.py",
)

DEBIAN_KERNEL_VARIANT = r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-(.+)$"
# SUSE: the word after the package release (5.14.21-150500.55.39-default, 6.4.0-150600.23.7-azure,
# Tumbleweed's 6.11.8-1-default); a release of another shape keeps the table's default
SUSE_KERNEL_VARIANT = r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9][0-9.]*-([a-z][a-z0-9]*)$"
# linux-image-amd64, -cloud-amd64, -generic, -generic-hwe-24.04 ...: not a release's own package
# (linux-image-6.1.0-56-amd64), nor a debug, unsigned or signing-template one
KERNEL_METAPACKAGE_HEADERS = (
    r"linux-image-((?![0-9])(?!unsigned-)(?!.*-(?:dbg|unsigned|signed-template)$)[a-z0-9.+-]+)",
    "linux-headers-{}",
)
CUDA_REPO = {
    "name": "cuda-{dist}-{arch}",
    "baseurl": "{cuda_repo_url}/{dist}/{arch}",
    "gpgkey": "{cuda_repo_url}/{dist}/{arch}/D42D0685.pub",
    "key": "nvidia_cuda",  # the settings that pin its key (key_pin)
}
APT_FABRIC_MANAGER = FabricManagerPackages(
    packages=("nvidia-fabricmanager-{branch}", "libnvidia-nscq-{branch}"),
    renamed_packages=("nvidia-fabricmanager", "libnvidia-nscq"),
)
RPM_FABRIC_MANAGER = FabricManagerPackages(
    packages=("nvidia-fabric-manager", "libnvidia-nscq"),
    key_file="D42D0685.pub",
)
APT_IMEX = ImexPackages(packages=("nvidia-imex-{branch}",), renamed_packages=("nvidia-imex",))
RPM_IMEX = ImexPackages(packages=("nvidia-imex-{branch}",), renamed_packages=("nvidia-imex",), key_file="D42D0685.pub")
RPM_DRIVER: dict[str, Any] = dict(
    repositories=(("", CUDA_REPO),),
    module=("nvidia-driver", "{branch}-dkms", "latest-dkms"),
    module_packages=("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms"),
    packages=("cuda-drivers",),
    branch_packages=("cuda-drivers-{branch}",),
    headers=("kernel-devel-{kernel}", "kernel-devel"),
    cuda_packages=("cuda-toolkit",),
    cuda_home="/usr/local/cuda",
    # NVIDIA's open module streams (<branch>-open, open-dkms) and packages
    open_modules={
        "module": ("nvidia-driver", "{branch}-open", "open-dkms"),
        "module_packages": ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms"),
        "packages": ("nvidia-open",),
        "branch_packages": ("nvidia-open-{branch}",),
    },
    persistenced_package="nvidia-persistenced",
    persistenced_with_driver=True,
    fabric_manager=RPM_FABRIC_MANAGER,
    imex=RPM_IMEX,
)
DEBIAN_DRIVER = DriverPackages(
    components=("contrib", "non-free", "non-free-firmware"),
    packages=("nvidia-driver", "nvidia-smi"),
    branch_packages=("nvidia-tesla-{branch}-driver", "nvidia-tesla-{branch}-smi"),
    dependencies=("nvidia-kernel-dkms",),
    branch_dependencies=("nvidia-tesla-{branch}-kernel-dkms",),
    extra_packages=("firmware-misc-nonfree",),
    headers=("linux-headers-{kernel}", "linux-headers-{kernel_variant}"),
    kernel_variant_pattern=DEBIAN_KERNEL_VARIANT,
    default_kernel_variant="{deb_arch}",
    cuda_packages=("nvidia-cuda-toolkit",),
    cuda_home="/usr/lib/nvidia-cuda-toolkit",
    # contrib's open module (no nvidia-tesla-<branch>-open-kernel-dkms in bookworm or trixie)
    open_modules={"dependencies": ("nvidia-open-kernel-dkms",)},
    open_with_branch=False,
    pin_sources=(
        "src:nvidia-graphics-drivers",
        "src:nvidia-graphics-drivers-tesla-{branch}",
        "src:nvidia-open-gpu-kernel-modules",
    ),
    persistenced_package="nvidia-persistenced",
    repo_dist=(("", "debian{major}"),),
    fabric_manager=APT_FABRIC_MANAGER,
    imex=APT_IMEX,
    headers_following=KERNEL_METAPACKAGE_HEADERS,
)
UBUNTU_DRIVER = DriverPackages(
    branch="required",
    # ubuntu-drivers list --gpgpu names nvidia-headless-no-dkms-<branch>-server and its nvidia-dkms-*
    branch_detect=r"nvidia-(?:headless(?:-no-dkms)?|driver|utils|dkms)-([0-9]{3})(?:-server)?(?:-open)?\b",
    recommend_command="ubuntu-drivers list --gpgpu",
    packages=("nvidia-headless-{branch}-server", "nvidia-utils-{branch}-server"),
    dependencies=("nvidia-dkms-{branch}-server",),
    headers=("linux-headers-{kernel}", "linux-headers-{kernel_variant}"),
    kernel_variant_pattern=DEBIAN_KERNEL_VARIANT,
    default_kernel_variant="generic",
    cuda_packages=("nvidia-cuda-toolkit",),
    cuda_home="/usr/lib/nvidia-cuda-toolkit",
    open_modules={
        "packages": ("nvidia-headless-{branch}-server-open", "nvidia-utils-{branch}-server"),
        "dependencies": ("nvidia-dkms-{branch}-server-open",),
    },
    persistenced_package="nvidia-compute-utils-{branch}-server",
    persistenced_with_driver=True,
    # Ubuntu's driver packages depend on each other at exact versions: an older pin installs only
    # with an apt preference holding the whole source package there.
    pin_sources=("src:nvidia-graphics-drivers-{branch}-server",),
    repo_dist=(("", "ubuntu{version_nodot}"),),
    fabric_manager=APT_FABRIC_MANAGER,
    imex=APT_IMEX,
    headers_following=KERNEL_METAPACKAGE_HEADERS,
)
SUSE_DRIVER_GPGKEY = "{baseurl}/repodata/repomd.xml.key"
SUSE_DRIVER = DriverPackages(
    branch="unsupported",  # G06 is one branch line; pin with nvidia_driver_version
    repositories=(
        (
            "opensuse-tumbleweed",
            {
                "name": "nvidia-{distro_id}",
                "gpgkey": SUSE_DRIVER_GPGKEY,
                "key": "nvidia_driver",
                "baseurl": "{driver_repo_url}/opensuse/tumbleweed",
            },
        ),
        (
            "sle",
            {
                "name": "nvidia-{distro_id}",
                "gpgkey": SUSE_DRIVER_GPGKEY,
                "key": "nvidia_driver",
                "baseurl": "{driver_repo_url}/suse/sle{major}sp{minor}",
            },
        ),
        (
            "",
            {
                "name": "nvidia-{distro_id}",
                "gpgkey": SUSE_DRIVER_GPGKEY,
                "key": "nvidia_driver",
                "baseurl": "{driver_repo_url}/opensuse/leap/{version_id}",
            },
        ),
    ),
    packages=("nvidia-compute-utils-G06", "nvidia-compute-G06"),
    # pinned at the driver's version (its own carries the kernel's too: VERSION_kKERNEL, which
    # zypper_install matches)
    dependencies=("nvidia-driver-G06-kmp-{kernel_variant}",),
    kernel_variant_pattern=SUSE_KERNEL_VARIANT,
    default_kernel_variant="default",
    headers=(),  # KMP packages carry modules built for the kernel variant
    open_modules={"dependencies": ("nvidia-open-driver-G06-signed-kmp-{kernel_variant}",)},
    fabric_manager=RPM_FABRIC_MANAGER,
    imex=RPM_IMEX,
    cuda_repository=CUDA_REPO,
    repo_dist=(("sle", "sles{major}"), ("", "opensuse{major}")),
    cuda_packages=("cuda-toolkit",),
    cuda_home="/usr/local/cuda",
)
ARCH_DRIVER = DriverPackages(
    branch="unsupported",  # Arch ships one branch
    packages=("nvidia-utils",),
    kernel_modules={"linux": "nvidia", "linux-lts": "nvidia-lts"},
    dkms_package="nvidia-dkms",
    dkms_headers="{pkgbase}-headers",
    open_modules={
        "kernel_modules": {"linux": "nvidia-open", "linux-lts": "nvidia-open-lts"},
        "dkms_package": "nvidia-open-dkms",
    },
    headers=(),
    cuda_packages=("cuda",),
    cuda_home="/opt/cuda",
)


FAMILIES: tuple[Family, ...] = (
    Family(
        name="debian",
        ids=("debian",),
        package_manager=APT,
        containerd_package="containerd",
        docker_package="docker.io",
        initramfs_command="update-initramfs -u",
        toolkit_repo_path="deb/$(ARCH)",
        driver=DEBIAN_DRIVER,
    ),
    Family(
        name="ubuntu",
        ids=("ubuntu",),
        package_manager=APT,
        containerd_package="containerd",
        docker_package="docker.io",
        initramfs_command="update-initramfs -u",
        toolkit_repo_path="deb/$(ARCH)",
        driver=UBUNTU_DRIVER,
        module_signing=UBUNTU_SIGNING,
    ),
    Family(
        name="rhel",
        ids=("rhel", "rocky", "almalinux", "centos", "ol"),
        package_manager=DNF,
        containerd_package="containerd.io",
        docker_package=None,
        initramfs_command="dracut -f",
        containerd_repo=DOCKER_CE_RHEL_REPO,
        containerd_repo_key=DOCKER_CE_RHEL_KEY,
        toolkit_repo_path="rpm/$basearch",
        driver=DriverPackages(
            **RPM_DRIVER, repo_dist=(("", "rhel{major}"),), module_majors=(8, 9), extra_packages=("epel-release",)
        ),
    ),
    Family(
        name="fedora",
        ids=("fedora",),
        package_manager=DNF,
        containerd_package="containerd",
        docker_package="moby-engine",
        initramfs_command="dracut -f",
        toolkit_repo_path="rpm/$basearch",
        driver=DriverPackages(**RPM_DRIVER, repo_dist=(("", "fedora{major}"),)),
    ),
    Family(
        name="amazon",
        ids=("amzn",),
        package_manager=DNF,
        containerd_package="containerd",
        docker_package="docker",
        initramfs_command="dracut -f",
        toolkit_repo_path="rpm/$basearch",
        driver=DriverPackages(**RPM_DRIVER, repo_dist=(("", "amzn{major}"),)),
    ),
    Family(
        name="suse",
        ids=("opensuse-leap", "opensuse-tumbleweed", "opensuse", "sles", "sled", "sle-micro"),
        package_manager=ZYPPER,
        containerd_package="containerd",
        docker_package="docker",
        initramfs_command="dracut -f",
        toolkit_repo_path="rpm/$basearch",
        driver=SUSE_DRIVER,
        module_signing=SUSE_SIGNING,
    ),
    Family(
        name="arch",
        ids=("arch", "archarm", "endeavouros", "manjaro"),
        package_manager=PACMAN,
        containerd_package="containerd",
        docker_package="docker",
        initramfs_command="mkinitcpio -P",
        toolkit_repo_path=None,
        driver=ARCH_DRIVER,
        module_signing=ARCH_SIGNING,
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
        distro_id=node_word(distro_id, "os-release's ID"),
        version_id=node_word(str(meta.get("VERSION_ID") or ""), "os-release's VERSION_ID"),
        major=linux_distribution.get("major"),
        codename=node_word(
            str(meta.get("VERSION_CODENAME") or meta.get("UBUNTU_CODENAME") or ""), "os-release's VERSION_CODENAME"
        ),
        arch="aarch64" if machine in ("aarch64", "arm64") else "x86_64",
        deb_arch=deb_arch,
        cuda_arch=cuda_arch,
    )
