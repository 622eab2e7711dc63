"""File state in one command: checksum, mode and owner."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand


class FileDigest(FactBase):
    """
    sha256, octal mode and owner of a file (through a symbolic link: its target's, as the checksum
    is); None when it does not exist.

    .. code:: python

        {"sha256": "9f86d0...", "mode": "644", "owner": "root:root"}
    """

    def command(self, path):
        quoted = QuoteString(path)
        return StringCommand(
            "if [ -f", quoted, "]; then stat -L -c '%a %U:%G'", quoted, "&& sha256sum", quoted,
            "; else echo absent; fi",
        )

    @staticmethod
    def default():
        return None

    def process(self, output):
        if not output or output[0].strip() == "absent":
            return None
        mode, owner = output[0].split()
        return {"mode": mode, "owner": owner, "sha256": output[1].split()[0]}


class FileDigests(FactBase):
    """
    FileDigest of several files in one command: {path: {"sha256", "mode", "owner"} or None}.
    """

    def command(self, paths=()):
        parts = []
        for path in paths:
            quoted = QuoteString(path)
            parts += [
                "echo", QuoteString(f"@@file {path}"), "; if [ -f", quoted, "]; then stat -L -c '%a %U:%G'",
                quoted, "&& sha256sum", quoted, "; else echo absent; fi;",
            ]
        parts.append("true")
        return StringCommand(*parts)

    @staticmethod
    def default():
        return {}

    def process(self, output):
        digests, current, lines = {}, None, []
        for line in [*output, "@@file "]:
            if line.startswith("@@file "):
                if current is not None:
                    digests[current] = FileDigest().process(lines)
                current, lines = line[len("@@file "):], []
            else:
                lines.append(line)
        return digests
