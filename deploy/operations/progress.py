"""
What a long step says when the run reaches it: what it is doing, how long it usually takes and
where its log is, in one line of the run's output (a DKMS build is minutes of silence otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra import logger
from pyinfra.api import FunctionCommand

if TYPE_CHECKING:
    from pyinfra.api import Host, State


def _say(state: State, host: Host, message: str) -> bool:
    # no "gpu-node:" prefix: that marks the lines a host failed with, which operators and tests look for
    host.log(message, logger.info)
    return True


def announcing(message: str) -> FunctionCommand:
    """The command an operation yields just before a long one: ``message`` when the run gets there
    (an operation's commands are made ahead of the run, so a log line there would come too early)."""
    return FunctionCommand(_say, (message,), {})
