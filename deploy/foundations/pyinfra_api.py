"""
pyinfra's API, typed as gpu-node uses it. ``deploy``: pyinfra's own type makes a deploy an operation
(its global arguments such as ``_sudo`` first, an ``OperationMeta`` returned), where pyinfra calls the
function with the arguments it is given and returns the function's value (preflight's findings, the
cluster's GPU nodes); only the type differs, the decorator is pyinfra's. ``Commands``: what an
operation's function yields, as pyinfra's ``@operation`` runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, ParamSpec, TypeVar, cast

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
