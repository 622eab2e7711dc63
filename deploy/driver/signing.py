"""
Where the NVIDIA modules' signing key lives on the node, and whether the modules must be signed
(module_signing; docs/datacenter.md): what the driver stage's plan and verify both go by. Pure.
"""

from __future__ import annotations

# The key gpu-node generates on the node where the site gives none (module_signing_key)
GENERATED_FOLDER = "/var/lib/gpu-node/module-signing"
GENERATED_KEY = f"{GENERATED_FOLDER}/signing.key"
GENERATED_CERT = f"{GENERATED_FOLDER}/signing.der"


def key_paths(site_key: str | None, site_cert: str | None) -> tuple[str, str]:
    """(the signing key, its certificate) on the node: the site's, else the ones gpu-node generates."""
    return (site_key, site_cert) if site_key and site_cert else (GENERATED_KEY, GENERATED_CERT)


def signing_wanted(module_signing: str, secure_boot: bool | None) -> str | None:
    """Why the NVIDIA modules must be signed (None: they need not be); deploy/planning/module_signing.py
    decides how."""
    if module_signing == "true":
        return "module_signing=true"
    if module_signing == "auto" and secure_boot:
        return "Secure Boot is on"
    return None
