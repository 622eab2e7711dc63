"""
The argument parser of every ``python -m gpu_node.*`` module (and console script): argparse's own,
its errors in one line. argparse prints its usage before an error, several lines for a long one;
here the error is one line naming the program and the problem, exit status 2 as argparse's.
Standard library only: the first-boot archive (deploy/tasks/boot.py) carries it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn


def program(module: str) -> str:
    """The name the operator ran it by, for --help and errors: the console script's
    (``gpu-node-fleet-report``), or ``python -m MODULE`` when Python ran the module's file."""
    name = os.path.basename(sys.argv[0])
    return f"python -m {module}" if name.endswith(".py") or not name else name


class ArgumentParser(argparse.ArgumentParser):
    """``error_status``: the status of a bad argument (2 as argparse's, unless the program's 2 means
    something else: the drift check's drift)."""

    def __init__(self, error_status: int = 2, **kwargs: Any) -> None:
        self.error_status = error_status
        # the module's docstring keeps its own lines in --help
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(self.error_status, f"{self.prog}: {message} (see --help)\n")
