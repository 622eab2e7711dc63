"""
Pull mode's settings: one TOML file on the node (``/etc/gpu-node/settings.toml``), the same
settings as docs/settings.md, validated by the project's settings model before the run does
anything; a file that does not parse, or a setting that is not valid, is one line naming the file
and the line, and the run stops before any change. Pure: text in, settings out.
"""

from __future__ import annotations

import re
from typing import Any

from .toml_layout import tomllib
from .settings import SettingsError, parse_settings, unknown_names

SETTINGS_FILE = "/etc/gpu-node/settings.toml"
# The reports a pull run rewrites on the node, unless the file says otherwise.
PULL_DEFAULTS = {"verify_report_path": "/var/lib/gpu-node/report.json",
                 "fleet_report_path": "/var/lib/gpu-node/fleet-report.json"}


def line_of(text: str, key: str) -> int | None:
    """The line (from 1) that sets ``key`` at the top of the file."""
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return None


def settings_from_text(text: str, path: str = SETTINGS_FILE) -> dict[str, Any]:
    """The settings ``text`` (TOML) sets, with pull mode's report paths, once the model accepts them;
    SettingsError in one line naming ``path`` and the line otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not valid TOML: {error}") from None
    values = {**PULL_DEFAULTS, **data}
    try:
        unknown_names(data, path)
        parse_settings(values)
    except SettingsError as error:
        named = re.match(r"(?:invalid|unknown) setting '?(\w+)'?", str(error))
        number = line_of(text, named.group(1)) if named else None
        raise SettingsError(f"{error} ({path}{f' line {number}' if number else ''})") from None
    return values


def settings_from_file(path: str = SETTINGS_FILE) -> dict[str, Any]:
    """``settings_from_text`` of the file; a missing file sets nothing (the defaults)."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except FileNotFoundError:
        return dict(PULL_DEFAULTS)
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError(f"{path}: cannot read it: {error}") from None
    return settings_from_text(text, path)
