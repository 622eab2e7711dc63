"""
Files on the controller (``@local``) written or removed below a folder without following a symbolic
link anywhere on the way: the folder itself, each folder below it and the file. GitOps repositories
carry links, and a render that wrote ``manifests/runtimeclass.yaml -> ~/victim`` by its path would
overwrite the victim.

Each folder is opened from the one above it by its file descriptor with ``O_NOFOLLOW`` (a path is
resolved again by every call that takes one, a link included); a file is written to a temporary
file in its own folder, mode 0644, and renamed over the old one (a reader sees the old bytes or the
new, never half); a link found anywhere is refused in one line naming it, and nothing is changed.
deploy/reports/node_report.py's ``write_text_file`` (also a temporary file and a rename) goes by path, through
links, and leaves 0600: it does not fit here.

The operations run their command in the controller's own process (a ``FunctionCommand``): they are
for ``@local`` alone, and read the files they compare while planning from the same machine.
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.output import format_text
from pyinfra.operations.util.files import generate_color_diff

from ..foundations.pyinfra_api import Commands
from .failure import fail_host, failing_command

if TYPE_CHECKING:
    from pyinfra.api import Host, State

FILE_MODE = 0o644
FOLDER_MODE = 0o755
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefusal(Exception):
    """A symbolic link (or something other than a folder or regular file) where a controller file's
    path goes: the message is the one line naming it."""


@dataclass(frozen=True)
class ControllerFile:
    """``relative`` (a/b.yaml) in ``folder`` (as the settings give it, relative to ``base`` unless
    absolute): ``base``, the working directory, is the one part of the path whose links are the
    operator's own."""

    base: str
    folder: str
    relative: str

    @property
    def path(self) -> str:
        """The path as the run's output shows it."""
        return os.path.join(self.base, self.folder, self.relative)

    @property
    def shown(self) -> str:
        """The path as a refusal names it."""
        return posixpath.join(self.folder, self.relative)

    @property
    def name(self) -> str:
        return self.relative.split("/")[-1]

    def walk(self) -> tuple[str, list[tuple[str, str]]]:
        """Where the walk starts, and each folder it opens in turn: its name, and its path as a refusal names it."""
        absolute = self.folder.startswith("/")
        names = [name for name in self.folder.split("/") if name not in ("", ".")] + self.relative.split("/")[:-1]
        shown, steps = "/" if absolute else "", []
        for name in names:
            shown = posixpath.join(shown, name)
            steps.append((name, shown))
        return ("/" if absolute else self.base), steps


def refusal(shown: str, folder: int, name: str) -> LinkRefusal:
    """The one line for ``name`` in ``folder``, found to be no folder or regular file where one goes."""
    try:
        found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError as error:
        return LinkRefusal(f"{shown}: cannot be read ({error.strerror}): no file written or removed")
    if stat.S_ISLNK(found.st_mode):
        return LinkRefusal(
            f"{shown} is a symbolic link (to {os.readlink(name, dir_fd=folder)}): no file is written "
            "or removed through a link; make it a folder or file of its own, or write elsewhere"
        )
    return LinkRefusal(f"{shown} is neither a folder nor a regular file: no file written or removed")


def _open_below(folder: int, name: str, shown: str) -> int:
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refusal(shown, folder, name) from None
        raise


@contextmanager
def opened_folder(target: ControllerFile, create: bool) -> Iterator[int | None]:
    """The file's folder, opened without following a link; None when it does not exist and
    ``create`` is False; made 0755 on the way when ``create``."""
    start, steps = target.walk()
    descriptor = os.open(start, FOLDER_FLAGS & ~os.O_NOFOLLOW)
    try:
        for name, shown in steps:
            try:
                following = _open_below(descriptor, name, shown)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                with suppress(FileExistsError):  # made in between: opened and checked below as any other
                    os.mkdir(name, FOLDER_MODE, dir_fd=descriptor)
                following = _open_below(descriptor, name, shown)
            os.close(descriptor)
            descriptor = following
        yield descriptor
    finally:
        os.close(descriptor)


