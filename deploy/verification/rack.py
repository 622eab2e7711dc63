"""
Verify's steps of the rack's parts, pure: the IMEX domain (its unit, nodes_config.cfg, every member
READY in ``nvidia-imex-ctl -N``, the channel), GPUDirect RDMA's nvidia-peermem (loaded after the RDMA
stack, the OFED / driver pairing), the MIG layout (``nvidia-mig-parted assert``). From the readings of
deploy/facts/rack.py; each a step of the node's report.
"""

from __future__ import annotations

from typing import Any

from ..rack import imex, mig, peermem
from ..rack.values import MigLayout
from ..reports.node_report import FAIL, PASS, SKIP, Step


def imex_step(domain: str, members: tuple[imex.Member, ...], reading: dict[str, Any]) -> Step:
    """The host's IMEX domain as verify finds it; a member not READY is named with its host."""
    name, unit = "imex_domain", imex.IMEX_UNIT
    addresses = ", ".join(member.address for member in members)
    if reading["enabled"] == "not-found":
        return Step(name, FAIL, f"{unit} is not installed (imex_domain={domain}): run the driver stage")
    if reading["nodes_config"] != imex.nodes_config_text(members):
        return Step(
            name,
            FAIL,
            f"{imex.NODES_CONFIG} does not list the {len(members)} members of IMEX domain "
            f"{domain} ({addresses}): run the driver stage",
        )
    if reading["active"] != "active":
        if not reading["module"]:
            return Step(
                name, SKIP, f"no nvidia module loaded: {unit} is {reading['active']}, and IMEX runs with the driver"
            )
        return Step(name, FAIL, f"{unit} is {reading['active']}: systemctl start {unit}")
    if reading["ctl_status"] is None:
        return Step(name, FAIL, f"nvidia-imex-ctl is not installed beside {unit}: reinstall IMEX (the driver stage)")
    status = imex.domain_status(reading["ctl"])
    if not status.nodes:
        said = next((line for line in reversed(reading["ctl"]) if line.strip()), "nothing")
        return Step(
            name,
            FAIL,
            f"nvidia-imex-ctl -N (exit {reading['ctl_status']}) named no member of IMEX domain {domain}: {said}",
        )
    missing = imex.missing_peers(status, members)
    if missing or status.state != "UP":
        return Step(
            name,
            FAIL,
            f"IMEX domain {domain} is {status.state or 'of no state'}: "
            + ("; ".join(missing) or "every member READY")
            + " (nvidia-imex-ctl -N)",
        )
    if reading["module"] and not reading["channel"]:
        return Step(
            name,
            FAIL,
            f"IMEX domain {domain} is UP but {imex.CHANNEL_DEVICE} does not exist: CUDA's "
            "fabric memory needs it (imex_channels; the module option takes the next load)",
        )
    return Step(name, PASS, f"IMEX domain {domain} UP: {len(members)}/{len(members)} members READY ({addresses})")


def peermem_step(reading: dict[str, Any], driver_branch: int | None) -> Step:
    """nvidia-peermem loaded after the node's RDMA stack, in a pairing NVIDIA supports."""
    name = "gpudirect_rdma"
    stack = peermem.RdmaStack(peermem.ofed_version(reading["ofed"]))
    if not reading["softdep"]:
        return Step(name, FAIL, f"{peermem.SOFTDEP_PATH} is missing (gpudirect_rdma): run the driver stage")
    pairing = peermem.pairing_line(stack.ofed, driver_branch)
    if pairing:
        return Step(name, FAIL, pairing)
    loaded = reading["loaded"]
    if "nvidia" not in loaded:
        return Step(name, SKIP, f"no nvidia module loaded: nvidia-peermem loads with it, after {stack.name}")
    built = reading["built"]
    if built.get("nvidia-peermem", 0) and built.get("nvidia-peermem", 0) < built.get("ib_core", 0):
        return Step(
            name,
            FAIL,
            f"nvidia-peermem was built before the ib_core of {stack.name} it loads against, and "
            "disagrees about its symbols: rebuild the driver's module for this kernel (dkms)",
        )
    absent = [module for module in peermem.RDMA_MODULES if module not in loaded]
    if absent:
        return Step(
            name,
            FAIL,
            f"the RDMA stack nvidia-peermem needs is not loaded ({', '.join(absent)} of "
            f"{stack.name}): load it, then modprobe nvidia-peermem",
        )
    if peermem.MODULE not in loaded:
        return Step(
            name,
            FAIL,
            f"{peermem.MODULE} is not loaded beside {stack.name}: modprobe nvidia-peermem "
            "(its soft dependency loads the RDMA stack first)",
        )
    return Step(name, PASS, f"{peermem.MODULE} loaded after {stack.name} ({', '.join(peermem.RDMA_MODULES)})")


def mig_step(layout: MigLayout, reading: dict[str, Any]) -> Step:
    """The layout applied, as NVIDIA's own mig-parted asserts it."""
    name, unit = "mig_layout", mig.MIG_UNIT
    if reading["enabled"] == "not-found":
        return Step(name, FAIL, f"{unit} is not installed (mig_layout={layout.name}): run the driver stage")
    if reading["enabled"] != "enabled":
        return Step(
            name,
            FAIL,
            f"{unit} is {reading['enabled']}: it applies MIG layout {layout.name} at every boot; "
            f"systemctl enable {unit}",
        )
    if not reading["module"]:
        return Step(name, SKIP, f"no nvidia module loaded: {unit} applies MIG layout {layout.name} at the next boot")
    if reading["assert_status"] is None:
        return Step(name, FAIL, f"nvidia-mig-parted or {mig.CONFIG_PATH} is missing: run the driver stage")
    if reading["assert_status"] != 0:
        said = next((line for line in reversed(reading["assert"]) if line.strip()), "no output")
        return Step(
            name,
            FAIL,
            f"MIG layout {layout.name} is not applied ({said}): systemctl restart {unit} where "
            "nothing holds the GPU, or reboot",
        )
    return Step(name, PASS, f"MIG layout {layout.name} applied (nvidia-mig-parted assert)")
