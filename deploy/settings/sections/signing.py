"""
The signed modules section (docs/datacenter.md, "Secure Boot: signed modules"): whether the driver's
kernel modules are signed, by which key, and how that key's enrollment is staged.
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, model_validator

from ..errors import SettingsError
from ..values import AutoTrueFalse, MokPassword, SigningPath
from .base import Section, given_values


class ModuleSigningSettings(Section):
    """Signed modules (docs/datacenter.md)"""

    module_signing: AutoTrueFalse = Field(
        "auto",
        description="sign every NVIDIA kernel module gpu-node builds or installs with a key the node can enroll "
        "(the family's signed packages where it has them, else DKMS with a MOK key); auto: where "
        "Secure Boot is on",
    )
    module_signing_key: SigningPath | None = Field(
        None,
        description="the site's module signing key (PEM) on the node, root's and readable by no one else; unset: "
        "gpu-node generates one on the node (/var/lib/gpu-node/module-signing/)",
    )
    module_signing_cert: SigningPath | None = Field(
        None, description="that key's certificate (DER, as mokutil --import takes it) on the node: set with the key"
    )
    module_signing_mok_password: MokPassword | None = Field(
        None,
        description="the one-time password that confirms the key's enrollment in the MOK manager at the next boot "
        "(a secret: only its SHA-512 crypt hash reaches the node); unset: the run prints the steps",
    )
    allow_unsigned_modules: bool = Field(
        False,
        description="with Secure Boot on, let module_signing=false install modules the kernel will not load "
        "(preflight refuses otherwise)",
    )

    @model_validator(mode="after")
    def _key_with_its_certificate(self, info: ValidationInfo) -> ModuleSigningSettings:
        if given_values(info) is not None and (self.module_signing_key is None) != (self.module_signing_cert is None):
            given, missing = (
                ("module_signing_key", "module_signing_cert")
                if self.module_signing_key
                else ("module_signing_cert", "module_signing_key")
            )
            raise SettingsError(
                f"invalid setting {given}={getattr(self, given)!r}: allowed: with {missing} "
                "(a key and its certificate, or neither: a key generated on the node)"
            )
        return self
