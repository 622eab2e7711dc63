"""
Where a host's settings come from, and the one place tasks read them: pyinfra's data (the inventory's
host data, group_data, ``--data``) with a deploy call's keyword arguments on top, parsed once per run
and per distinct set of values (docs/settings.md says in which order they win).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyinfra import logger

from ..foundations.run_state import per_run
from .errors import SettingsError, shown
from .hints import unknown_names
from .model import FOLDED_SETTINGS, SETTING_FIELDS, Settings, parse_settings, typed

if TYPE_CHECKING:
    from pyinfra.api import Host, State


class ParsedSettings(dict[tuple[str, str], Settings]):
    """This run's validated settings: (inventory host name, the call's settings) -> Settings
    (deploy/foundations/run_state.py)."""


class SettingsByValues(dict[str, Settings]):
    """This run's validated settings by the setting values they came from (deploy/foundations/run_state.py)."""


class CallSettings(dict[str, Any]):
    """The settings the run's deploy function was called with (``call_settings``), for every host."""


class OverriddenData(set[tuple[str, ...]]):
    """The --data keys this run's deploy calls override, once warned about (deploy/foundations/run_state.py)."""


def overridden_data(state: State, given: Mapping[str, Any], where: str) -> None:
    """The ``--data`` values a deploy call's keyword arguments ``given`` override: each still checked
    (SettingsError in one line), and named in one warning per run, as they are not used."""
    command_line = state.inventory.get_override_data()
    overridden = {key: command_line[key] for key in given if key in command_line}
    if not overridden:
        return
    try:
        typed(overridden)
    except SettingsError as error:
        raise SettingsError(f"{error} (from --data, which {where}'s keyword argument overrides)") from None
    warned = per_run(state, OverriddenData)
    if (where, *overridden) in warned:
        return
    warned.add((where, *overridden))
    data = ", ".join(f"{key}={shown(value)}" for key, value in overridden.items())
    arguments = ", ".join(f"{key}={shown(given[key])}" for key in overridden)
    logger.warning(
        f"--data {data} is not used: {where}({arguments}) overrides it (a deploy call's keyword arguments "
        "win over --data, docs/settings.md)"
    )


def call_settings(state: State, given: Mapping[str, Any], where: str) -> None:
    """Settings given as keyword arguments to a deploy function (``where``): they win over every host's
    data, ``--data`` included (``overridden_data``), for the rest of the run; a name that is not a
    setting stops the run before any change."""
    unknown_names(given, where)
    overridden_data(state, given, where)
    calls = per_run(state, CallSettings)
    calls.clear()
    calls.update(given)


def setting_source(host: Host, key: str) -> str:
    """Where ``host``'s value of ``key`` comes from, weakest last (docs/settings.md's order)."""
    if key in per_run(host.state, CallSettings):
        return "the deploy call's keyword arguments"
    inventory = host.inventory
    if key in inventory.get_override_data():
        return "--data"
    if key in inventory.get_host_data(host.name):
        return "the inventory's host data"
    for group in reversed(host.groups):
        if key in inventory.get_group_data(group):
            return f"group_data/{group}.py"
    if key in inventory.get_data():
        return "group_data/all.py"
    return "the default"


def host_settings(host: Host) -> Settings:
    """The validated settings of one pyinfra host; the one place tasks read host.data from, with the
    settings a deploy function was called with on top (``call_settings``). Parsed once per run, and
    once per distinct set of values: a fleet's hosts mostly share them, and the model is frozen
    (validating is a few ms per host)."""
    given = per_run(host.state, CallSettings)
    cache = per_run(host.state, ParsedSettings)
    cached = (host.name, repr(sorted(given.items())))
    if cached not in cache:
        # Only the settings' own keys (the connector's, ssh_port or ssh_hostname, differ per host), and
        # only those a site set: a deploy function's data_defaults are the defaults the model has, and
        # some checks tell a value given from one left alone (gpu_sharing_replicas).
        defaults = getattr(host, "current_deploy_data", None) or {}
        values = {
            key: value
            for key, value in host.data.dict().items()
            if (key in SETTING_FIELDS or key in FOLDED_SETTINGS)
            and (key not in defaults or setting_source(host, key) != "the default")
        }
        values.update(given)
        by_values = per_run(host.state, SettingsByValues)
        key = repr(sorted(values.items()))
        if key not in by_values:
            try:
                by_values[key] = parse_settings(values)
            except SettingsError as error:
                named = re.match(r"invalid setting (\w+)=", str(error))
                where = f", from {setting_source(host, named.group(1))}" if named else ""
                raise SettingsError(f"{error} (host {host.name}{where})") from None
        cache[cached] = by_values[key]
    return cache[cached]
