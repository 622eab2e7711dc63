"""The installed driver branch's own lists of the GPUs it drives (read by deploy/driver/module_type.py's decision)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import StringCommand

from .base import NodeFact

# Where the driver's supported-gpus.json lies: NVIDIA's installer, and the distributions' doc folders.
SUPPORTED_GPUS_JSON = (
    "/usr/share/doc/NVIDIA_GLX-1.0/supported-gpus/supported-gpus.json",
    "/usr/share/doc/*nvidia*/supported-gpus.json",
    "/usr/share/doc/*nvidia*/supported-gpus.json.gz",
)
DEBIAN_IDS = "/usr/share/nvidia/*.ids"  # Debian's nvidia-detect

# Only the device IDs and the open-module feature of the JSON travel: it is hundreds of KiB.
SCRIPT = (
    "for f in " + " ".join(SUPPORTED_GPUS_JSON) + '; do [ -r "$f" ] || continue; echo "json $f";'
    ' zcat -f "$f" | grep -o -e \'"devid" *: *"0x[0-9A-Fa-f]*"\' -e \'"kernelopen"\'; done;'
    " for f in " + DEBIAN_IDS + '; do [ -r "$f" ] || continue;'
    " echo \"ids ${f##*/} $(tr -s '\\n\\r' '  ' < \"$f\")\"; done; true"
)


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


class GpuSupportLists(NodeFact[dict[str, Any]]):
    """
    The driver's supported-gpus.json (device ID -> whether the open kernel modules drive it, its
    ``kernelopen`` feature) and Debian's nvidia-detect lists (file name -> device IDs), where the
    node has them.

    .. code:: python

        {"json": {"/usr/share/doc/NVIDIA_GLX-1.0/supported-gpus/supported-gpus.json": {0x20b0: True}},
         "ids": {"nvidia.ids": [0x1340, 0x20b0], "nvidia-open.ids": [0x20b0]}}
    """

    def command(self) -> str | StringCommand:
        return SCRIPT

    @staticmethod
    def default() -> dict[str, Any]:
        return {"json": {}, "ids": {}}

    def process(self, output: list[str]) -> dict[str, Any]:
        lists = self.default()
        current = None
        last_device = None
        for line in output:
            line = line.strip()
            if line.startswith("json "):
                current = lists["json"].setdefault(line[5:], {})
                last_device = None
            elif line.startswith("ids "):
                _, name, *ids = line.split()
                lists["ids"][name] = sorted(
                    {d for d in (_hex(i[4:] if len(i) == 8 else i) for i in ids) if d is not None}
                )
                current = None
            elif current is not None and line.startswith('"devid"'):
                last_device = _hex(line.rsplit('"', 2)[-2])
                if last_device is not None:
                    current.setdefault(last_device, False)
            elif current is not None and line == '"kernelopen"' and last_device is not None:
                current[last_device] = True
        return lists
