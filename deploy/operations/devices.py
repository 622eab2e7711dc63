"""
/dev/char links for NVIDIA's device nodes. With the systemd cgroup driver, systemd re-applies a
container's allowed devices on every daemon-reload by their /dev/char names, and drops a device it
cannot find there: the container loses its GPU ("Failed to initialize NVML: Unknown Error").
"""

from __future__ import annotations

import posixpath
import shlex

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from ..facts.devices import NvidiaDeviceLinks, missing_links
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import Commands

UDEV_RULE = "/etc/udev/rules.d/71-gpu-node-nvidia-dev-char.rules"
LINKS_SCRIPT = "/usr/local/sbin/gpu-node-nvidia-dev-char"


def dev_dir(driver_root: str) -> str:
    return posixpath.join(driver_root, "dev")


def links_read(driver_root: str) -> FactCall:
    """What the links operation reads (preflight reads it ahead with the same call)."""
    return (NvidiaDeviceLinks, {"dev_dir": dev_dir(driver_root)})


def links_script(driver_root: str) -> str:
    # nvidia-ctk's create-dev-char-symlinks looks in /dev only, whatever its --driver-root says: a
    # driver root elsewhere (a driver container's) needs its links made by this.
    devices = shlex.quote(dev_dir(driver_root))
    return (
        "#!/bin/sh\n"
        "# Managed by gpu-node (deploy/operations/devices.py): /dev/char links for NVIDIA's device nodes,\n"
        "# run by udev when the driver binds a GPU.\n"
        "mkdir -p /dev/char\n"
        f"for node in {devices}/nvidia* {devices}/nvidia-caps/*; do\n"
        '  [ -c "$node" ] || continue\n'
        "  set -- $(stat -c '%t %T' \"$node\")\n"
        '  ln -sfn "$(readlink -f "$node")" "/dev/char/$((0x$1)):$((0x$2))"\n'
        "done\n"
    )


def udev_rule_text() -> str:
    return (
        "# Managed by gpu-node (deploy/operations/devices.py): /dev/char links for NVIDIA's device nodes\n"
        f'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="{LINKS_SCRIPT}"\n'
    )


@operation()
def nvidia_dev_char_links(driver_root: str) -> Commands:
    """
    Link ``/dev/char/<major:minor>`` to each NVIDIA device node under the driver root that lacks it.

    + driver_root: where the driver's device nodes live (nvidia_driver_root)
    """
    missing = missing_links(read(host, links_read(driver_root)))
    if not missing:
        host.noop("every NVIDIA device node has its /dev/char link")
        return
    yield "mkdir -p /dev/char"
    for device in missing:
        yield StringCommand("ln -sfn", QuoteString(device["node"]), QuoteString(f"/dev/char/{device['id']}"))
