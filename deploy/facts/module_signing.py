"""The module signing key on the node, its enrollment, and who signed each NVIDIA kernel module."""

from __future__ import annotations

from typing import Any

from ..foundations import node_text, shell_scripts
from .base import NodeFact

# What ``mokutil --test-key CERT`` prints first (mokutil's print_skip_message and test_key), by state
ENROLLMENT_LINES = (
    ("is already enrolled", "enrolled"),
    ("is already in db", "enrolled"),
    ("is already in the enrollment request", "pending"),
    ("is not enrolled", "no"),
)


def normal_serial(text: str) -> str:
    """A certificate serial as modinfo's sig_key (hex pairs with colons) and openssl's -serial (plain
    hex) print it, in one form: upper-case hex without colons or leading zeros."""
    return text.replace(":", "").upper().lstrip("0") or "0"


class ModuleSigningState(NodeFact[dict[str, Any]]):
    """
    The module signing ``key`` and ``cert`` (paths on the node): each file's owner and mode (None:
    missing; "link": a symbolic link), the certificate's format, serial and subject (openssl),
    what ``mokutil --test-key`` says of it (``enrollment``: enrolled, pending, no; None: no mokutil,
    no certificate, or an answer it does not know, kept in ``mokutil``), and every installed
    kernel's NVIDIA modules with the serial of the key that signed them (``key``: None unsigned)
    and the signer's name (modinfo).

    .. code:: python

        {
            "key": {"owner": "root:root", "mode": "600"},
            "cert": {"owner": "root:root", "mode": "644"},
            "cert_format": "der",
            "serial": "9095417DBF2B971F9EB7B1FC93678B209EC93EA",
            "subject": "CN=gpu-node module signing key (gpu1)",
            "mokutil": "/var/lib/gpu-node/module-signing/signing.der is already enrolled",
            "enrollment": "enrolled",
            "modules": [{"kernel": "6.1.0-56-amd64", "path": "/lib/modules/.../nvidia-current.ko",
                         "key": "9095417DBF2B971F9EB7B1FC93678B209EC93EA",
                         "signer": "gpu-node module signing key (gpu1)"}],
        }
    """

    def command(self, key: str, cert: str) -> str:
        return shell_scripts.script("module_signing_state", key=key, cert=cert).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "key": None,
            "cert": None,
            "cert_format": None,
            "serial": None,
            "subject": None,
            "mokutil": None,
            "enrollment": None,
            "modules": [],
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        files: list[str | dict[str, str] | None] = []
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "file":
                owner, _, rest = rest.partition(" ")
                if owner == "link":
                    files.append("link")
                elif owner == "missing":
                    files.append(None)
                else:
                    mode, _, _ = rest.partition(" ")
                    files.append({"owner": owner, "mode": mode})
            elif kind == "cert":
                form, _, serial = rest.partition(" ")
                state["cert_format"] = form
                state["serial"] = normal_serial(serial) if serial else None
            elif kind == "subject":
                state["subject"] = node_text.printable(rest)
            elif kind == "mokutil":
                state["mokutil"] = node_text.printable(rest)
                state["enrollment"] = next((value for text, value in ENROLLMENT_LINES if text in rest), None)
            elif kind == "module":
                release, key, path, *signer = rest.split(" ", 3)
                state["modules"].append(
                    {
                        "kernel": release,
                        "path": path,
                        "key": None if key == "-" else normal_serial(key),
                        "signer": node_text.printable(signer[0]) if signer and signer[0] else None,
                    }
                )
        state["key"], state["cert"] = (files + [None, None])[:2]
        return state
