"""Whether systemd units are enabled, in one command (``systemctl --root=/ is-enabled`` reads the
unit files, not the running systemd: it answers in an image root too)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyinfra.api import QuoteString, StringCommand

from .base import NodeFact


class UnitsEnabled(NodeFact[dict[str, Any]]):
    """
    ``systemctl is-enabled`` of each unit: {unit: "enabled" / "disabled" / "static" / ... or "" when
    systemd knows no such unit}.

    .. code:: python

        {"gpu-node-boot.service": "enabled", "gpu-node-ready.target": ""}
    """

    def command(self, units: Iterable[str] = ()) -> StringCommand:
        parts = []
        for unit in units:
            parts += [
                "echo",
                QuoteString(unit),
                '"$(systemctl --root=/ is-enabled --',
                QuoteString(unit),
                '2>/dev/null)";',
            ]
        parts.append("true")
        return StringCommand(*parts)

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        states = {}
        for line in output:
            unit, _, state = line.strip().partition(" ")
            if unit:
                states[unit] = state.strip()
        return states
