"""
pyinfra's API, typed as gpu-node uses it. ``deploy``: pyinfra's own type makes a deploy an operation
(its global arguments such as ``_sudo`` first, an ``OperationMeta`` returned), where pyinfra calls the
function with the arguments it is given and returns the function's value (preflight's findings, the
cluster's GPU nodes); only the type differs, the decorator is pyinfra's. ``Commands``: what an
operation's function yields, as pyinfra's ``@operation`` runs it. ``while_reading``: work a run does
whatever the node answers, done while it answers.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from functools import cache
from typing import Any, ParamSpec, TypeVar, cast

import gevent
import pyinfra
from pyinfra.api import deploy as pyinfra_deploy
from pyinfra.api.command import PyinfraCommand

Arguments = ParamSpec("Arguments")
Result = TypeVar("Result")
Commands = Generator["str | PyinfraCommand", Any, None]


def deploy(
    name: str, data_defaults: dict[str, Any] | None = None
) -> Callable[[Callable[Arguments, Result]], Callable[Arguments, Result]]:
    """pyinfra's ``deploy(name, data_defaults)``."""
    return cast(
        Callable[[Callable[Arguments, Result]], Callable[Arguments, Result]], pyinfra_deploy(name, data_defaults)
    )


@cache
def resolve_module_files() -> None:
    """What pyinfra's first operation of a process pays in its CLI: it names the operation by the call
    stack (``inspect.stack``), and inspect resolves the file of every loaded module once (about 900
    ``realpath`` calls after the deploy's imports, some 20 ms), whatever the node answered."""
    # a head start only: whatever fails here, pyinfra's own reading of the stack meets (or passes over) itself
    with suppress(Exception):
        inspect.getmodule(sys._getframe())


@contextmanager
def while_reading() -> Iterator[None]:
    """Inside: the run waits for the node's answer (a remote command), its core idle. Meanwhile a
    greenlet does what the run's operations need next whatever the answer (``resolve_module_files``);
    gevent runs it as the read blocks. Measured in bench/noop.py (docs/benchmark.md). Under pyinfra's
    API nothing: its operations are ordered by count, not by the call stack."""
    if not pyinfra.is_cli:
        yield
        return
    ahead = gevent.spawn(resolve_module_files)
    try:
        yield
    finally:
        ahead.join()
