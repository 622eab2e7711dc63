"""
Verify's module signing step: who signed each NVIDIA kernel module and whether the key is enrolled
(ModuleSigningState). Pure.
"""

from __future__ import annotations

from typing import Any

from ..driver.signing import signing_wanted
from ..reports.node_report import FAIL, PASS, SKIP, Step
from .options import VerifyOptions

ENROLLED = {"enrolled": "yes", "pending": "pending next boot", "no": "no"}


def module_signing_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    """ "module signed by <key>, enrolled: yes / pending next boot / no"; a failure where Secure Boot is
    on and a module is unsigned, or signed by gpu-node's key that is not enrolled nor requested."""
    state = readout["signing"]
    modules = state["modules"]
    secure_boot = readout["node"]["secure_boot"]
    boot = {True: "Secure Boot on", False: "Secure Boot off", None: "Secure Boot unknown"}[secure_boot]
    if not modules:
        return Step("module_signing", SKIP, f"no NVIDIA kernel module built ({boot})")
    unsigned = sorted({module["kernel"] for module in modules if module["key"] is None})
    wanted = signing_wanted(options.module_signing, secure_boot)
    if unsigned:
        why = f"NVIDIA modules of kernel(s) {', '.join(unsigned)} are unsigned"
        if secure_boot:
            return Step(
                "module_signing",
                FAIL,
                f"{why} and Secure Boot is on: the kernel will not load them; "
                "run the driver stage (module_signing=auto signs them)",
            )
        if wanted:
            return Step("module_signing", FAIL, f"{why} ({wanted}): run the driver stage, which signs them")
    signers = sorted({module["signer"] or "?" for module in modules if module["key"] is not None})
    ours = [module for module in modules if module["key"] is not None and module["key"] == state["serial"]]
    if not signers:
        return Step("module_signing", SKIP, f"modules unsigned; signing not asked ({boot})")
    if not ours:
        return Step(
            "module_signing",
            PASS if not wanted or state["serial"] is None else FAIL,
            f"module signed by {', '.join(signers)}, not a key gpu-node manages: the kernel loads it only "
            f"if that key is in the firmware's or the shim's keys ({boot})"
            + (
                ""
                if not wanted or state["serial"] is None
                else "; run the driver stage, which rebuilds them with the module signing key"
            ),
        )
    enrolled = ENROLLED.get(state["enrollment"] or "", f"unknown ({state['mokutil'] or 'no mokutil'})")
    others = [name for name in signers if name != ours[0]["signer"]]
    reason = (
        f"module signed by {ours[0]['signer'] or state['subject']}, enrolled: {enrolled}"
        + (f"; others by {', '.join(others)}" if others else "")
        + f" ({boot})"
    )
    if state["enrollment"] == "no" and secure_boot:
        return Step(
            "module_signing",
            FAIL,
            reason + ": the kernel will not load it; stage the enrollment "
            "(module_signing_mok_password) or mokutil --import the certificate",
        )
    return Step("module_signing", PASS, reason)
