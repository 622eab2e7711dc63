"""
Pull mode's settings: one TOML file on the node (``/etc/gpu-node/settings.toml``), the same
settings as docs/settings.md, validated by the project's settings model before the run does
anything. The timer applies them as root, so they are read only from a file root alone can change:
the file and every folder above it owned by root and not writable by group or others (as sshd's
StrictModes checks a user's keys), none of them a symbolic link, the file a regular one, read no
further than the node-text bound and parsed through its guards (deploy/node_text.py). No file, a
file anyone else could have written, one that does not parse, or a setting that is not valid is
one line naming the file (and the line), and the run stops before any change: pull mode never
converges a node with settings it did not find there.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import ExitStack
from pathlib import PurePosixPath
from typing import Any

from . import node_text
from .settings import SettingsError, parse_settings, unknown_names
from .toml_layout import tomllib

SETTINGS_FILE = "/etc/gpu-node/settings.toml"
ROOT_UID = 0
# The reports a pull run rewrites on the node, unless the file says otherwise.
PULL_DEFAULTS = {"verify_report_path": "/var/lib/gpu-node/report.json",
                 "fleet_report_path": "/var/lib/gpu-node/fleet-report.json"}
ROOTS_ALONE = ("pull mode applies settings as root only from a file root alone can change: the file and every "
               "folder above it root's, not writable by group or others, none a symbolic link")


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


def unsafe(where: str, info: os.stat_result, owner: int = ROOT_UID) -> str | None:
    """Why ``where`` (the settings file or a folder above it, as ``info`` stats it) may have been
    written by another user than ``owner`` (root; a test gives its own uid), in one line; None when
    it is ``owner``'s alone."""
    if info.st_uid != owner:
        return f"{where} is owned by uid {info.st_uid}, not {'root' if owner == ROOT_UID else f'uid {owner}'}"
    if info.st_mode & 0o022:
        return f"{where} is writable by its group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _refused(line: str) -> SettingsError:
    return SettingsError(f"{line}: {ROOTS_ALONE}")


def _open_below(folder: int, name: str, where: str, flags: int) -> int:
    """``name`` in the open ``folder``, never through a symbolic link; SettingsError in one line."""
    try:
        return os.open(name, flags | os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
    except FileNotFoundError:
        raise SettingsError(f"{where} does not exist: pull mode converges a node only with the settings written "
                            f"in {SETTINGS_FILE} (docs/without-controller.md), never with defaults; nothing "
                            "changed") from None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            link = stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
            raise _refused(f"{where} is {'a symbolic link (not followed)' if link else 'not a folder'}") from None
        raise SettingsError(f"{where}: cannot read it: {error.strerror}") from None


def read_settings_text(path: str, owner: int = ROOT_UID) -> str:
    """
    The text of ``path`` once it and every folder above it are ``owner``'s alone (``unsafe``).
    Walked from ``/`` one open folder at a time, each opened without following a link: a link is
    refused, not checked at its target, since whoever may change a link chooses what root reads
    through it. The file is opened without blocking (a FIFO), must be a regular file, and is read
    no further than node_text's bound plus one byte.
    """
    *folders, name = PurePosixPath(os.path.abspath(path)).parts
    with ExitStack() as opened:
        def owners_alone(where: str, handle: int) -> int:
            opened.callback(os.close, handle)
            problem = unsafe(where, os.fstat(handle), owner)
            if problem:
                raise _refused(problem)
            return handle

        where = folders[0]
        folder = owners_alone(where, os.open(where, os.O_RDONLY | os.O_DIRECTORY))
        for part in folders[1:]:
            where = os.path.join(where, part)
            folder = owners_alone(where, _open_below(folder, part, where, os.O_DIRECTORY))
        handle = _open_below(folder, name, path, 0)
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise _refused(f"{path} is not a regular file")
        owners_alone(path, handle)
        chunks, size = [], 0
        while size <= node_text.MAX_FILE_BYTES:
            chunk = os.read(handle, node_text.MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return node_text.decode(b"".join(chunks))


def settings_from_file(path: str | None = None, owner: int = ROOT_UID) -> dict[str, Any]:
    """``settings_from_text`` of the file (``SETTINGS_FILE`` unless given), read by
    ``read_settings_text``; SettingsError in one line when there is none or it cannot be trusted."""
    path = path or SETTINGS_FILE
    return settings_from_text(read_settings_text(path, owner), path)
