"""
What verify reads of the rack's parts (deploy/verification/rack.py decides): the IMEX domain a host is a
member of, GPUDirect RDMA's nvidia-peermem, the MIG layout mig-parted applies. One command each, from
deploy/shell/; every command exits 0 and reports in its lines.
"""

from __future__ import annotations

from typing import Any

from ..foundations import node_text, shell_scripts
from ..foundations.node_text import decode_b64
from ..rack import imex, mig, peermem
from .base import NodeFact

# nvidia-imex-ctl -N waits for its daemon: bounded, so a hung daemon is a reading, not a hung verify
CTL_TIMEOUT = 15
PEERMEM_MODULES = ("nvidia", peermem.MODULE, *peermem.RDMA_MODULES)


def _unit_lines(state: dict[str, Any], kind: str, rest: str) -> bool:
    """systemctl's is-enabled / is-active answers; True when the line was one of them."""
    if kind == "enabled":
        state["enabled"] = rest or "not-found"
    elif kind == "active":
        state["active"] = rest or "inactive"
    else:
        return False
    return True


class ImexState(NodeFact[dict[str, Any]]):
    """
    The IMEX unit (``systemctl is-enabled`` / ``is-active``), whether the nvidia module is loaded and
    ``/dev/nvidia-caps-imex-channels/channel0`` exists, ``nodes_config.cfg`` (None: no file), and what
    ``nvidia-imex-ctl -N`` printed with its exit status (None: no nvidia-imex-ctl).

    .. code:: python

        {"enabled": "enabled", "active": "active", "module": True, "channel": True,
         "nodes_config": "10.0.0.1\\n10.0.0.2\\n", "ctl_status": 0, "ctl": ["Nodes:", "Node #0 - ..."]}
    """

    def command(self) -> str:
        return (
            node_text.base64_reader()
            + shell_scripts.script(
                "imex_state",
                unit=imex.IMEX_UNIT,
                nodes_config=imex.NODES_CONFIG,
                channel=imex.CHANNEL_DEVICE,
                ctl_timeout=CTL_TIMEOUT,
            )
        ).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "enabled": "not-found",
            "active": "inactive",
            "module": False,
            "channel": False,
            "nodes_config": None,
            "ctl_status": None,
            "ctl": [],
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if _unit_lines(state, kind, rest.strip()):
                continue
            if kind in ("module", "channel"):
                state[kind] = True
            elif kind == "nodes_config":
                state["nodes_config"] = node_text.checked(
                    decode_b64(rest, imex.NODES_CONFIG, keep_bytes=True), imex.NODES_CONFIG
                )
            elif kind == "ctl_status" and rest.strip().isdigit():
                state["ctl_status"] = int(rest.strip())
            elif kind == "ctl":
                state["ctl"].append(node_text.printable(rest))
        return state


class PeermemState(NodeFact[dict[str, Any]]):
    """
    Which of nvidia, nvidia_peermem, ib_core, mlx5_ib are loaded (``/sys/module``), the OFED's
    ``ofed_info -s`` line (None: no ofed_info, the kernel's inbox stack), whether gpu-node's soft
    dependency file is in place, and the modification times of nvidia-peermem's and ib_core's module
    files for the running kernel.

    .. code:: python

        {"loaded": ["nvidia", "ib_core", "mlx5_ib"], "ofed": "OFED-internal-25.04-0.6.1:", "softdep": True,
         "built": {"nvidia-peermem": 1756000000, "ib_core": 1757000000}}
    """

    def command(self) -> str:
        return shell_scripts.script("peermem_state", PEERMEM_MODULES, softdep=peermem.SOFTDEP_PATH).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {"loaded": [], "ofed": None, "softdep": False, "built": {}}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "loaded" and rest in PEERMEM_MODULES:
                state["loaded"].append(rest)
            elif kind == "ofed":
                state["ofed"] = node_text.printable(rest.strip())
            elif kind == "softdep":
                state["softdep"] = True
            elif kind == "built":
                module, _, seconds = rest.partition(" ")
                if module in ("nvidia-peermem", "ib_core") and seconds.strip().isdigit():
                    state["built"][module] = int(seconds)
        return state


class MigState(NodeFact[dict[str, Any]]):
    """
    nvidia-mig-manager.service's state, whether the nvidia module is loaded, and what
    ``nvidia-mig-parted assert`` answers of the ``layout`` in gpu-node's config (its exit status and
    last lines; None: no mig-parted or no config).

    .. code:: python

        {"enabled": "enabled", "active": "active", "module": True, "assert_status": 0,
         "assert": ["Selected MIG configuration currently applied"]}
    """

    def command(self, layout: str) -> str:
        return shell_scripts.script("mig_state", unit=mig.MIG_UNIT, config=mig.CONFIG_PATH, layout=layout).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {"enabled": "not-found", "active": "inactive", "module": False, "assert_status": None, "assert": []}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if _unit_lines(state, kind, rest.strip()):
                continue
            if kind == "module":
                state["module"] = True
            elif kind == "assert_status" and rest.strip().isdigit():
                state["assert_status"] = int(rest.strip())
            elif kind == "assert":
                state["assert"].append(node_text.printable(rest))
        return state
