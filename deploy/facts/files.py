"""File state in one command: checksum, mode and owner; a file's text."""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Iterable
from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text, shell_scripts
from .base import NodeFact

HEX_DIGEST = re.compile("[0-9a-f]{64}")
# what GNU sha256sum writes for a backslash, a line feed, a carriage return in a name
SUM_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
UNMATCHED = "the files' digests do not match the files (one changed while they were read; run again)"


class FileDigest(NodeFact[dict[str, str] | None]):
    """
    sha256, octal mode and owner of a file (through a symbolic link: its target's, as the checksum
    is); None when it does not exist.

    .. code:: python

        {"sha256": "9f86d0...", "mode": "644", "owner": "root:root"}
    """

    def command(self, path: str) -> StringCommand:
        quoted = QuoteString(path)
        return StringCommand(
            "if [ -f",
            quoted,
            "]; then stat -L -c '%a %U:%G'",
            quoted,
            "&& sha256sum",
            quoted,
            "; else echo absent; fi",
        )

    @staticmethod
    def default() -> dict[str, str] | None:
        return None

    def process(self, output: list[str]) -> dict[str, str] | None:
        if not output or output[0].strip() == "absent":
            return None
        mode, owner = output[0].split()
        # a name holding a backslash or a line break starts sha256sum's line with a backslash
        return {"mode": mode, "owner": owner, "sha256": output[1].split()[0].removeprefix("\\")}


class FileDigests(NodeFact[dict[str, Any]]):
    """
    FileDigest of several files with one ``stat`` and one ``sha256sum`` over all of them
    (deploy/shell/file_digests.sh): {path: {"sha256", "mode", "owner"} or None}. A file that
    changes between its test and its read leaves the lines and the paths unmatched: refused in one
    line, never another file's digest given to a path.
    """

    def command(self, paths: Iterable[str] = ()) -> str:
        paths = list(paths)
        return shell_scripts.script("file_digests", paths).strip() if paths else "true"

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        listed: list[tuple[str, bool]] = []
        stats: list[str] = []
        sums: list[str] = []
        for line in output:
            kind, _, rest = line.partition(" ")
            if kind in ("present", "absent") and not stats and not sums:
                listed.append((rest, kind == "present"))
            elif kind == "stat" and not sums:
                stats.append(rest)
            else:
                sums.append(line)
        present = [path for path, here in listed if here]
        if not len(present) == len(stats) == len(sums):
            raise FactProcessError(
                f"{UNMATCHED}: {len(present)} files present, {len(stats)} modes and {len(sums)} checksums read"
            )
        digests: dict[str, Any] = {path: None for path, _ in listed}
        for path, stat_line, sum_line in zip(present, stats, sums):
            fields = stat_line.split()
            if len(fields) != 2:
                raise FactProcessError(f"{UNMATCHED}: the mode and owner of {path!r} read as {stat_line[:200]!r}")
            mode, owner = fields
            digests[path] = {"mode": mode, "owner": owner, "sha256": _checksum_of(path, sum_line)}
        return digests


def _checksum_of(path: str, line: str) -> str:
    """The sha256 of ``line`` (sha256sum's), which must name ``path``: where a name holds a
    backslash or a line break, GNU sha256sum starts the line with a backslash and escapes them."""
    start = 1 if line.startswith("\\") else 0
    digest, separator, name = line[start : start + 64], line[start + 64 : start + 66], line[start + 66 :]
    if start:
        name = re.sub(r"\\(.)", lambda match: SUM_ESCAPES.get(match.group(1), match.group(0)), name)
    if not HEX_DIGEST.fullmatch(digest) or separator not in ("  ", " *") or name != path:
        raise FactProcessError(f"{UNMATCHED}: the checksum line {line[:200]!r} is not the one of {path!r}")
    return digest


class FileText(NodeFact[str | None]):
    """
    A file's text, byte for byte (bytes that are not UTF-8 kept for the parser's guard to name,
    deploy/foundations/node_text.py; at most ``node_text.MAX_FILE_BYTES`` + 1 bytes read); None when it does
    not exist. pyinfra's FileContents prints the file as it is, and its connector stops reading at
    the first line that is not UTF-8: an edit would write back the lines before it.
    """

    def command(self, path: str) -> StringCommand:
        return StringCommand(
            "if [ -f",
            QuoteString(path),
            "]; then echo",
            f'"text $({node_text.base64_read(shlex.quote(path))})"; fi; true',
        )

    @staticmethod
    def default() -> str | None:
        return None

    def process(self, output: list[str]) -> str | None:
        for line in output:
            kind, _, encoded = line.strip().partition(" ")
            if kind == "text":
                try:
                    return node_text.decode(base64.b64decode(encoded, validate=True))
                except binascii.Error as error:
                    raise FactProcessError(f"could not decode the file: {error}") from None
        return None
