"""
A DRA node's host side (deploy/k8s/dra.py decides): the host's IMEX unit handed to the DRA driver's
ComputeDomain daemons, and verify's check of each host prerequisite, one step each of the node's
report.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from pyinfra import host
from pyinfra.api import FunctionCommand, StringCommand, operation

from ..facts.base import UnreadableOutput
from ..facts.dra import DraNodeState
from ..facts.gpu_holders import holders_script
from ..facts.nvidia import NodeSurvey
from ..facts.read_ahead import FactCall, read_together
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import Commands
from ..k8s.dra import IMEX_BUSY, IMEX_UNKNOWN, node_prerequisites
from ..node import records as node_records
from ..rack.imex import IMEX_UNIT
from ..reports.node_report import FAIL, PASS, Step, verify_report_store
from ..runtimes.cdi import CdiUnsupported, for_containerd
from ..runtimes.wiring import runtime_wiring
from ..settings import Settings
from . import probes
from .drain import DrainTarget, before_restart
from .failure import failing_command, run_script

if TYPE_CHECKING:
    from pyinfra.api import Host, State


def node_read(settings: Settings) -> FactCall:
    return (DraNodeState, {"driver_root": settings.nvidia_driver_root})


def installed_driver(nvidia: dict[str, Any]) -> str | None:
    """The driver the node runs, else the one its module was built at (NodeSurvey)."""
    return nvidia.get("loaded_version") or nvidia.get("built_version")


def containerd_cdi(settings: Settings, containerd: dict[str, Any]) -> bool | None:
    """Whether CDI is on in this containerd (ContainerdConfig's version) with the settings' wiring;
    None: no containerd installed."""
    if containerd["major"] is None:
        return None
    try:
        return for_containerd(
            runtime_wiring(settings), containerd["major"], containerd["minor"], containerd["version"]
        ).on
    except CdiUnsupported:
        return False


# imex_mask_check.sh's exit status when an IMEX channel is in use: nothing masked
IMEX_BUSY_STATUS = 3


def imex_mask_command() -> StringCommand:
    """One command: no IMEX channel in use while the IMEX unit runs (deploy/shell/imex_mask_check.sh,
    else it stops there), the unit's state before recorded for the undo run, the unit masked and stopped."""
    check = shell_scripts.script(
        "imex_mask_check", before=IMEX_BUSY[0], after=IMEX_BUSY[1], unknown=IMEX_UNKNOWN, busy_status=IMEX_BUSY_STATUS
    )
    return StringCommand(
        holders_script([IMEX_UNIT])
        + check
        + node_records.record_units([IMEX_UNIT])
        + f" && systemctl mask --now {shlex.quote(IMEX_UNIT)}"
    )


def _mask(state: State, host: Host) -> bool:
    succeeded, _ = run_script(state, host, imex_mask_command())
    return succeeded


@operation()
def mask_imex(drain: DrainTarget | None = None) -> Commands:
    """
    Mask and stop the host's IMEX unit (its state before recorded for the undo run), so nothing
    starts it again and the DRA driver's ComputeDomain daemons own IMEX; only where no IMEX channel
    is in use, read again in the mask's own command (a multi-node job's channel: "reboot/drain
    required", the host fails, nothing masked), after ``drain`` (None: no drain). The caller calls
    it only where the unit is not masked yet.
    """
    yield from before_restart(drain)
    yield FunctionCommand(_mask, (), {})


@operation()
def check_prerequisites(settings: Settings, containerd_read: FactCall) -> Commands:
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
    found = node_prerequisites(
        settings,
        installed_driver=installed_driver(nvidia),
        cdi_on=containerd_cdi(settings, containerd),
        containerd_version=containerd["version"],
        node=node,
        after_run=True,
    )
    steps = [Step(p.step, PASS if p.status == "pass" else FAIL, p.line) for p in found]
    verify_report_store(host.state).add_steps(host.name, steps)
    failed = sum(step.status == FAIL for step in steps)
    host.noop(f"DRA prerequisites: {len(steps) - failed} pass, {failed} fail (steps of the node report)")
