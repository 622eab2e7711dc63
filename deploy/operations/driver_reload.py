"""The driver upgrade's reload without a reboot, where nothing holds the GPU (deploy/driver_updates.py)."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation

from .. import driver_updates
from ..facts.gpu_holders import DeviceHolders


@operation()
def reload_driver(load: bool):
    """
    After a driver change: where an nvidia module is loaded and no process but the driver's own
    services holds /dev/nvidia*, stop those services, unload the modules (their users first), load
    the new ones and start the services again, so no reboot is needed; where a process holds a
    device, name it ("reboot required"). ``load``: kernel_modules_load (false: only say what it would do).
    """
    reading = host.get_fact(DeviceHolders)  # read now: the driver just changed
    plan = driver_updates.reload_plan(reading)
    if plan.reboot:
        logger.warning(f"{host.print_prefix}{plan.line}")
        host.noop(plan.line)
        return
    if not plan.steps:
        host.noop(plan.line)
        return
    if not load:
        host.noop(f"{plan.line} (kernel_modules_load=false: not done)")
        return
    for words in driver_updates.commands(plan):
        yield StringCommand(*[QuoteString(word) for word in words])
