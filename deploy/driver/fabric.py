"""
Which NVLink fabric a node has, from its PCI devices (NodeSurvey, deploy/facts/nvidia.py): what
decides whether it needs NVIDIA Fabric Manager, and ib_umad with NVLSM as well.

- **nvswitch** (NVLink 3/4: HGX A100, HGX H100/H200): the baseboard's NVSwitch chips are NVIDIA
  PCI devices of class 0x0680 with a known NVSwitch device ID. Fabric Manager drives them through
  the driver's nvswitch interface. Another NVIDIA 0x0680 device (old nForce chipset functions
  used that class too) is not an NVSwitch.
- **nvlink5** (HGX B200/B300): the NVLink5 switches are not PCI devices of the host; the host sees
  ConnectX bridge functions (Mellanox vendor ID) whose VPD carries ``SW_MNG``, and Fabric Manager
  reaches the switches through them with NVLSM over InfiniBand MADs (``ib_umad``). This is the
  test NVIDIA's driver container (gpu-driver-container, which the GPU Operator runs) makes to
  take its NVLink5 path; the plain ConnectX NICs of the same nodes carry no such marker.
- **none**: anything else, a PCIe-only node and a GB200/GB300 NVL compute tray as well: there
  the NVLink switch trays run Fabric Manager and NVLSM (NVOS), and the compute tray shows
  neither NVSwitches nor switch-management bridges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FabricKind = Literal["none", "nvswitch", "nvlink5"]

# NVSwitch PCI device ID -> the baseboard it sits on (pci.ids names; NVIDIA's Fabric Manager guide)
NVSWITCH_DEVICE_IDS = {
    "0x1af1": "HGX A100, NVLink 3",
    "0x22a3": "HGX H100/H200, NVLink 4",
}

# Fabric Manager on an NVLink5 node needs the InfiniBand user MAD interface at every boot.
NVLINK5_MODULES = ("ib_umad",)
NVLINK5_MODULES_LOAD_PATH = "/etc/modules-load.d/gpu-node-nvlink5.conf"


@dataclass(frozen=True)
class Fabric:
    kind: FabricKind
    # one line naming what on the PCI bus decided it, for the report and refusals
    evidence: str
    # the PCI slots that decided it (NVSwitches, or the switch-management bridges)
    devices: tuple[str, ...] = ()

    @property
    def needs_fabric_manager(self) -> bool:
        return self.kind != "none"

    @property
    def needs_nvlsm(self) -> bool:
        return self.kind == "nvlink5"

    @property
    def modules(self) -> tuple[str, ...]:
        """Kernel modules this fabric needs loaded at boot."""
        return NVLINK5_MODULES if self.kind == "nvlink5" else ()


def fabric_of(node: dict[str, Any]) -> Fabric:
    """The fabric of a node, from NodeSurvey (deploy/facts/nvidia.py)."""
    bridges = [device for device in node.get("mellanox") or [] if device.get("switch_management")]
    if bridges:
        slots = tuple(device["slot"] for device in bridges)
        return Fabric(
            "nvlink5",
            f"{len(slots)} NVLink5 switch-management bridge(s) (ConnectX, VPD SW_MNG) "
            f"on the PCI bus: {', '.join(slots)}",
            slots,
        )
    nvidia_bridges = node.get("switches") or []
    switches = [device for device in nvidia_bridges if device["device"].lower() in NVSWITCH_DEVICE_IDS]
    if switches:
        slots = tuple(device["slot"] for device in switches)
        boards = sorted({NVSWITCH_DEVICE_IDS[device["device"].lower()] for device in switches})
        return Fabric("nvswitch", f"{len(slots)} NVSwitch device(s) ({'; '.join(boards)}) on the PCI bus", slots)
    if nvidia_bridges:
        unknown = ", ".join(sorted({f"10de:{device['device'].removeprefix('0x')}" for device in nvidia_bridges}))
        return Fabric("none", f"no NVSwitch on the PCI bus (NVIDIA bridge {unknown} is not a known NVSwitch)")
    return Fabric("none", "no NVSwitch or NVLink5 switch-management bridge on the PCI bus")


def modules_load_text(fabric: Fabric, header: str) -> str | None:
    """The modules-load.d file the fabric needs (``NVLINK5_MODULES_LOAD_PATH``), None when none."""
    if not fabric.modules:
        return None
    return header + "".join(f"{module}\n" for module in fabric.modules)
