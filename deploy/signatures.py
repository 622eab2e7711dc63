"""
The public deploys' signatures and docstrings, from the settings' own declarations (as
scripts/settings_doc.py writes docs/settings.md from them): ``help(provision_gpu_node)`` and
``inspect.signature`` show each setting as a keyword-only parameter with its default, not ``**settings``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from .settings import DEFAULTS, SETTING_FIELDS

F = TypeVar("F", bound=Callable[..., Any])


@cache
def settings_signature() -> inspect.Signature:
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature(
        [
            *(inspect.Parameter(name, keyword, default=DEFAULTS[name]) for name in SETTING_FIELDS),
            # _sudo, _serial ...: pyinfra takes them off before the deploy's body sees its settings
            inspect.Parameter("pyinfra_arguments", inspect.Parameter.VAR_KEYWORD),
        ]
    )


@cache
def settings_list() -> str:
    lines = [
        "Settings (keyword arguments, each also a pyinfra data key; docs/settings.md), with their defaults;",
        "pyinfra's global arguments (_sudo, _serial, ...) go to every operation inside:",
        "",
    ]
    for name, item in SETTING_FIELDS.items():
        lines += [f"    {name}={DEFAULTS[name]!r}", f"        {item.description or ''}"]
    return "\n".join(lines)


def document_settings(deploy_function: F) -> F:
    """``deploy_function`` (a pyinfra @deploy, which takes ``**settings``) given the settings' signature
    and its docstring followed by the settings' list. pyinfra's wrapper is what the package exports:
    set on it, both are what help() and inspect.signature read."""
    deploy_function.__signature__ = settings_signature()  # type: ignore[attr-defined]  # what inspect reads first
    deploy_function.__doc__ = f"{inspect.cleandoc(deploy_function.__doc__ or '')}\n\n{settings_list()}"
    return deploy_function
