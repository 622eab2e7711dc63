"""File state in one command: checksum, mode and owner; a file's text."""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Iterable
from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text
from .base import NodeFact


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
        return {"mode": mode, "owner": owner, "sha256": output[1].split()[0]}


class FileDigests(NodeFact[dict[str, Any]]):
    """
    FileDigest of several files in one command: {path: {"sha256", "mode", "owner"} or None}.
    """

    def command(self, paths: Iterable[str] = ()) -> StringCommand:
        parts = []
        for path in paths:
            quoted = QuoteString(path)
            parts += [
                "echo",
                QuoteString(f"@@file {path}"),
                "; if [ -f",
                quoted,
                "]; then stat -L -c '%a %U:%G'",
                quoted,
                "&& sha256sum",
                quoted,
                "; else echo absent; fi;",
            ]
        parts.append("true")
        return StringCommand(*parts)

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        digests: dict[str, Any] = {}
        current: str | None = None
        lines: list[str] = []
        for line in [*output, "@@file "]:
            if line.startswith("@@file "):
                if current is not None:
                    digests[current] = FileDigest().process(lines)
                current, lines = line[len("@@file ") :], []
            else:
                lines.append(line)
        return digests


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
