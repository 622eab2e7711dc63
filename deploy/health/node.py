"""
The node as the health check reads it: where its files are (a test gives folders of its own), and
how a command runs. Everything read is bounded (a file's first bytes, a command's output, its run
time) and text the node gave is shown with its control characters escaped. Standard library only:
the health archive carries it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from ..driver.next_boot import NVML_LIBRARY_FOLDERS

MAX_FILE_BYTES = 64 * 1024
MAX_OUTPUT_BYTES = 1024 * 1024
COMMAND_SECONDS = 20
# What an error line keeps of a command's own words
SHOWN_OUTPUT = 200

# As deploy/foundations/node_text.py's printable (which imports yaml, and the archive carries the
# standard library alone; tests/unit/test_health_check.py holds the two equal): every C0 and C1
# control character, DEL and lone surrogate as its escape.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str) -> str:
    return _UNPRINTABLE.sub(lambda match: match[0].encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def said(text: str) -> str:
    """A command's own words for a line: the first of them, escaped and cut short."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return printable(first[:SHOWN_OUTPUT] + ("..." if len(first) > SHOWN_OUTPUT else ""))


@dataclass(frozen=True)
class Output:
    """A command's exit status (None: it is not installed, or did not finish in time), its output
    (at most ``max_lines`` lines / MAX_OUTPUT_BYTES) and its error output's first bytes."""

    code: int | None
    lines: tuple[str, ...] = ()
    error: str = ""
    more: bool = False  # stopped at the bound: there was more
    missing: bool = False


def _drain(stream: IO[bytes], kept: list[bytes], limit: int) -> None:
    while chunk := stream.read(4096):
        if sum(map(len, kept)) < limit:
            kept.append(chunk)


def run_bounded(args: list[str], max_lines: int = 10_000, timeout: float = COMMAND_SECONDS) -> Output:
    """``args`` run with no input, killed after ``timeout`` seconds or once it printed more than
    ``max_lines`` lines or MAX_OUTPUT_BYTES; its lines decoded as UTF-8 (other bytes escaped)."""
    try:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True
        )
    except OSError:
        return Output(None, missing=True)
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    errors: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(process.stderr, errors, 4096), daemon=True)
    reader.start()
    lines: list[str] = []
    size, more = 0, False
    stdout = process.stdout
    assert stdout is not None  # stdout=PIPE
    try:
        while line := stdout.readline(MAX_OUTPUT_BYTES - size + 1):
            size += len(line)
            if len(lines) == max_lines or size > MAX_OUTPUT_BYTES:
                more = True
                process.kill()
                break
            lines.append(line.decode("utf-8", "backslashreplace").rstrip("\n"))
        stdout.close()
        code = process.wait()
    finally:
        timer.cancel()
    reader.join(timeout=1)
    timed_out = code < 0 and not more
    return Output(
        None if timed_out else code, tuple(lines), b"".join(errors).decode("utf-8", "backslashreplace"), more=more
    )


@dataclass
class HealthHost:
    """Where the node's files and programs are, and how a command runs (``command``: ``run_bounded``'s
    signature). deploy/node/first_boot.py's module_path reads ``modules_root`` and ``kernel`` of it
    as of its own Host."""

    sys_root: str = "/sys"
    proc_root: str = "/proc"
    modules_root: str = "/lib/modules"
    # where kernels' module folders are (merged /usr: one folder)
    module_trees: tuple[str, ...] = ("/lib/modules", "/usr/lib/modules")
    boot_root: str = "/boot"
    etc_root: str = "/etc"
    kernel: str = field(default_factory=lambda: os.uname().release)
    library_folders: tuple[str, ...] = NVML_LIBRARY_FOLDERS
    path: str | None = None  # where programs are looked up (None: $PATH)
    command: Callable[..., Output] = field(default=run_bounded)

    def which(self, program: str) -> str | None:
        return shutil.which(program, path=self.path)

    def run(self, args: list[str], max_lines: int = 10_000) -> Output:
        """``args`` run (``run_bounded``), its program looked up in ``path``."""
        program = self.which(args[0])
        return (
            Output(None, missing=True) if program is None else self.command([program, *args[1:]], max_lines=max_lines)
        )

    def read(self, path: str) -> str | None:
        """A file's first MAX_FILE_BYTES as text (other bytes escaped); None where it cannot be read.
        Opened without blocking: a FIFO put where a file should be does not hang the check."""
        try:
            handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(handle, MAX_FILE_BYTES).decode("utf-8", "backslashreplace")
        except OSError:
            return None
        finally:
            os.close(handle)

    def listing(self, folder: str, limit: int = 256) -> list[str]:
        """A folder's first ``limit`` names, sorted; [] where it cannot be listed."""
        try:
            with os.scandir(folder) as entries:
                names = []
                for entry in entries:
                    names.append(entry.name)
                    if len(names) == limit:
                        break
        except OSError:
            return []
        return sorted(names)
