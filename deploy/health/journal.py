"""
The kernel's messages since the health check last read them: ``journalctl`` over the kernel's
entries (``_TRANSPORT=kernel``, what ``journalctl -k`` shows) after the cursor the last run kept, or
this boot's from its start on the first run (and when the kept cursor is gone with its journal
file: then the entries up to the last one read before are passed over by their time since boot).
At most MAX_ENTRIES entries a run (the rest are read by the next run), each entry's JSON checked
before a field of it is read, only this boot's entries kept (an Xid of an earlier boot is not this
boot's GPU's state). Standard library only: the health archive carries it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from .node import HealthHost, said

MAX_ENTRIES = 5000
MAX_CURSOR = 512  # journald's cursors are about 150 characters
JOURNAL_FIELDS = "MESSAGE,_BOOT_ID"


@dataclass(frozen=True)
class KernelMessages:
    messages: tuple[str, ...] = ()
    cursor: str | None = None  # the last entry read: where the next run starts
    read_until: int = 0  # the last entry's time since boot (microseconds): this boot's read up to there
    more: bool = False  # stopped at MAX_ENTRIES
    problem: str | None = None  # why the kernel's log could not be read


def journal_command(cursor: str | None) -> list[str]:
    where = [f"--after-cursor={cursor}"] if cursor else ["--boot=0"]
    return [
        "journalctl",
        "--no-pager",
        "--quiet",
        "--output=json",
        f"--output-fields={JOURNAL_FIELDS}",
        *where,
        "_TRANSPORT=kernel",
    ]


def message_of(value: object) -> str | None:
    """An entry's MESSAGE: text, or the list of byte values journalctl prints for text that is not
    UTF-8; None for anything else (a field journalctl left out as too large is null)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) <= 65536 and all(type(byte) is int and 0 <= byte < 256 for byte in value):
        return bytes(value).decode("utf-8", "backslashreplace")
    return None


def _microseconds(value: object) -> int | None:
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20 else None


def entries(lines: Iterable[str], boot_id: str | None, read_until: int = 0) -> tuple[list[str], str | None, int]:
    """(this boot's messages after ``read_until``, the last cursor, the last entry's time since
    boot) of journalctl's JSON lines; a line that is no entry is passed over."""
    messages, cursor = [], None
    for line in lines:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("__CURSOR"), str) and 0 < len(entry["__CURSOR"]) <= MAX_CURSOR:
            cursor = entry["__CURSOR"]
        if boot_id is not None and entry.get("_BOOT_ID") != boot_id:
            continue
        since_boot = _microseconds(entry.get("__MONOTONIC_TIMESTAMP"))
        if since_boot is not None:
            if since_boot <= read_until:
                continue  # read by an earlier run
            read_until = since_boot
        message = message_of(entry.get("MESSAGE"))
        if message is not None:
            messages.append(message)
    return messages, cursor, read_until


def boot_id(host: HealthHost) -> str | None:
    """This boot's id as the journal writes it (32 hex digits, no dashes)."""
    text = (host.read(f"{host.proc_root}/sys/kernel/random/boot_id") or "").strip().replace("-", "").lower()
    return text if len(text) == 32 and all(char in "0123456789abcdef" for char in text) else None


def kernel_messages(host: HealthHost, cursor: str | None, this_boot: str | None, read_until: int = 0) -> KernelMessages:
    """The kernel's messages after ``cursor`` (this boot's from its start without one), of this boot,
    after ``read_until`` (microseconds since boot: what an earlier run read)."""
    answer = host.run(journal_command(cursor), max_lines=MAX_ENTRIES)
    if answer.code not in (0, None) and not answer.more and cursor:
        # the cursor's journal file was rotated away (or the cursor is not journald's): this boot's
        # from its start, the entries read before passed over by their time since boot
        answer = host.run(journal_command(None), max_lines=MAX_ENTRIES)
    if answer.missing:
        return KernelMessages(cursor=cursor, problem="journalctl is not installed: the kernel's Xid lines not read")
    if answer.code is None and not answer.more:
        return KernelMessages(
            cursor=cursor, problem="journalctl did not finish in time: the kernel's Xid lines not read"
        )
    if answer.code != 0 and not answer.more:
        return KernelMessages(
            cursor=cursor,
            problem=f"journalctl exited {answer.code}: "
            f"{said(answer.error) or 'no output'}: the kernel's Xid lines not read",
        )
    messages, last, until = entries(answer.lines, this_boot, read_until)
    return KernelMessages(tuple(messages), last or cursor, until, more=answer.more)
