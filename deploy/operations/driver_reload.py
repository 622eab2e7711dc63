"""The driver upgrade's reload without a reboot, where nothing holds the GPU (deploy/driver/reload.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from ..driver.reload import MODULES, REBOOT_REQUIRED_STATUS, SERVICES, reload_plan
from ..facts.gpu_holders import DeviceHolders, holders_script
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import Commands
from .failure import run_script

if TYPE_CHECKING:
    from pyinfra.api import Host, State


def reload_command() -> StringCommand:
    """deploy/shell/driver_reload.sh: who holds the GPU read, decided on and the reload done in one command."""
    return StringCommand(
        (
            holders_script(SERVICES)
            + shell_scripts.script("driver_reload", modules=" ".join(MODULES), reboot_status=REBOOT_REQUIRED_STATUS)
        ).strip()
    )


def _reload(state: State, host: Host) -> bool:
    """The reload (a FunctionCommand body): a holder the node finds now is "reboot required" (nothing
    stopped, the run goes on to the reboot marker); a failure fails the host with the node's line."""
    succeeded, line = run_script(state, host, reload_command(), (0, REBOOT_REQUIRED_STATUS))
    if not succeeded:
        return False
    if line.startswith("reboot required"):
        logger.warning(f"{host.print_prefix}{line}")
    else:
        host.log_styled(line, fg="green")
    return True


@operation()
def reload_driver(load: bool) -> Commands:
    """
    After a driver change: where an nvidia module is loaded and no process but the driver's own
    services holds /dev/nvidia*, stop those services, unload the modules (their users first), load
    the new ones and start the services again, so no reboot is needed; where a process holds a
    device, name it ("reboot required"). The node reads the holders again in the reload's own
    command. ``load``: kernel_modules_load (false: only say what it would do).
    """
    reading = host.get_fact(DeviceHolders)  # read now: the driver just changed
    plan = reload_plan(reading)
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
    yield FunctionCommand(_reload, (), {})
