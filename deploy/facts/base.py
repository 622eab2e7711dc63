"""
The base of gpu-node's facts: a fact's reading of what a node printed fails in one line.

pyinfra fails a host alone when a fact's ``process`` raises ``FactProcessError``; any other
exception (a number too long for ``int``, a recursion too deep, a shape the code did not expect)
stops every host of the run. ``NodeFact`` turns what its subclasses' ``process`` raises into a
``FactProcessError`` naming the fact, in one line.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and message, whitespace folded, at most ``limit`` characters."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unreadable(fact: type[FactBase[Any]], error: BaseException) -> str:
    """Why ``fact`` could not read what the node printed, in one line."""
    return f"the node's answer to {fact.__name__} cannot be read: {one_line(error)}"


Reading = TypeVar("Reading")


class NodeFact(FactBase[Reading]):
    """A fact whose ``process`` raises nothing but a one-line ``FactProcessError`` (see the module);
    ``Reading``: what ``host.get_fact`` returns of it."""

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        process = cls.__dict__.get("process")
        if process is None or getattr(process, "one_line_errors", False):
            return

        @functools.wraps(process)
        def guarded(self: FactBase[Any], output: list[str]) -> Any:
            try:
                return process(self, output)
            except FactProcessError:
                raise  # the fact's own one line
            except Exception as error:  # noqa: BLE001 - whatever reading a node's output raises is about that output
                raise FactProcessError(unreadable(cls, error)) from None

        guarded.one_line_errors = True  # type: ignore[attr-defined]  # a mark on the function, read above
        cls.process = guarded  # type: ignore[method-assign]  # the subclass's own process, replaced by its guard


class UnreadableOutput(FactProcessError):
    """A fact read in gpu-node's one command (deploy/facts/read_ahead.py) could not read its part of
    the output: the message says which, in one line. The code that reads (preflight, verify's
    operation) fails the host with it."""
