"""
The argument parser of every ``python -m gpu_node.*`` module (and console script): argparse's own,
its errors in one line. argparse prints its usage before an error, several lines for a long one;
here the error is one line naming the program and the problem, exit status 2 as argparse's.
Standard library only: the first-boot archive (deploy/tasks/boot.py) carries it.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, **kwargs) -> None:
        # the module's docstring keeps its own lines in --help
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")
