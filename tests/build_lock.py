"""One build of a shared thing at a time across pytest processes (scripts/test runs e2e shards side
by side): the second waits, then finds the image, tar or apt lists the first made."""

from __future__ import annotations

import contextlib
import fcntl
import re
from pathlib import Path

LOCKS = Path(__file__).resolve().parents[1] / ".cache" / "locks"


@contextlib.contextmanager
def built_once(name: str):
    LOCKS.mkdir(parents=True, exist_ok=True)
    with open(LOCKS / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
