"""
The rack's operations: a changed MIG layout applied now (its holder check again on the node, in the
same command), and verify's check of the rack's parts, each a step of the node's report
(deploy/verification/rack.py decides).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyinfra import host
from pyinfra.api import FunctionCommand, StringCommand, operation

from ..driver.reload import SERVICES
from ..facts.base import UnreadableOutput
from ..facts.gpu_holders import holders_script
from ..facts.nvidia import NodeSurvey
from ..facts.rack import ImexState, MigState, PeermemState
from ..facts.read_ahead import FactCall, read_together
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import Commands
from ..rack import mig
from ..rack.imex import Member
from ..rack.values import MigLayout
from ..reports.node_report import FAIL, PASS, verify_report_store
from ..verification.rack import imex_step, mig_step, peermem_step
from . import probes
from .drain import DrainTarget, before_restart
from .failure import failing_command, run_script

if TYPE_CHECKING:
    from pyinfra.api import Host, State

# mig_apply.sh's exit status when a process holds the GPU: nothing restarted
MIG_BUSY_STATUS = 3


def mig_apply_command(layout: MigLayout) -> StringCommand:
    before, after = mig.busy_line(layout, "\0").split("\0")
    return StringCommand(
        holders_script(SERVICES)
        + shell_scripts.script(
            "mig_apply", unit=mig.MIG_UNIT, before=before, after=after, unknown=mig.UNKNOWN, busy_status=MIG_BUSY_STATUS
        )
    )


def _apply(state: State, host: Host, layout: MigLayout) -> bool:
    succeeded, _ = run_script(state, host, mig_apply_command(layout))
    return succeeded


@operation(is_idempotent=False)
def apply_mig_layout(layout: MigLayout, drain: DrainTarget | None = None) -> Commands:
    """
    Apply a changed MIG layout now: systemd reads the unit's drop-in again and nvidia-mig-manager.service
    runs once more (its hooks stop and start the GPU's clients), after ``drain`` (None: no drain); only
    where no process but the driver's own services holds /dev/nvidia*, read again in the same command
    (else "drain required", the host fails, nothing restarted). The caller calls it for a changed layout.
    """
    yield from before_restart(drain)
    yield FunctionCommand(_apply, (layout,), {})


def _driver_branch(nvidia: dict[str, Any]) -> int | None:
    head = (nvidia.get("loaded_version") or nvidia.get("built_version") or "").split(".")[0]
    return int(head) if head.isdigit() else None


@operation()
def check_rack(
    domain: str | None, members: tuple[Member, ...], peermem_wanted: bool, layout: MigLayout | None
) -> Commands:
    """
    Check the rack's parts at execution (after the stages ran), each a step of the node's verify report:
    the IMEX domain (``domain`` and its ``members``), nvidia-peermem, the MIG ``layout``; verify's
    operation, which runs next, adds them to the host's record and fails the host on a failed one.
    """
    if not probes.executing(host):
        host.noop("the rack's parts are checked when the deploy executes")
        return
    calls: list[FactCall] = [(NodeSurvey, {})]
    calls += [(ImexState, {})] if domain else []
    calls += [(PeermemState, {})] if peermem_wanted else []
    calls += [(MigState, {"layout": layout.name})] if layout else []
    try:
        nvidia, *readings = read_together(host, calls)
    except UnreadableOutput as error:
        yield failing_command(str(error))
        return
    steps = []
    if domain:
        steps.append(imex_step(domain, members, readings.pop(0)))
    if peermem_wanted:
        steps.append(peermem_step(readings.pop(0), _driver_branch(nvidia)))
    if layout:
        steps.append(mig_step(layout, readings.pop(0)))
    verify_report_store(host.state).add_steps(host.name, steps)
    failed = sum(step.status == FAIL for step in steps)
    passed = sum(step.status == PASS for step in steps)
    host.noop(f"the rack's parts: {passed} pass, {failed} fail (steps of the node report)")