def file_state(folder: int, target: ControllerFile) -> os.stat_result | None:
    """The file's own status (None: absent); a link or anything but a regular file refused."""
    try:
        found = os.stat(target.name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(found.st_mode):
        raise refusal(target.shown, folder, target.name)
    return found


def current(target: ControllerFile, limit: int) -> tuple[bytes, int] | None:
    """The file's first ``limit`` bytes and its mode (None: absent); a link on the way refused."""
    with opened_folder(target, create=False) as folder:
        if folder is None or file_state(folder, target) is None:
            return None
        # O_NONBLOCK: a FIFO put there since its status was read does not hang the run
        descriptor = os.open(target.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        with os.fdopen(descriptor, "rb") as stream:
            found = os.fstat(descriptor)
            if not stat.S_ISREG(found.st_mode):
                raise refusal(target.shown, folder, target.name)
            return stream.read(limit), stat.S_IMODE(found.st_mode)


def check_path(target: ControllerFile) -> bool:
    """Whether the file exists; LinkRefusal where its path meets a link."""
    with opened_folder(target, create=False) as folder:
        return folder is not None and file_state(folder, target) is not None


def _write(state: State, host: Host, target: ControllerFile, data: bytes) -> bool:
    try:
        with opened_folder(target, create=True) as folder:
            assert folder is not None  # made where it was missing (create=True)
            file_state(folder, target)
            temporary = f".{target.name}.{secrets.token_hex(8)}"
            descriptor = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=folder
            )
            try:
                with os.fdopen(descriptor, "wb") as stream:
                    os.fchmod(descriptor, FILE_MODE)  # whatever the umask took away
                    stream.write(data)
                # a link put there since the check is replaced by the rename, never followed
                os.rename(temporary, target.name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                os.unlink(temporary, dir_fd=folder)
                raise
    except LinkRefusal as refused:
        return fail_host(state, host, str(refused))
    except OSError as error:
        return fail_host(state, host, f"cannot write {target.path}: {error.strerror}")
    return True


def _remove(state: State, host: Host, target: ControllerFile) -> bool:
    try:
        with opened_folder(target, create=False) as folder:
            if folder is not None and file_state(folder, target) is not None:
                os.unlink(target.name, dir_fd=folder)
    except LinkRefusal as refused:
        return fail_host(state, host, str(refused))
    except OSError as error:
        return fail_host(state, host, f"cannot remove {target.path}: {error.strerror}")
    return True


def show_diff(target: ControllerFile, old: bytes | None, text: str) -> None:
    """What ``--diff`` prints, as pyinfra's files.put prints it."""
    host.log(f"Will {'create' if old is None else 'modify'} {format_text(target.path, bold=True)}", logger.info)
    old_lines = [] if old is None else old.decode(errors="replace").splitlines(keepends=True)
    for line in generate_color_diff(old_lines, text.splitlines(keepends=True)):
        logger.info("  %s", line)
    logger.info("")


@operation()
def put_text(target: ControllerFile, text: str) -> Commands:
    """``text`` as the controller file ``target``, mode 0644, through a temporary file and a rename."""
    data = text.encode()
    try:
        found = current(target, len(data) + 1)
    except LinkRefusal as refused:
        yield failing_command(str(refused))
        return
    if found == (data, FILE_MODE):
        host.noop(f"{target.path} is up to date")
        return
    if host.state.config.DIFF:
        show_diff(target, found and found[0], text)
    yield FunctionCommand(_write, (target, data), {})


@operation()
def remove(target: ControllerFile) -> Commands:
    """Remove the controller file ``target`` (a link on the way refused, not followed)."""
    try:
        present = check_path(target)
    except LinkRefusal as refused:
        yield failing_command(str(refused))
        return
    if not present:
        host.noop(f"{target.path} does not exist")
        return
    yield FunctionCommand(_remove, (target,), {})
