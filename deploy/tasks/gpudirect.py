"""
The GPUDirect RDMA step of the driver stage (gpudirect_rdma; deploy/rack/peermem.py decides): the
driver's nvidia-peermem loaded at every boot after the node's RDMA stack (a module soft dependency in
/etc/modprobe.d, and the module in /etc/modules-load.d), now too where the driver is loaded and
kernel_modules_load allows; preflight names a DOCA-OFED / driver pairing outside NVIDIA's published
support in one line.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host, logger

from ..distros.families import Platform
from ..facts.rack import PeermemState
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..operations import files, kernel
from ..planning.findings import StepCheck
from ..rack import peermem
from ..settings import Settings

HEADER = "# Managed by gpu-node (deploy/tasks/gpudirect.py, gpudirect_rdma)\n"


def managed_files() -> dict[str, str]:
    """path -> the text this step keeps there."""
    return {peermem.SOFTDEP_PATH: HEADER + peermem.SOFTDEP, peermem.MODULES_LOAD_PATH: HEADER + "nvidia-peermem\n"}


def module_read() -> FactCall:
    return kernel.module_read(peermem.MODULE, None)


def reads(settings: Settings) -> list[FactCall]:
    """What the step decides on, for preflight to read ahead: the same calls its operations make."""
    calls = [(PeermemState, {}), *(files.digest_read(path) for path in managed_files())]
    return calls + ([module_read()] if settings.kernel_modules_load else [])


def driver_branch(nvidia: dict[str, Any]) -> int | None:
    version = nvidia.get("loaded_version") or nvidia.get("built_version") or ""
    head = version.split(".")[0]
    return int(head) if head.isdigit() else None


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """Whether this node gets nvidia-peermem (gpudirect_rdma, auto: a GPU and a ConnectX RDMA NIC), and a
    warning naming an OFED / driver pairing outside NVIDIA's published support."""
    wanted = peermem.wants_peermem(settings.gpudirect_rdma, nvidia.get("mellanox") or [], nvidia.get("gpus") or [])
    if not wanted:
        logger.info(
            f"{host.print_prefix}gpudirect_rdma=auto: no NVIDIA GPU and ConnectX RDMA NIC together on the "
            "PCI bus, nvidia-peermem left alone"
        )
        return StepCheck(plan=False)
    ofed = peermem.ofed_version(read(host, (PeermemState, {}))["ofed"])
    line = peermem.pairing_line(ofed, driver_branch(nvidia))
    return StepCheck(warnings=[line] if line else [], plan=True)


@deploy("GPUDirect RDMA")
def gpudirect_rdma(settings: Settings, wanted: bool, nvidia: dict[str, Any] | None) -> None:
    if not wanted:
        return
    for path, text in managed_files().items():
        if not files.text_up_to_date(read(host, files.digest_read(path)), text):
            files.put_text(name=f"Put {path} (nvidia-peermem after the RDMA stack)", dest=path, content=text)
    if not settings.kernel_modules_load or not (nvidia or {}).get("loaded_version"):
        return  # loaded with the driver at the next boot
    if not read(host, module_read())["modules"].get(peermem.MODULE):
        kernel.load_module(
            name="Load nvidia-peermem (after the RDMA stack: its soft dependency)", module=peermem.MODULE
        )
