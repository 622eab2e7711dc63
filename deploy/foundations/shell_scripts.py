"""
The shell scripts gpu-node runs on a node live in ``deploy/shell/*.sh`` (package data in the wheel),
where shellcheck reads them (tests/unit/test_shell_scripts.py). Values reach a script only as
assignments before it, each quoted with ``shlex.quote``, and as its positional parameters: never
written into its text.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from functools import cache
from importlib import resources

# deploy/shell/ is the package's own data (deploy in a checkout, gpu_node once installed)
PACKAGE = __package__.rpartition(".")[0]


@cache
def body(name: str) -> str:
    """The text of ``deploy/shell/<name>.sh`` after its leading comment lines (the ``#!`` line, what the
    file is, shellcheck's directives: for its readers, not for the node), ending in a newline."""
    text = resources.files(PACKAGE).joinpath("shell").joinpath(f"{name}.sh").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        del lines[0]
    text = "".join(lines)
    return text if text.endswith("\n") else text + "\n"


def assignments(args: Iterable[object] | None = None, **values: object) -> str:
    """Shell lines giving each of ``values`` to the variable of its name and ``args`` to the
    positional parameters (None: they stay as they are), every value quoted."""
    lines = []
    for name, value in values.items():
        if not name.isidentifier():
            raise ValueError(f"not a shell variable name: {name!r}")
        lines.append(f"{name}={shlex.quote(str(value))}\n")
    if args is not None:
        lines.append(" ".join(["set --", *(shlex.quote(str(arg)) for arg in args)]) + "\n")
    return "".join(lines)


def script(name: str, args: Iterable[object] | None = None, **values: object) -> str:
    """``deploy/shell/<name>.sh`` with ``values`` and ``args`` given before it (``assignments``)."""
    return assignments(args, **values) + body(name)
