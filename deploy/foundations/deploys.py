"""
pyinfra's ``@deploy``, typed as gpu-node uses it: pyinfra's own type makes a deploy an operation
(its global arguments such as ``_sudo`` first, an ``OperationMeta`` returned), where it calls the
function with the arguments it is given and returns the function's value (preflight's findings,
the cluster's GPU nodes). Only the type differs: the decorator is pyinfra's.
"""

from __future__ import annotations

from typing import Any, Callable, ParamSpec, TypeVar, cast

from pyinfra.api import deploy as pyinfra_deploy

Arguments = ParamSpec("Arguments")
Result = TypeVar("Result")


def deploy(name: str, data_defaults: dict[str, Any] | None = None
           ) -> Callable[[Callable[Arguments, Result]], Callable[Arguments, Result]]:
    """pyinfra's ``deploy(name, data_defaults)``."""
    return cast(Callable[[Callable[Arguments, Result]], Callable[Arguments, Result]],
                pyinfra_deploy(name, data_defaults))
