"""File state in one command: checksum, mode and owner."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand


class FileDigest(FactBase):
    """
    sha256, octal mode and owner of a file; None when it does not exist.

    .. code:: python

        {"sha256": "9f86d0...", "mode": "644", "owner": "root:root"}
    """

    def command(self, path):
        quoted = QuoteString(path)
        return StringCommand(
            "if [ -f", quoted, "]; then stat -c '%a %U:%G'", quoted, "&& sha256sum", quoted,
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
