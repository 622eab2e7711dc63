"""NVIDIA's device nodes and the /dev/char links systemd finds them by."""

from __future__ import annotations

from typing import Any

from ..foundations import shell_scripts
from .base import NodeFact


class NvidiaDeviceLinks(NodeFact[list[Any]]):
    """
    The NVIDIA character devices under ``dev_dir`` (``/dev``, or a driver root's), each with its
    ``major:minor`` and what ``/dev/char/<major:minor>`` resolves to (None: no link).

    .. code:: python

        [{"id": "195:0", "node": "/dev/nvidia0", "link": "/dev/nvidia0"},
         {"id": "195:255", "node": "/dev/nvidiactl", "link": None}]
    """

    def command(self, dev_dir: str) -> str:
        return shell_scripts.script("device_links", dev=dev_dir.rstrip("/")).strip()

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        devices = []
        for line in output:
            kind, *fields = line.split()
            if kind == "node" and len(fields) in (2, 3):
                devices.append({"id": fields[0], "node": fields[1], "link": fields[2] if len(fields) == 3 else None})
        return devices


def missing_links(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The devices whose /dev/char link is missing or leads elsewhere."""
    return [device for device in devices if device["link"] != device["node"]]
