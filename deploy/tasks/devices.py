"""
The runtimes stage, device links: /dev/char links for NVIDIA's device nodes (deploy/operations/devices.py), made now and by a
udev rule whenever the driver binds a GPU, so that a systemd daemon-reload keeps containers' GPUs.
"""

from __future__ import annotations

from pyinfra import host

from ..facts.devices import missing_links
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..operations import devices, files
from ..settings import Settings

SCRIPT_MODE = "755"


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead: the same calls its operations make."""
    return [
        devices.links_read(settings.nvidia_driver_root),
        files.digest_read(devices.LINKS_SCRIPT),
        files.digest_read(devices.UDEV_RULE),
    ]


@deploy("NVIDIA device links")
def device_links(settings: Settings) -> None:
    root = settings.nvidia_driver_root
    # Operations only for what differs: a fleet's no-op pays pyinfra's cost per operation.
    script = devices.links_script(root)
    if not files.text_up_to_date(read(host, files.digest_read(devices.LINKS_SCRIPT)), script, mode=SCRIPT_MODE):
        files.put_text(
            name="Put the /dev/char link script for NVIDIA's device nodes",
            dest=devices.LINKS_SCRIPT,
            content=script,
            mode=SCRIPT_MODE,
        )
    rule = devices.udev_rule_text()
    if not files.text_up_to_date(read(host, files.digest_read(devices.UDEV_RULE)), rule):
        files.put_text(
            name="Link NVIDIA's device nodes in /dev/char when the driver binds (udev)",
            dest=devices.UDEV_RULE,
            content=rule,
        )
    if missing_links(read(host, devices.links_read(root))):
        devices.nvidia_dev_char_links(name="Link NVIDIA's device nodes in /dev/char", driver_root=root)
