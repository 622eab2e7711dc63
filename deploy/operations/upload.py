"""
The one way gpu-node puts a file's bytes on a node: no one but root (and the login user, whose
session carries them and who can become root anyway) can read them at any moment.

pyinfra's own upload over SSH with ``--sudo`` (``--doas``, ``--su-user`` ...) writes the bytes as the
login user to ``<tmp>/pyinfra-<sha1 of the destination>`` with the default umask (0644, at a name
anyone can compute in a folder anyone can write) and then ``sudo cp``s them; without elevation it
writes the destination itself, 0644 until a later chmod. Runtime configs keep registry credentials.
So an upload here is staged:

1. the login user makes a folder with an unpredictable name, mode 0700, and in it an empty file
   0600 per upload (an SFTP write keeps the mode of the file it overwrites);
2. the bytes go there over SFTP as the login user, without elevation (no pyinfra ``cp`` or ``rm``);
3. the root script that consumes them (``place_script``, the first part of each install script)
   refuses a live file that is a symbolic link, copies each upload to its path beside the live file
   under umask 077 (0600 root from its first byte until the script's own chmod at the swap) and
   removes the folder; a copy that fails (a full disk) removes what it wrote and ends the script
   with one line.

A run killed between 2 and 3 leaves the folder: 0700, its file 0600, neither readable by others.
"""

from __future__ import annotations

import posixpath
import secrets
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any

from pyinfra.api import FileUploadCommand, StringCommand
from pyinfra.api.arguments import ConnectorArguments
from pyinfra.api.command import PyinfraCommand

from ..foundations import shell_scripts

if TYPE_CHECKING:
    from pyinfra.api import Host

# What an operation's ``_sudo``, ``_doas``, ``_dzdo`` and ``_su_user`` become for the staging
# commands: they run as the login user, who owns the staging folder.
AS_LOGIN_USER: ConnectorArguments = {
    "_sudo": False,
    "_doas": False,
    "_dzdo": False,
    "_su_user": None,  # type: ignore[typeddict-item]  # pyinfra's own default, which its TypedDict leaves out
}
STAGING_PREFIX = "gpu-node-"


@dataclass(frozen=True)
class Upload:
    """``content`` for ``path``; ``live``: the file it will replace (refused if a symbolic link)."""

    path: str
    content: bytes
    live: str | None = None


def symlink_refusal(live: str) -> str:
    """The shell lines that end a script in one line when ``live`` is a symbolic link."""
    return shell_scripts.body("refuse_link") + f"refuse_link {shlex.quote(live)}\n"


@dataclass(frozen=True)
class Staging:
    """One operation's uploads, staged in a folder of their own (see the module docstring)."""

    folder: str
    uploads: tuple[Upload, ...]

    @classmethod
    def new(cls, host: Host, uploads: Sequence[Upload]) -> Staging:
        """A staging folder for ``uploads`` with an unpredictable name in pyinfra's temp directory
        (the operation's ``_temp_dir``, else the config's ``TEMP_DIR``, else /tmp)."""
        arguments: dict[str, Any] = dict(host.current_op_global_arguments or {})
        config = host.state.config
        directory = arguments.get("_temp_dir") or config.TEMP_DIR or config.DEFAULT_TEMP_DIR
        name = STAGING_PREFIX + secrets.token_hex(16)
        return cls(posixpath.join(str(directory), "pyinfra-" + name), tuple(uploads))

    def staged(self, index: int) -> str:
        return f"{self.folder}/{index}"

    def commands(self) -> Iterator[PyinfraCommand]:
        """The login user's part: the private folder and its empty files, then the uploads."""
        quote = shlex.quote
        empties = " && ".join(f": > {quote(self.staged(index))}" for index in range(len(self.uploads)))
        yield StringCommand(f"umask 077 && mkdir -m 700 {quote(self.folder)} && {empties}", **AS_LOGIN_USER)
        for index, upload in enumerate(self.uploads):
            yield FileUploadCommand(BytesIO(upload.content), self.staged(index), **AS_LOGIN_USER)

    def place_script(self) -> str:
        """
        Root's part, the first lines of the script that consumes the uploads: each live file that
        is a symbolic link refused, then each upload copied to its path (0600 root) and the staging
        folder removed; on a failure, the copies too, and one line (deploy/shell/place_uploads.sh).
        A subshell: its umask stays there.
        """
        uploads = [
            word
            for index, upload in enumerate(self.uploads)
            for word in (self.staged(index), upload.path, upload.live or "")
        ]
        return (
            "("
            + shell_scripts.assignments(uploads, staging=self.folder)
            + shell_scripts.body("refuse_link")
            + shell_scripts.body("place_uploads")
            + ") || exit 1\n"
        )
