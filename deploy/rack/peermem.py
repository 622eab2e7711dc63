"""
GPUDirect RDMA through the driver's ``nvidia-peermem`` module, pure. The module registers GPU memory
with the RDMA stack's ``ib_core`` (its peer-memory API), so it must load after that stack: the inbox
``ib_core``/``mlx5_ib`` or DOCA-OFED's (MLNX_OFED's successor, whose DKMS modules in ``updates/``
take the inbox ones' place). gpu-node says so with a module soft dependency in /etc/modprobe.d
(``softdep nvidia-peermem pre: ib_core mlx5_ib``), not with unit ordering: whoever loads
nvidia-peermem (systemd-modules-load at boot from the modules-load.d file beside it, the first-boot
unit, an operator's modprobe) then loads the RDMA stack first, and no unit has to know who that is.

NVIDIA recommends DMA-BUF over nvidia-peermem where the kernel and the open kernel modules offer it
(GPU Operator, "GPUDirect RDMA and GPUDirect Storage"): that path needs no module, and
``gpudirect_rdma=false`` (the default) leaves nvidia-peermem alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

MODULE = "nvidia_peermem"  # as /sys/module and lsmod name it
SOFTDEP_PATH = "/etc/modprobe.d/gpu-node-peermem.conf"
SOFTDEP = "softdep nvidia-peermem pre: ib_core mlx5_ib\n"
MODULES_LOAD_PATH = "/etc/modules-load.d/gpu-node-peermem.conf"
RDMA_MODULES = ("ib_core", "mlx5_ib")

# Facts of NVIDIA's published support for nvidia-peermem beside an OFED (MLNX_OFED, then DOCA-OFED):
# - the module ships with the driver from branch R470 on
#   (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html);
# - the OFED must carry the peer-direct fix for "Peer-direct patch may cause deadlock due to lock
#   inversion", MLNX_OFED 5.3-1.0.0.1.43 being the first NVIDIA names; MLNX_OFED 4.9 LTS is not supported
#   (https://github.com/Mellanox/nv_peer_memory, README);
# - DOCA-OFED continues MLNX_OFED's versions (the last standalone MLNX_OFED is 24.10), so one
#   ordering holds for both.
FIRST_PEERMEM_BRANCH = 470
FIRST_SUPPORTED_OFED = "5.3-1.0.0.1.43"

OFED_VERSION = re.compile(r"([0-9]+\.[0-9]+-[0-9]+(?:\.[0-9]+)*)")


def ofed_version(ofed_info: str) -> str | None:
    """The OFED's version from ``ofed_info -s`` ("MLNX_OFED_LINUX-24.10-1.1.4.0:",
    "OFED-internal-25.04-0.6.1:"); None when it names none."""
    found = OFED_VERSION.search(ofed_info or "")
    return found.group(1) if found else None


def _ofed_key(version: str) -> Version | None:
    try:
        return Version(version.replace("-", "."))
    except InvalidVersion:
        return None


def pairing_line(ofed: str | None, driver_branch: int | None) -> str | None:
    """One line naming an OFED / driver pairing outside NVIDIA's published support; None when it is
    inside it, or the OFED is the kernel's inbox stack (``ofed`` None: no ofed_info)."""
    if driver_branch is not None and driver_branch < FIRST_PEERMEM_BRANCH:
        return (
            f"driver branch {driver_branch} has no nvidia-peermem (it ships from R{FIRST_PEERMEM_BRANCH}): "
            "GPUDirect RDMA needs a newer driver"
        )
    if ofed is None:
        return None
    key, first = _ofed_key(ofed), _ofed_key(FIRST_SUPPORTED_OFED)
    if key is not None and first is not None and key < first:
        return (
            f"OFED {ofed} is older than {FIRST_SUPPORTED_OFED}, the first NVIDIA supports nvidia-peermem "
            "with (its peer-direct fix): install DOCA-OFED"
        )
    return None


@dataclass(frozen=True)
class RdmaStack:
    """What the node's RDMA stack is: DOCA-OFED/MLNX_OFED (its version) or the kernel's inbox one."""

    ofed: str | None

    @property
    def name(self) -> str:
        return f"OFED {self.ofed}" if self.ofed else "the inbox RDMA stack"


def wants_peermem(setting: str, mellanox: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> bool:
    """gpudirect_rdma: true, or auto where the node has an NVIDIA GPU and a ConnectX RDMA function (not an
    NVLink5 switch-management bridge, NodeSurvey's ``mellanox``)."""
    if setting != "auto":
        return setting == "true"
    return bool(gpus) and any(not device.get("switch_management") for device in mellanox)
