"""Put a small managed text file in place, checked with one remote command."""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand, operation

from deploy.facts.combined import FactCall, read
from deploy.facts.files import FileDigest
from deploy.operations.safe_install import CANDIDATE_SUFFIX


def text_up_to_date(current: dict | None, content: str, mode: str = "644", owner: str = "root:root") -> bool:
    """Whether a file's FileDigest shows exactly ``content`` with ``mode`` and ``owner``."""
    return (
        current is not None
        and current["sha256"] == hashlib.sha256(content.encode()).hexdigest()
        and current["owner"] == owner
        and current["mode"] == mode.lstrip("0")
    )


def digest_read(dest: str) -> FactCall:
    """What ``put_text`` reads of ``dest`` (a stage reads it ahead with the same call)."""
    return (FileDigest, {"path": dest})


@operation()
def put_text(dest: str, content: str, mode: str = "644", owner: str = "root:root", check: str | None = None):
    """
    Make ``dest`` hold exactly ``content`` with ``mode`` and ``owner``; ``check``: a shell test of the
    uploaded candidate (``{candidate}``), which must pass before it replaces ``dest``.

    pyinfra's files.put needs two or three remote reads per file on a no-op run; fleets
    re-run this from cron, so one read (checksum, mode, owner together) is worth it here.
    """
    wanted = hashlib.sha256(content.encode()).hexdigest()
    current = read(host, digest_read(dest))
    target = QuoteString(dest)
    if current is None or current["sha256"] != wanted:
        if current is None:
            yield StringCommand("mkdir", "-p", QuoteString(posixpath.dirname(dest)))
        # Uploaded beside it and renamed over it: an interrupted run never leaves half a file.
        candidate = QuoteString(dest + CANDIDATE_SUFFIX)
        yield FileUploadCommand(StringIO(content), dest + CANDIDATE_SUFFIX)
        if check:
            yield StringCommand(check.format(candidate=shlex.quote(dest + CANDIDATE_SUFFIX)),
                                "|| { rm -f", candidate, "; exit 1; }")
        yield StringCommand("chown", QuoteString(owner), candidate, "&& chmod", QuoteString(mode), candidate,
                            "&& mv -f", candidate, target)
        return
    if current["owner"] != owner:
        yield StringCommand("chown", QuoteString(owner), target)
    if current["mode"] != mode.lstrip("0"):
        yield StringCommand("chmod", QuoteString(mode), target)
    if current["owner"] == owner and current["mode"] == mode.lstrip("0"):
        host.noop(f"{dest} is up to date")
