"""What a DRA node's host prerequisites are read from (deploy/k8s/dra.py decides): the driver root
the kubelet plugin reads, and the host's IMEX unit."""

from __future__ import annotations

from typing import Any

from pyinfra.api import QuoteString, StringCommand

from ..driver.reload import parse_holder
from ..rack.imex import IMEX_UNIT
from .base import NodeFact
from .gpu_holders import holders_script
from .gpu_node_identity import NVML_LIBRARY_DIRS


class DraNodeState(NodeFact[dict[str, Any]]):
    """
    Whether ``driver_root`` is a folder and where its libnvidia-ml.so.1 is (relative to it; None:
    none), ``nvidia-imex.service``'s ``systemctl is-enabled`` and ``is-active`` answers
    (``not-found`` where systemd has no such unit), and who holds an IMEX channel
    (/dev/nvidia-caps-imex-channels/channel*, fuser as the driver reload reads its devices:
    deploy/shell/gpu_holders.sh; ``unit``: the IMEX unit's own process; ``holders_unknown``: a
    channel exists and fuser does not).

    .. code:: python

        {"root_exists": True, "nvml": "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
         "imex": {"enabled": "enabled", "active": "active", "holders_unknown": False,
                  "holders": [Holder(pid=4242, user="bob", command="python3",
                                     device="/dev/nvidia-caps-imex-channels/channel0", unit=None)]}}
    """

    def command(self, driver_root: str) -> StringCommand:
        return StringCommand(
            StringCommand("_root=", QuoteString(driver_root.rstrip("/") or "/"), ";", _separator=""),
            '[ -d "$_root" ] && echo root;',
            f"for _d in {' '.join(NVML_LIBRARY_DIRS)}; do",
            '[ -e "${_root%/}/$_d/libnvidia-ml.so.1" ] && { echo "nvml $_d/libnvidia-ml.so.1"; break; }; done;',
            # is-enabled prints nothing on older systemd for a unit it does not know
            'echo "imex_enabled $(systemctl is-enabled',
            QuoteString(IMEX_UNIT),
            '2>/dev/null)";',
            'echo "imex_active $(systemctl is-active',
            QuoteString(IMEX_UNIT),
            '2>/dev/null)"\n',
            StringCommand(holders_script([IMEX_UNIT]) + "imex_holders | sed 's/^/imex_/'"),
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "root_exists": False,
            "nvml": None,
            "imex": {"enabled": "not-found", "active": "inactive", "holders": [], "holders_unknown": False},
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind == "root":
                state["root_exists"] = True
            elif kind == "nvml":
                state["nvml"] = rest
            elif kind == "imex_enabled":
                state["imex"]["enabled"] = rest or "not-found"
            elif kind == "imex_active":
                state["imex"]["active"] = rest or "inactive"
            elif kind == "imex_holder":
                holder = parse_holder(rest, units=(IMEX_UNIT,))
                if holder:
                    state["imex"]["holders"].append(holder)
            elif kind == "imex_unknown":
                state["imex"]["holders_unknown"] = True
        return state
