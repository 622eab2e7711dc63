"""
Signed NVIDIA kernel modules, part of the driver stage (docs/datacenter.md, "Secure Boot: signed
modules"): before the driver's install, the key and DKMS's framework drop-in naming it, so that DKMS
signs the module it builds there; after it, the modules DKMS built before the key rebuilt, and the
key's enrollment staged. The plan is deploy/planning/module_signing.py's; vendor-signed packages
need none of this (the driver plan installs them instead of DKMS's).
"""

from __future__ import annotations

from typing import Any

from pyinfra import host

from ..distros.families import Platform
from ..distros.package_managers import PackageManager, install_packages
from ..driver.signing import GENERATED_FOLDER, key_paths, signing_wanted
from ..facts.read_ahead import FactCall, read
from ..operations import module_signing as signing_ops
from ..operations.files import digest_read, make_folder, put_text
from ..planning.module_signing import SigningPlan, dkms_config_text, enrollment_steps, kernels_to_sign, key_refusal
from ..settings import Settings


def reads(settings: Settings, platform: Platform, node: dict[str, Any]) -> list[FactCall]:
    """What these steps read where the modules must be signed, for preflight's one command (the plan
    decides after it: a family that installs signed packages reads the key's state for nothing)."""
    if signing_wanted(settings.module_signing, node.get("secure_boot")) is None:
        return []
    return [
        signing_ops.state_read(*key_paths(settings.module_signing_key, settings.module_signing_cert)),
        digest_read(platform.family.module_signing.dkms_config),
    ]


def signer_name(plan: SigningPlan) -> str:
    """Who signs the modules, as the run's output names it."""
    return f"DKMS with {plan.key}" if plan.by_dkms else f"{plan.signer} (the family's signed packages)"


def refusal(plan: SigningPlan | None) -> str | None:
    """Why the node's key cannot sign (read ahead by preflight), in one line; None: it can."""
    if plan is None or not plan.by_dkms:
        return None
    key, cert, _ = plan.dkms_files
    return key_refusal(plan, read(host, signing_ops.state_read(key, cert)))


def before_install(manager: PackageManager, plan: SigningPlan, lock_timeout: int) -> None:
    """The signing tools, the key (generated where gpu-node owns it) and DKMS's drop-in naming it."""
    if not plan.by_dkms:
        return
    key, cert, dkms_config = plan.dkms_files
    install_packages(
        manager, "Install what generates the module signing key", plan.key_tools, lock_timeout=lock_timeout
    )
    if plan.generated:
        signing_ops.generate_key(
            name="Generate the module signing key on the node", folder=plan.folder, key=key, cert=cert
        )
    drop_ins = dkms_config.rpartition("/")[0]
    make_folder(name=f"Create {drop_ins}", path=drop_ins)
    put_text(
        name="Have DKMS sign the modules it builds with the module signing key",
        dest=dkms_config,
        content=dkms_config_text(plan),
    )


def after_install(settings: Settings, manager: PackageManager, plan: SigningPlan, lock_timeout: int) -> None:
    """Rebuild what DKMS built before the key (read by preflight, before this run's changes), and stage
    the key's enrollment where Secure Boot is on."""
    if not plan.by_dkms:
        return
    key, cert, _ = plan.dkms_files
    state = read(host, signing_ops.state_read(key, cert))
    signing_ops.rebuild_unsigned(
        name="Rebuild the NVIDIA modules DKMS built before the signing key",
        cert=cert,
        kernels=kernels_to_sign(plan, state),
    )
    if plan.secure_boot:
        install_packages(
            manager, "Install what stages the key's enrollment", plan.enroll_tools, lock_timeout=lock_timeout
        )
        password = settings.module_signing_mok_password
        signing_ops.stage_enrollment(
            name="Stage the module signing key's enrollment (mokutil --import)",
            key=key,
            cert=cert,
            password=password.get_secret_value() if password is not None else None,
            hash_file=f"{GENERATED_FOLDER}/.mok-password.hash",
            steps=enrollment_steps(cert),
        )
