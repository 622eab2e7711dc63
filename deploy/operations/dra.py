"""
A DRA node's host side (deploy/dra.py decides): the host's IMEX unit handed to the DRA driver's
ComputeDomain daemons, and verify's check of each host prerequisite, one line each.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation

from .. import node_records, probes
from ..cdi import CdiUnsupported, for_containerd
from ..dra import node_prerequisites
from ..facts.base import UnreadableOutput
from ..facts.combined import FactCall, read_together
from ..facts.dra import DraNodeState
from ..facts.nvidia import HostState
from ..settings import Settings
from .failure import failing_command
from .units import unit_name


def node_read(settings: Settings) -> FactCall:
    return (DraNodeState, {"driver_root": settings.nvidia_driver_root})


def installed_driver(nvidia: dict) -> str | None:
    """The driver the node runs, else the one its module was built at (HostState)."""
    return nvidia.get("loaded_version") or nvidia.get("built_version")


def containerd_cdi(settings: Settings, containerd: dict) -> bool | None:
    """Whether CDI is on in this containerd (ContainerdConfig's version) with the settings' wiring;
    None: no containerd installed."""
    if containerd["major"] is None:
        return None
    try:
        return for_containerd(settings.runtime_wiring, containerd["major"], containerd["minor"],
                              containerd["version"]).on
    except CdiUnsupported:
        return False


@operation()
def mask_service(service: str):
    """
    Mask and stop ``service`` (its state before recorded for the undo run), so nothing starts it
    again; nothing when it is masked already (the caller knows from its fact).

    + service: the unit (``.service`` when it names no type)
    """
    unit = unit_name(service)
    yield StringCommand(node_records.record_units([unit]))
    yield StringCommand("systemctl", "mask", "--now", QuoteString(unit))


@operation()
def check_prerequisites(settings: Settings, containerd_read: FactCall):
    """
    Verify each host prerequisite of a DRA node, one line each, at execution (after the earlier
    stages ran); no command unless one fails, and then one that fails the host naming them.
    """
    if not probes.executing(host):
        host.noop("the DRA prerequisites are checked when the deploy executes")
        return
    try:
        nvidia, containerd, node = read_together(host, [(HostState, {}), containerd_read, node_read(settings)])
    except UnreadableOutput as error:
        yield failing_command(str(error))
        return
    found = node_prerequisites(settings, installed_driver=installed_driver(nvidia),
                               cdi_on=containerd_cdi(settings, containerd),
                               containerd_version=containerd["version"], node=node, after_run=True)
    for prerequisite in found:
        status = "pass" if prerequisite.status == "pass" else "fail"
        logger.info(f"{host.print_prefix}dra {prerequisite.name}: {status}: {prerequisite.line}")
    failed = [prerequisite for prerequisite in found if prerequisite.status != "pass"]
    host.noop(f"DRA prerequisites: {len(found) - len(failed)} pass, {len(failed)} fail")
    if failed:
        yield failing_command("DRA prerequisites not met: " + "; ".join(p.line for p in failed))
