"""
Which NVLink fabric a node has, from its PCI devices (HostState's ``gpus`` and ``switches``):
what decides whether it needs NVIDIA Fabric Manager (NVSwitch systems, NVLink 3/4), and ib_umad
with NVLSM as well (NVLink5 systems).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FabricKind = Literal["none", "nvswitch", "nvlink5"]


@dataclass(frozen=True)
class Fabric:
    kind: FabricKind
    # one line naming what on the PCI bus decided it, for the report and refusals
    evidence: str

    @property
    def needs_fabric_manager(self) -> bool:
        return self.kind != "none"

    @property
    def needs_nvlsm(self) -> bool:
        return self.kind == "nvlink5"


def fabric_of(node: dict) -> Fabric:
    """The fabric of a node, from HostState (deploy/facts/nvidia.py)."""
    switches = node.get("switches") or []
    if switches:
        return Fabric("nvswitch", f"{len(switches)} NVSwitch device(s) on the PCI bus")
    return Fabric("none", "no NVSwitch on the PCI bus")
