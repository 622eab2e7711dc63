"""
Whether this node's NVIDIA kernel modules must be signed and how (module_signing; docs/datacenter.md):
by the family's vendor-signed packages, or by DKMS with a MOK key (generated on the node, or the
site's) whose enrollment the run stages; or why the node is refused before any change. Pure: the
settings, the family's table (deploy/distros/signing.py) and what the node showed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..distros.families import Platform
from ..distros.signing import DKMS_SIGNER
from ..driver.signing import GENERATED_KEY, key_paths, signing_wanted
from ..settings import Settings
from .driver_names import DriverPlanError

HEADER = "# Managed by gpu-node (deploy/tasks/module_signing.py): DKMS signs each module it builds with this key.\n"


@dataclass(frozen=True)
class SigningPlan:
    why: str  # "Secure Boot is on" or "module_signing=true"
    signer: str  # "dkms", or the vendor whose key signs the family's module packages
    secure_boot: bool | None  # NodeSurvey's: the key's enrollment is staged where it is on
    key: str | None = None  # DKMS: the private key on the node
    cert: str | None = None  # DKMS: its certificate (DER), the MOK to enroll
    generated: bool = False  # DKMS: gpu-node generates the key where it is missing
    dkms_config: str | None = None
    key_tools: tuple[str, ...] = ()
    enroll_tools: tuple[str, ...] = ()
    # the DriverPackages fields the signed packages replace (the family table's, None: none)
    packages: Mapping[str, Any] | None = None

    @property
    def by_dkms(self) -> bool:
        return self.signer == DKMS_SIGNER

    @property
    def folder(self) -> str:
        return posixpath.dirname(self.key or GENERATED_KEY)

    @property
    def dkms_files(self) -> tuple[str, str, str]:
        """(key, cert, dkms_config) of a DKMS plan (``by_dkms``), which sets all three."""
        if self.key is None or self.cert is None or self.dkms_config is None:
            raise ValueError(f"a plan signed by {self.signer} has no DKMS key")
        return self.key, self.cert, self.dkms_config


def signing_plan(
    settings: Settings, platform: Platform, kernel_module_type: str, secure_boot: bool | None
) -> SigningPlan | None:
    """How this node's ``kernel_module_type`` modules get signed (None: they need not be); a
    DriverPlanError where they must be and cannot, or where Secure Boot would refuse unsigned ones."""
    why = signing_wanted(settings.module_signing, secure_boot)
    if why is None:
        if secure_boot and not settings.allow_unsigned_modules:
            raise DriverPlanError(
                "Secure Boot is on and module_signing=false: the kernel would not load the unsigned NVIDIA modules; "
                "set module_signing=auto (a key generated on the node, or the family's signed packages), or "
                "allow_unsigned_modules=true to install them unsigned anyway"
            )
        return None
    signing = platform.family.module_signing
    signer = signing.signers.get(kernel_module_type)
    site_key = settings.module_signing_key is not None
    if signer is None:
        others = [f"nvidia_kernel_modules={kind} ({who} signs them)" for kind, who in signing.signers.items()]
        raise DriverPlanError(
            f"{why}, and gpu-node cannot sign the {kernel_module_type} NVIDIA kernel modules on {platform.distro_id}: "
            + (f"set {' or '.join(others)}, or " if others else "set ")
            + "module_signing=false with allow_unsigned_modules=true to install them unsigned"
        )
    if signer != DKMS_SIGNER and not site_key:
        return SigningPlan(why, signer, secure_boot, packages=signing.packages.get(kernel_module_type))
    if signer != DKMS_SIGNER and not signing.dkms_with_site_key:
        raise DriverPlanError(
            f"module_signing_key is set, but the {kernel_module_type} NVIDIA kernel modules on {platform.distro_id} "
            f"come built and signed by {signer} (no DKMS to sign them with that key): unset module_signing_key"
        )
    key, cert = key_paths(settings.module_signing_key, settings.module_signing_cert)
    return SigningPlan(
        why,
        DKMS_SIGNER,
        secure_boot,
        key=key,
        cert=cert,
        generated=not site_key,
        dkms_config=signing.dkms_config,
        key_tools=signing.key_tools,
        enroll_tools=signing.enroll_tools,
        packages=signing.packages.get(kernel_module_type) if signer == DKMS_SIGNER else None,
    )


def dkms_config_text(plan: SigningPlan) -> str:
    """DKMS's framework drop-in naming the key (DKMS sources it in bash: the paths hold no quote,
    settings.values.SigningPath)."""
    return HEADER + f'mok_signing_key="{plan.key}"\nmok_certificate="{plan.cert}"\n'


def key_refusal(plan: SigningPlan, state: Mapping[str, Any]) -> str | None:
    """Why the key on the node cannot be used (ModuleSigningState), in one line; None: it can, or
    gpu-node generates it."""
    key, cert = state["key"], state["cert"]
    for path, found, what in ((plan.key, key, "key"), (plan.cert, cert, "certificate")):
        if found == "link":
            return f"the module signing {what} {path} is a symbolic link: gpu-node signs only with a regular file"
    if plan.generated and (key is None) != (cert is None):
        present, missing = (plan.key, plan.cert) if key is not None else (plan.cert, plan.key)
        return (
            f"{present} exists without {missing}: remove it for gpu-node to generate a new module signing key "
            "(and enroll that one)"
        )
    if not plan.generated and (key is None or cert is None):
        missing = plan.key if key is None else plan.cert
        setting = "module_signing_key" if key is None else "module_signing_cert"
        return f"{setting}: {missing} is not on the node"
    if key is not None and (key["owner"] != "root:root" or int(key["mode"], 8) & 0o077):
        return (
            f"the module signing key {plan.key} is {key['owner']} mode {key['mode']}: it must be root's and "
            "readable by no one else (chown root:root, chmod 600); a key others could read may be known, so "
            "replace it if anyone could have"
        )
    if state["cert_format"] == "pem":
        return (
            f"the module signing certificate {plan.cert} is PEM: mokutil --import takes DER "
            f"(openssl x509 -in {plan.cert} -outform DER -out CERT.der, and set module_signing_cert to it)"
        )
    if state["cert_format"] == "invalid":
        return f"the module signing certificate {plan.cert} is not an X.509 certificate openssl can read"
    return None


def kernels_to_sign(plan: SigningPlan, state: Mapping[str, Any]) -> list[str]:
    """The installed kernels whose NVIDIA modules DKMS built before the key did not sign: unsigned, or
    signed by another key (all of them where the key is generated by this run)."""
    serial = state["serial"]
    return sorted({module["kernel"] for module in state["modules"] if serial is None or module["key"] != serial})


def enrollment_steps(cert: str) -> str:
    """What the operator does to enroll the key once, without gpu-node staging it."""
    return (
        f"enroll the module signing key once: mokutil --import {cert} (it asks for a one-time password), "
        "reboot, and at the MOK manager's blue screen choose Enroll MOK, Continue, Yes and type that password; "
        "or set module_signing_mok_password for gpu-node to stage it"
    )
