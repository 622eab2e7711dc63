"""
How each family's NVIDIA kernel modules come signed by a key Secure Boot trusts (module_signing,
docs/datacenter.md): DKMS with a MOK key, or the family's vendor-signed module packages. The family
table (families.py) gives each family its record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DKMS_SIGNER = "dkms"


@dataclass(frozen=True)
class ModuleSigning:
    """
    How a family's NVIDIA kernel modules come signed by a key Secure Boot trusts, where they must be
    (module_signing; docs/datacenter.md): per kernel module type, who signs them and the fields of its
    DriverPackages record the signed packages replace.
    """

    # kernel module type -> "dkms" (DKMS signs each module it builds with the key its framework config
    # names: generated on the node, or the site's; enrolled as a MOK) or the vendor whose key signs the
    # family's prebuilt module packages (trusted through its shim: nothing to enroll); a type missing:
    # gpu-node cannot sign it. (NVIDIA's dnf packages build with DKMS, kmod-nvidia-*-dkms, so DKMS signs
    # there: akmods' keys, /etc/pki/akmods, sign RPM Fusion's akmod-nvidia, which gpu-node does not install.)
    signers: Mapping[str, str] = field(default_factory=lambda: {"proprietary": DKMS_SIGNER, "open": DKMS_SIGNER})
    # kernel module type -> DriverPackages fields replaced when its modules must be signed
    packages: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # with the site's key (module_signing_key) DKMS signs instead of the vendor: False where the family has
    # no DKMS packages of the driver
    dkms_with_site_key: bool = True
    # DKMS 3's drop-in beside framework.conf, where mok_signing_key and mok_certificate are read
    dkms_config: str = "/etc/dkms/framework.conf.d/gpu-node-module-signing.conf"
    # the driver's DKMS module packages, whose modules the drop-in has DKMS sign (a full match of a
    # package's name): Debian's nvidia-kernel-dkms, nvidia-tesla-<branch>-kernel-dkms and
    # nvidia-open-kernel-dkms, Ubuntu's nvidia-dkms-<branch>-server[-open], NVIDIA's
    # kmod-nvidia-<stream>-dkms, Arch's nvidia[-open]-dkms; not Ubuntu's nvidia-headless-no-dkms-*
    dkms_driver_packages: str = r"(?:kmod-)?nvidia(?:-[a-z0-9.]+)*?-(?<!-no-)dkms(?:-[a-z0-9.]+)*"
    # what generates the key (installed before the driver, whose install DKMS builds in) and what stages
    # its enrollment (after it: an install before the driver's would trip over a half-configured module)
    key_tools: tuple[str, ...] = ("openssl",)
    enroll_tools: tuple[str, ...] = ("mokutil",)


# Canonical's linux-modules-nvidia-<branch>-server-<flavour> follow the flavour's kernel metapackage,
# signed by Canonical's key (no MOK to enroll); with the site's own key, DKMS signs instead
UBUNTU_SIGNING = ModuleSigning(
    signers={"proprietary": "Canonical", "open": "Canonical"},
    packages={
        "proprietary": {
            "packages": ("nvidia-headless-no-dkms-{branch}-server", "nvidia-utils-{branch}-server"),
            "dependencies": ("linux-modules-nvidia-{branch}-server-{kernel_variant}",),
            "pin_dependencies": False,
        },
        "open": {
            "packages": ("nvidia-headless-no-dkms-{branch}-server-open", "nvidia-utils-{branch}-server"),
            "dependencies": ("linux-modules-nvidia-{branch}-server-open-{kernel_variant}",),
            "pin_dependencies": False,
        },
    },
)
# SUSE builds and signs the open modules' KMP (nvidia-open-driver-G06-signed-kmp, what the open
# record installs); gpu-node has no way to sign NVIDIA's proprietary G06 KMP
SUSE_SIGNING = ModuleSigning(signers={"open": "SUSE"}, dkms_with_site_key=False)
# Arch's prebuilt nvidia and nvidia-open packages are not signed: with signing, DKMS builds and signs
ARCH_SIGNING = ModuleSigning(packages={"proprietary": {"kernel_modules": {}}, "open": {"kernel_modules": {}}})
