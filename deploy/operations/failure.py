"""
The one way gpu-node fails a host: one line naming the problem, this host only.

An exception raised inside an operation aborts every host of the run (pyinfra runs the body
again while executing, outside its per-host error handling), and a remote ``exit 1`` needs a
round trip and a shell. So a refusal is a ``FunctionCommand`` running ``fail_host``: it logs
``[host] gpu-node: MESSAGE`` and returns False, and pyinfra fails this host alone, calls the
State's ``operation_host_error`` callbacks and goes on with the others.

- an operation yields ``failing_command(message)`` (and nothing after it);
- a task calls ``fail``;
- planning code raises ``HostRefusal``, which the entry file turns into ``fail``;
- a FunctionCommand body that finds a problem returns ``fail_host(state, host, message)``;
- a FunctionCommand body running a node script that ends in its one line (deploy/shell/) calls
  ``run_script``: a failed script fails the host with that line.

A refusal ``fail`` makes while planning is printed at once, before anything runs: pyinfra runs the
failing command only when it executes, so ``--dry`` and the changes shown before its prompt would
otherwise show the operation's name alone. It is kept for the dry run's fleet report and exit
status (``PlannedRefusals``, beside ``FailureNotes`` in deploy/reports/node_report.py), and not printed
again when the run executes it.

The line is also kept for the fleet report (``FailureNotes``), beside the operation it failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.exceptions import PyinfraError

from ..foundations import node_text
from ..foundations.pyinfra_api import Commands
from ..foundations.redact import mask_text
from ..foundations.run_state import per_run
from ..reports.node_report import FailureNotes, PlannedRefusals
from . import probes

if TYPE_CHECKING:
    from pyinfra.api import Host, State


class HostRefusal(PyinfraError):
    """A refusal found while planning one host (unsupported, unsafe, or settings that do not fit
    it). Raised during planning it would stop every host of the run: the entry file catches it and
    fails that host alone with ``fail``, before any change on it, and the run goes on."""


def _log_refusal(host: Host, message: str) -> None:
    host.log_styled(f"gpu-node: {message}", fg="red", log_func=logger.error)


def fail_host(state: State, host: Host, message: str) -> bool:
    """Log ``message`` as ``host``'s error (URL user-info and Bearer/Basic credentials masked), keep it
    for the fleet report, and return False: the failing result of a FunctionCommand body (pyinfra
    passes ``state`` to such bodies)."""
    # A line built from node content (a URL, a daemon's complaint) can carry a credential.
    message = mask_text(message)
    if message not in per_run(state, PlannedRefusals).get(host.name, ()):
        _log_refusal(host, message)
    per_run(state, FailureNotes)[(host.name, host.executing_op_hash)] = message
    return False


def _last_line(lines: Sequence[str]) -> str:
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def run_script(
    state: State, host: Host, command: str | StringCommand, success_statuses: Iterable[int] = (0,)
) -> tuple[bool, str]:
    """
    Run ``command`` (a node script whose last line says what it did, or on stderr why it failed)
    with the executing operation's connection arguments: (whether it exited with one of
    ``success_statuses``, that line). A failure fails the host with the line (``fail_host``).
    """
    arguments = {**probes.connector_arguments(host), "_success_exit_codes": list(success_statuses)}
    succeeded, output = host.run_shell_command(
        command, print_output=state.print_output, print_input=state.print_input, **arguments
    )
    first, second = (
        (output.stdout_lines, output.stderr_lines) if succeeded else (output.stderr_lines, output.stdout_lines)
    )
    # the node's line reaches the operator's terminal
    line = node_text.printable(_last_line(first) or _last_line(second))
    if not succeeded:
        fail_host(state, host, line or "the node's script failed and said nothing")
    return succeeded, line


def failing_command(message: str) -> FunctionCommand:
    """The command an operation yields to fail its host with ``message``."""
    return FunctionCommand(fail_host, (message,), {})


@operation(is_idempotent=False)
def refuse(message: str) -> Commands:
    """The operation ``fail`` adds: it fails its host with ``message`` when it runs."""
    yield failing_command(message)


def fail(name: str, message: str) -> None:
    """Fail this host with ``message`` (the operation ``name``): a precondition the deploy cannot meet,
    nothing changes. Found while planning, the line is printed now (see the module)."""
    if not host.state.is_executing:
        message = mask_text(message)
        _log_refusal(host, message)
        per_run(host.state, PlannedRefusals).setdefault(host.name, []).append(message)
    refuse(name=name, message=message)
