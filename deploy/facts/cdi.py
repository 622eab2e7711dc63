"""The node's CDI spec for NVIDIA's GPUs and the toolkit's units that keep it current."""

from __future__ import annotations

import base64
from typing import Any

from ..foundations import node_text, shell_scripts
from .base import NodeFact

REFRESH_PATH_UNIT = "nvidia-cdi-refresh.path"
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")


class CdiState(NodeFact[dict[str, Any]]):
    """
    The CDI spec at ``spec`` (its text, and when it was written), the refresh units the toolkit ships (where, enabled,
    active), their environment file's text, the nvidia runtime's config at ``runtime_config`` (its
    mode), the newest of the module index and ``nvidia-ctk``, and, only when the spec is missing or
    older than those, whether ``nvidia-smi -L`` answers with GPUs.

    .. code:: python

        {
            "ctk": "/usr/bin/nvidia-ctk",            # None: the toolkit is not installed
            "refresh_unit": "/usr/lib/systemd/system/nvidia-cdi-refresh.path",  # None: not shipped
            "refresh_enabled": "enabled", "refresh_active": "active",
            "env": None,                              # the environment file's text; None: absent
            "runtime_config": "[nvidia-container-runtime]\\nmode = \\"cdi\\"\\n",  # None: absent
            "inputs_changed": 1764115200,             # ctime of the newest of them
            "spec_changed": 1764115300,               # None: no spec
            "spec": "cdiVersion: 0.5.0\\n...",
            "smi_exit_code": None, "smi_gpus": 0,     # asked only for a missing or stale spec
        }
    """

    def command(self, spec: str, env: str, runtime_config: str) -> str:
        return (
            node_text.base64_reader()
            + shell_scripts.script(
                "cdi_state",
                UNIT_DIRS,
                spec_file=spec,
                env=env,
                runtime_config=runtime_config,
                path_unit=REFRESH_PATH_UNIT,
            )
        ).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "ctk": None,
            "refresh_unit": None,
            "refresh_enabled": None,
            "refresh_active": None,
            "env": None,
            "runtime_config": None,
            "inputs_changed": None,
            "spec_changed": None,
            "spec": None,
            "smi_exit_code": None,
            "smi_gpus": 0,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind in ("ctk", "refresh_unit", "refresh_enabled", "refresh_active"):
                state[kind] = rest or None
            elif kind in ("env", "spec", "runtime_config"):
                state[kind] = node_text.decode(base64.b64decode(rest)) if rest else ""
            elif kind in ("inputs_changed", "spec_changed", "smi_exit_code", "smi_gpus") and rest.isdigit():
                state[kind] = int(rest)
        return state


def spec_stale(state: dict[str, Any]) -> bool:
    """Whether the spec is missing or older than the driver's module index or nvidia-ctk."""
    return state["spec_changed"] is None or (state["inputs_changed"] or 0) > state["spec_changed"]
