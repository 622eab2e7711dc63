"""NVIDIA's device nodes and the /dev/char links systemd finds them by."""

from __future__ import annotations

import shlex

from .base import NodeFact


# Each NVIDIA character device under the dev dir, its major:minor, and where /dev/char/<major:minor>
# leads (both resolved): systemd names a unit's allowed devices by these links when it re-applies
# them (a daemon-reload), and a device without one is dropped from running containers.
DEV_CHAR_SCRIPT = """
for node in __DEV__/nvidia* __DEV__/nvidia-caps/*; do
  [ -c "$node" ] || continue
  set -- $(stat -c '%t %T' "$node")
  id="$((0x$1)):$((0x$2))"
  echo "node $id $(readlink -f "$node") $(readlink -f "/dev/char/$id" 2>/dev/null)"
done
true
"""


class NvidiaDeviceLinks(NodeFact):
    """
    The NVIDIA character devices under ``dev_dir`` (``/dev``, or a driver root's), each with its
    ``major:minor`` and what ``/dev/char/<major:minor>`` resolves to (None: no link).

    .. code:: python

        [{"id": "195:0", "node": "/dev/nvidia0", "link": "/dev/nvidia0"},
         {"id": "195:255", "node": "/dev/nvidiactl", "link": None}]
    """

    def command(self, dev_dir):
        return DEV_CHAR_SCRIPT.strip().replace("__DEV__", shlex.quote(dev_dir.rstrip("/")))

    @staticmethod
    def default():
        return []

    def process(self, output):
        devices = []
        for line in output:
            kind, *fields = line.split()
            if kind == "node" and len(fields) in (2, 3):
                devices.append({"id": fields[0], "node": fields[1], "link": fields[2] if len(fields) == 3 else None})
        return devices


def missing_links(devices: list[dict]) -> list[dict]:
    """The devices whose /dev/char link is missing or leads elsewhere."""
    return [device for device in devices if device["link"] != device["node"]]
