"""
Pull mode's settings: one TOML file on the node (``/etc/gpu-node/settings.toml``), the same
settings as docs/settings.md, validated by the project's settings model before the run does
anything. The timer applies them as root, so they are read only from a file root alone can change:
the file and every folder above it owned by root and not writable by group or others (as sshd's
StrictModes checks a user's keys), none of them a symbolic link, the file a regular one, read no
further than the node-text bound and parsed through its guards (deploy/foundations/node_text.py). No file, a
file anyone else could have written, one that does not parse, or a setting that is not valid is
one line naming the file (and the line), and the run stops before any change: pull mode never
converges a node with settings it did not find there.
"""

from __future__ import annotations

import re
from typing import Any

from ..foundations import node_text
from ..foundations.toml_layout import tomllib
from ..settings import SettingsError, parse_settings, unknown_names
from .root_files import ROOT_UID, MissingFile, UntrustedFile, read_roots_file

SETTINGS_FILE = "/etc/gpu-node/settings.toml"
# The reports a pull run rewrites on the node, unless the file says otherwise.
PULL_DEFAULTS = {
    "verify_report_path": "/var/lib/gpu-node/report.json",
    "fleet_report_path": "/var/lib/gpu-node/fleet-report.json",
}
ROOTS_ALONE = (
    "pull mode applies settings as root only from a file root alone can change: the file and every "
    "folder above it root's, not writable by group or others, none a symbolic link"
)


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
        data = node_text.parsed(tomllib.loads, text, path)
    except node_text.UnreadableText as error:
        raise SettingsError(str(error)) from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not valid TOML: {node_text.syntax_error(error, text)}") from None
    values = {**PULL_DEFAULTS, **data}
    try:
        unknown_names(data, path)
        parse_settings(values)
    except SettingsError as error:
        named = re.match(r"(?:invalid|unknown) setting '?(\w+)'?", str(error))
        number = line_of(text, named.group(1)) if named else None
        raise SettingsError(f"{error} ({path}{f' line {number}' if number else ''})") from None
    return values


def read_settings_text(path: str, owner: int = ROOT_UID) -> str:
    """The text of ``path`` once root alone can have written it (deploy/node/root_files.py); SettingsError
    in one line naming it otherwise."""
    try:
        return node_text.decode(read_roots_file(path, node_text.MAX_FILE_BYTES, owner))
    except MissingFile as missing:
        raise SettingsError(
            f"{missing}: pull mode converges a node only with the settings written in "
            f"{SETTINGS_FILE} (docs/without-controller.md), never with defaults; nothing "
            "changed"
        ) from None
    except UntrustedFile as refusal:
        raise SettingsError(f"{refusal}: {ROOTS_ALONE}") from None


def settings_from_file(path: str | None = None, owner: int = ROOT_UID) -> dict[str, Any]:
    """``settings_from_text`` of the file (``SETTINGS_FILE`` unless given), read by
    ``read_settings_text``; SettingsError in one line when there is none or it cannot be trusted."""
    path = path or SETTINGS_FILE
    return settings_from_text(read_settings_text(path, owner), path)
