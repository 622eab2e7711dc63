"""The host's apt source files, read for the driver stage's components (deploy/driver/apt_components.py)."""

from __future__ import annotations

import base64
from typing import Any

from ..foundations import node_text
from .base import NodeFact


class AptSourceFiles(NodeFact[dict[str, Any]]):
    """
    The host's apt source files, byte for byte: ``/etc/apt/sources.list``,
    ``sources.list.d/*.list`` (one-line format) and ``sources.list.d/*.sources`` (deb822).

    .. code:: python

        {"/etc/apt/sources.list.d/debian.sources": "Types: deb\\nURIs: ...\\n"}
    """

    def command(self) -> str:
        return (
            "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
            "/etc/apt/sources.list.d/*.sources; do "
            '[ -f "$f" ] && echo "$f $(' + node_text.base64_read('"$f"') + ')"; done; true'
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        sources = {}
        for line in output:
            path, _, encoded = line.strip().partition(" ")
            if path.startswith("/"):
                sources[path] = node_text.decode(base64.b64decode(encoded))
        return sources
