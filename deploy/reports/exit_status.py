"""
The exit status of a gpu-node run under pyinfra's CLI, for pipelines and cron:

- 0: every host done (converged, changed, or skipped);
- 1: a host failed; in a run that executed nothing (``--dry``, a declined prompt), a host would be
  refused (deploy/operations/failure.py); or the run stopped before any change (an invalid setting);
- 3 (``REBOOT_REQUIRED``): every host done, but a GPU node awaits the reboot its driver change
  needs (``reboot_allowed=false``): its GPUs are unusable until then. Reboot it, then run again.

pyinfra's CLI decides 0 or 1 itself (1: a host failed) and exits before it disconnects the hosts;
the fleet report, made when the last host disconnects (deploy/reports/fleet_report.py), exits with the
status here where it differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

import pyinfra
from pyinfra.api.state import StateStage

if TYPE_CHECKING:
    from pyinfra.api import State

ExitStatus = Literal[0, 1, 3]
EXIT_STATUSES: tuple[ExitStatus, ...] = get_args(ExitStatus)
DONE, FAILED, REBOOT_REQUIRED = EXIT_STATUSES


def exit_with(state: State, status: int) -> None:
    """End pyinfra's CLI run with ``status`` where pyinfra's own would be 0; under pyinfra's API
    nothing: the caller's program goes on."""
    # pyinfra's CLI raises its SystemExit before it disconnects the hosts, and offers no hook to change
    # it; this runs in the last host's disconnect callback, and gevent hands a SystemExit raised in a
    # greenlet on to the main one, where it replaces whatever the CLI was raising. So only where that
    # is its exit 0: no host failed, and an executed run reached its end (StateStage.Disconnect is set
    # after run_ops returns; an error it raised, --fail-percent's say, keeps its own message and 1). Left:
    # a run that stops planning on an error after a host was refused loses pyinfra's line, not its 1.
    if status == DONE or not pyinfra.is_cli or state.failed_hosts:
        return
    if state.current_stage == StateStage.Execute:
        return
    raise SystemExit(status)
