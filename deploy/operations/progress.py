"""
What a long step says when the run reaches it: what it is doing, how long it usually takes and
where its log is, in one line of the run's output (a DKMS build is minutes of silence otherwise).
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand


def _say(state, host, message: str) -> bool:
    host.log(f"gpu-node: {message}", logger.info)
    return True


def announcing(message: str) -> FunctionCommand:
    """The command an operation yields just before a long one: ``message`` when the run gets there
    (an operation's commands are made ahead of the run, so a log line there would come too early)."""
    return FunctionCommand(_say, (message,), {})
