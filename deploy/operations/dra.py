"""
A DRA node's host side (deploy/dra.py decides): the host's IMEX unit handed to the DRA driver's
ComputeDomain daemons, and verify's check of each host prerequisite, one step each of the node's
report.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from .. import node_records, probes
from ..cdi import CdiUnsupported, for_containerd
from ..dra import node_prerequisites
from ..facts.base import UnreadableOutput
from ..facts.read_ahead import FactCall, read_together
from ..facts.dra import DraNodeState
from ..facts.nvidia import NodeSurvey
from ..report import FAIL, PASS, Step, verify_report_store
from ..settings import Settings
from .failure import failing_command
from .units import unit_name


def node_read(settings: Settings) -> FactCall:
    return (DraNodeState, {"driver_root": settings.nvidia_driver_root})


def installed_driver(nvidia: dict) -> str | None:
    """The driver the node runs, else the one its module was built at (NodeSurvey)."""
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
    Check each host prerequisite of a DRA node at execution (after the earlier stages ran), each a
    step of the node's verify report: verify's operation, which runs next, adds them to the
    host's record and fails the host on a failed one. A read that cannot be read fails the host here.
    """
    if not probes.executing(host):
        host.noop("the DRA prerequisites are checked when the deploy executes")
        return
    try:
        nvidia, containerd, node = read_together(host, [(NodeSurvey, {}), containerd_read, node_read(settings)])
    except UnreadableOutput as error:
        yield failing_command(str(error))
        return
    found = node_prerequisites(settings, installed_driver=installed_driver(nvidia),
                               cdi_on=containerd_cdi(settings, containerd),
                               containerd_version=containerd["version"], node=node, after_run=True)
    steps = [Step(p.step, PASS if p.status == "pass" else FAIL, p.line) for p in found]
    verify_report_store(host.state).add_steps(host.name, steps)
    failed = sum(step.status == FAIL for step in steps)
    host.noop(f"DRA prerequisites: {len(steps) - failed} pass, {failed} fail (steps of the node report)")
