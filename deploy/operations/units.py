"""
systemd units gpu-node enables, each one's state before recorded for the undo run; and the undo
run's putting them back (deploy/node/records.py).
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.operations import systemd

from ..facts.units import UnitsEnabled
from ..foundations.pyinfra_api import Commands
from ..node import bake
from ..node import records as node_records


def unit_name(service: str) -> str:
    """``service`` as systemd names it (pyinfra's systemd.service adds ``.service`` the same way)."""
    return service if "." in service else f"{service}.service"


@operation()
def enable_service(service: str, start: bool = True) -> Commands:
    """
    Enable ``service`` (and start it where ``start``) with pyinfra's ``systemd.service``; when that
    changes anything, the unit's state before is recorded first (once: the state before gpu-node's
    first change) for the undo run to put back. In an image root (a bake), enabled only, by its files.

    + service: the unit (``.service`` when it names no type)
    + start: start it now too
    """
    unit = unit_name(service)
    if bake.is_image_root(host.connector):
        # An image root (a bake) has no running systemd: enabled by its files, started by the image's boot.
        yield from enable_unit_files._inner(units=[unit], enabled=host.get_fact(UnitsEnabled, units=(unit,)))
        return
    commands = list(systemd.service._inner(service=unit, running=True if start else None, enabled=True))
    if commands:
        yield StringCommand(node_records.record_units([unit]))
        yield from commands


# What the undo run does to a unit whose state before gpu-node it recorded, by that state: systemctl's
# is-enabled answer, and is-active's. A unit that did not exist then came with a package gpu-node
# installed: it goes with the package (undo_remove_packages), and is left as its package set it up;
# but a unit whose file gpu-node wrote itself (``created``) goes: disabled, and stopped where it would
# start something later (a timer, path or socket). A finished one-shot and a target stay active until
# the next boot: stopping them would stop what a site made require them (its kubelet).
TRIGGERS = (".timer", ".path", ".socket")


def unit_commands(unit: str, recorded: str, now: dict[str, Any], created: bool = False) -> list[StringCommand]:
    """The commands that put ``unit`` back to ``recorded`` ("ENABLED ACTIVE", as node_records writes
    it) from ``now`` ({"enabled", "active"}, as the undo fact reads it); none when it is so already.
    ``created``: gpu-node wrote the unit's file, so before gpu-node there was no such unit."""
    enabled_before, _, active_before = recorded.partition(" ")
    quoted = QuoteString(unit)
    commands = []
    if created:
        if now.get("enabled") in ("enabled", "enabled-runtime"):
            commands.append(StringCommand("systemctl", "disable", quoted))
        if unit.endswith(TRIGGERS) and now.get("active") == "active":
            commands.append(StringCommand("systemctl", "stop", quoted))
        return commands
    if enabled_before in ("not-found", "") or now.get("enabled") in (None, "", "not-found"):
        return []
    if enabled_before == "masked" and now.get("enabled") != "masked":
        commands.append(StringCommand("systemctl", "mask", quoted))
    elif (
        enabled_before in ("disabled", "static", "indirect", "generated", "transient")
        and now.get("enabled") == "enabled"
    ):
        commands.append(StringCommand("systemctl", "disable", quoted))
    elif enabled_before == "enabled" and now.get("enabled") != "enabled":
        commands.append(StringCommand("systemctl", "enable", quoted))
    if active_before != "active" and now.get("active") == "active":
        commands.append(StringCommand("systemctl", "stop", quoted))
    elif active_before == "active" and now.get("active") != "active":
        commands.append(StringCommand("systemctl", "start", quoted))
    return commands


@operation()
def put_unit_back(unit: str, recorded: str, now: dict[str, Any], created: bool = False) -> Commands:
    """
    Put ``unit`` back to its state before gpu-node first changed it (``recorded``: "ENABLED ACTIVE");
    ``now``: its state as the undo run read it ({"enabled", "active"}); ``created``: gpu-node wrote its
    file (it goes: call this before the file is removed, while systemctl can still read it).
    """
    commands = unit_commands(unit, recorded, now, created)
    if not commands:
        host.noop(f"{unit} is disabled" if created else f"{unit} is as it was before gpu-node ({recorded})")
        return
    yield from commands


@operation()
def enable_unit_files(units: list[str], enabled: dict[str, Any]) -> Commands:
    """
    Enable ``units`` by their files alone (``systemctl --root=/ enable``: no running systemd asked,
    so it works in an image root too), starting nothing; each one's state before recorded first
    for the undo run.

    + units: the units to enable
    + enabled: their ``systemctl is-enabled`` answers as read (deploy/facts/units.py)
    """
    wanted = [unit for unit in units if enabled.get(unit) != "enabled"]
    if not wanted:
        host.noop(f"{', '.join(units)} enabled")
        return
    yield StringCommand(node_records.record_units(wanted))
    yield StringCommand("systemctl --root=/ enable", *(QuoteString(unit) for unit in wanted))
