"""Put a small managed text file in place, checked with one remote command; make the folder it goes in."""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from typing import Any

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.files import Directory

from ..facts.files import FileDigest, FileText
from ..facts.read_ahead import FactCall, read
from ..foundations import node_text, redact
from ..foundations.pyinfra_api import Commands
from ..node import records as node_records
from .failure import failing_command
from .safe_install import CANDIDATE_SUFFIX, FLUSH_FUNCTION
from .upload import Staging, Upload


def text_up_to_date(
    current: dict[str, Any] | None, content: str | bytes, mode: str = "644", owner: str = "root:root"
) -> bool:
    """Whether a file's FileDigest shows exactly ``content`` with ``mode`` and ``owner``."""
    data = content.encode() if isinstance(content, str) else content
    return (
        current is not None
        and current["sha256"] == hashlib.sha256(data).hexdigest()
        and current["owner"] == owner
        and current["mode"] == mode.lstrip("0")
    )


def digest_read(dest: str) -> FactCall:
    """What ``put_text`` reads of ``dest`` (a stage reads it ahead with the same call)."""
    return (FileDigest, {"path": dest})


def record_script(dest: str, record_format: str | None) -> str:
    """The record of ``dest`` for the undo run before its first change (deploy/node/records.py),
    ending the script in one line when it cannot be written; "" when ``record_format`` is None."""
    if record_format is None:
        return ""
    quoted = shlex.quote(dest)
    return (
        f"{node_records.record_file(quoted, None, record_format)} || {{\n"
        f"    printf 'gpu-node: could not record %s (under %s) before changing it; it was not changed\\n' "
        f"{quoted} {shlex.quote(node_records.RECORDS_DIR)} >&2\n"
        "    exit 1\n"
        "}\n"
    )


def _swap_script(dest: str, mode: str, owner: str, check: str | None, record_format: str | None = None) -> str:
    """Check the placed candidate, record ``dest`` for the undo run (unless ``record_format`` is None),
    give the candidate its owner and mode, flush it, rename it over ``dest``."""
    quote = shlex.quote
    candidate = quote(dest + CANDIDATE_SUFFIX)
    folder = quote(posixpath.dirname(dest) or "/")
    checked = ""
    if check:
        checked = f"{check.format(candidate=candidate)} || {{ rm -f {candidate}; exit 1; }}\n"
    recorded = record_script(dest, record_format)
    if recorded:
        recorded = recorded.replace("    exit 1\n", f"    rm -f {candidate}\n    exit 1\n", 1)
    failed = (
        f"    rm -f {candidate}\n"
        + ('    [ -z "$gn_new" ] || rm -rf -- "$gn_record"\n' if recorded else "")
        + f"    printf 'gpu-node: could not install %s: %s; it was not changed\\n' {quote(dest)} \"$error\" >&2\n"
        "    exit 1\n"
        "}\n"
    )
    if not recorded:
        return (
            checked
            + FLUSH_FUNCTION
            + (
                f"error=$(chown {quote(owner)} {candidate} 2>&1 && chmod {quote(mode)} {candidate} 2>&1"
                f" && flush {candidate} 2>&1 && mv -f {candidate} {quote(dest)} 2>&1) || {{\n"
                + failed
                + f"flush {folder}\n"
            )
        )
    return (
        checked
        + FLUSH_FUNCTION
        + (
            f"error=$(chown {quote(owner)} {candidate} 2>&1 && chmod {quote(mode)} {candidate} 2>&1"
            f" && flush {candidate} 2>&1) || {{\n"
            + failed
            + recorded
            + f"error=$(mv -f {candidate} {quote(dest)} 2>&1) || {{\n"
            + failed
            + f"flush {folder}\n"
            + (f"gn_wrote_file {quote(dest)}\n" if recorded else "")
        )
    )


@operation()
def put_text(
    dest: str,
    content: str | bytes,
    mode: str = "644",
    owner: str = "root:root",
    check: str | None = None,
    record_format: str | None = "",
) -> Commands:
    """
    Make ``dest`` hold exactly ``content`` (text, or bytes as they are) with ``mode`` and ``owner``;
    ``check``: a shell test of the uploaded candidate (``{candidate}``), which must pass before it
    replaces ``dest``. A ``dest`` that is a symbolic link is refused, not replaced. ``dest`` is
    recorded for the undo run before gpu-node's first change of it (``record_format``: how a
    changed file's wiring is taken back out, deploy/node/records.py; None: not recorded, a file on a
    host the undo run does not take back).

    pyinfra's files.put needs two or three remote reads per file on a no-op run; fleets
    re-run this from cron, so one read (checksum, mode, owner together) is worth it here.
    """
    data = content.encode() if isinstance(content, str) else content
    wanted = hashlib.sha256(data).hexdigest()
    current = read(host, digest_read(dest))
    target = QuoteString(dest)
    if current is None or current["sha256"] != wanted:
        if host.state.config.DIFF:  # the text it replaces: read for --diff alone
            before = host.get_fact(FileText, path=dest) if current is not None else None
            redact.log_masked_diff(host, dest, before, node_text.decode(data), "text")
        # Placed beside it (0600 root until its chmod) and renamed over it: an interrupted run never
        # leaves half a file, nor one others can read.
        staging = Staging.new(host, [Upload(dest + CANDIDATE_SUFFIX, data, live=dest)])
        yield from staging.commands()
        yield StringCommand(staging.place_script() + _swap_script(dest, mode, owner, check, record_format))
        return
    repairs = []
    if current["owner"] != owner:
        repairs += ["chown", QuoteString(owner), target]
    if current["mode"] != mode.lstrip("0"):
        repairs += ["&&"] * bool(repairs) + ["chmod", QuoteString(mode), target]
    if not repairs:
        host.noop(f"{dest} is up to date")
        return
    recorded = record_script(dest, record_format)
    # The owner or mode alone differ: recorded first (the same bytes stay).
    if recorded:
        yield StringCommand(recorded + "gn_wrote_file", target)
    yield StringCommand(*repairs)


@operation()
def make_folder(path: str) -> Commands:
    """
    Make the folder ``path`` (0755) where it is absent, with each absent folder above it, each
    recorded for the undo run once made (deploy/node/records.py), which removes it again
    where nothing but gpu-node's files is in it. A folder there already is kept as it is.
    """
    found = host.get_fact(Directory, path=path)
    if found is False:
        yield failing_command(f"{path} is there but is not a folder: move it away")
        return
    if found:
        host.noop(f"{path} is there")
        return
    yield StringCommand(node_records.make_folder(path))
