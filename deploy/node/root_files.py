"""
Files root reads and acts on with no operator watching (pull mode's settings, read by its timer;
the first-boot unit's settings, read at every boot): read only when root alone can have written
them. The file and every folder above it owned by root and not writable by group or others (as
sshd's StrictModes checks a user's keys), none of them a symbolic link (not followed: whoever may
change a link chooses what root reads through it), the file a regular one, opened without blocking
and read no further than a bound plus one byte. And the files those programs write (the boot
report, the health check's report and state): whole, even after a power loss. Standard library
only: the first-boot archive (deploy/tasks/boot.py) carries it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ROOT_UID = 0
# The types a settings dataclass's fields may have, as their annotations name them
SETTING_TYPES = {"bool": bool, "str": str}
# What the deploy writes (deploy/tasks/boot.py, deploy/tasks/health.py) is under 1 KiB
MAX_SETTINGS_BYTES = 64 * 1024
Settings = TypeVar("Settings", bound="DataclassInstance")


class UntrustedFile(ValueError):
    """A file root will not read: one line naming it and why."""


class MissingFile(UntrustedFile):
    """The file (or a folder above it) does not exist."""


def unsafe(where: str, info: os.stat_result, owner: int = ROOT_UID) -> str | None:
    """Why ``where`` (the file or a folder above it, as ``info`` stats it) may have been written by
    another user than ``owner`` (root; a test gives its own uid), in one line; None when it is
    ``owner``'s alone."""
    if info.st_uid != owner:
        return f"{where} is owned by uid {info.st_uid}, not {'root' if owner == ROOT_UID else f'uid {owner}'}"
    if info.st_mode & 0o022:
        return f"{where} is writable by its group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _open_below(folder: int, name: str, where: str, flags: int) -> int:
    """``name`` in the open ``folder``, never through a symbolic link."""
    try:
        return os.open(name, flags | os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
    except FileNotFoundError:
        raise MissingFile(f"{where} does not exist") from None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            link = stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
            raise UntrustedFile(f"{where} is {'a symbolic link (not followed)' if link else 'not a folder'}") from None
        raise UntrustedFile(f"{where}: cannot read it: {error.strerror}") from None


def read_roots_file(path: str, max_bytes: int, owner: int = ROOT_UID, top: str = "/") -> bytes:
    """
    The first ``max_bytes`` + 1 bytes of ``path`` once it and every folder above it are ``owner``'s
    alone (``unsafe``), walked from ``top`` one open folder at a time (``/``; a test gives a folder of
    its own, whose own folders above are then not checked); the caller refuses more than
    ``max_bytes``. UntrustedFile (MissingFile where it does not exist) in one line otherwise.
    """
    below = PurePosixPath(os.path.abspath(path)).relative_to(os.path.abspath(top))
    *folders, name = (os.path.abspath(top), *below.parts)
    with ExitStack() as opened:

        def owners_alone(where: str, handle: int) -> int:
            opened.callback(os.close, handle)
            problem = unsafe(where, os.fstat(handle), owner)
            if problem:
                raise UntrustedFile(problem)
            return handle

        where = folders[0]
        folder = owners_alone(where, os.open(where, os.O_RDONLY | os.O_DIRECTORY))
        for part in folders[1:]:
            where = os.path.join(where, part)
            folder = owners_alone(where, _open_below(folder, part, where, os.O_DIRECTORY))
        handle = owners_alone(path, _open_below(folder, name, path, 0))
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise UntrustedFile(f"{path} is not a regular file")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(handle, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def settings_from_text(cls: type[Settings], text: str, source: str, what: str, paths: tuple[str, ...] = ()) -> Settings:
    """The settings dataclass ``cls`` (``what``: its name for a line) of the JSON ``text`` (as the
    deploy writes it), each field of its type (SETTING_TYPES), nothing unknown, each of ``paths``
    absolute; ValueError in one line naming ``source`` otherwise."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{source} nests values deeper than JSON settings do") from None
    except ValueError as error:
        raise ValueError(f"{source} is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{source} holds {type(data).__name__}, not {what}")
    types: dict[str, Any] = {item.name: item.type for item in fields(cls)}  # the annotations' text: "bool", "str"
    for key, value in data.items():
        if key not in types:
            raise ValueError(f"{source}: unknown setting {key!r}")
        wanted = SETTING_TYPES[types[key]]
        if type(value) is not wanted:  # not isinstance: a bool is an int, and no int is a setting here
            raise ValueError(f"{source}: {key} is {type(value).__name__}, not {wanted.__name__}")
    for key in paths:
        if key in data and not os.path.isabs(data[key]):
            raise ValueError(f"{source}: {key} is not an absolute path")
    return cls(**data)


def settings_from_file(
    cls: type[Settings], path: str, what: str, top: str = "/", paths: tuple[str, ...] = ()
) -> Settings:
    """``settings_from_text`` of ``path``, read only when root alone can have written it and every
    folder above it (``read_roots_file``; ``top``: where that walk starts); UntrustedFile or
    ValueError in one line."""
    data = read_roots_file(path, MAX_SETTINGS_BYTES, top=top)
    if len(data) > MAX_SETTINGS_BYTES:
        raise ValueError(f"{path} is larger than {what} are ({MAX_SETTINGS_BYTES // 1024} KiB)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text: {error.reason} at byte {error.start}") from None
    return settings_from_text(cls, text, path, what, paths)


def write_json_durably(path: str, data: object) -> None:
    """``data`` as JSON at ``path``, whole after a crash or a power loss too: a temporary file beside it
    (0600, as mkstemp makes it) flushed to disk before it is renamed over ``path``, and the folder
    flushed after (the rename is on disk only then). Without the flushes a rename can reach the disk
    before the file's bytes: an empty or partial file after a power loss."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    opened = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(opened)
    finally:
        os.close(opened)
