"""
Install a runtime config file without ever leaving the node on a broken one.

One machinery for containerd's config.toml and Docker's daemon.json:

1. the candidate is uploaded next to the live file (same directory: same filesystem for an
   atomic rename, and relative ``imports`` resolve the same way), 0600 root from its first byte
   (``deploy/operations/upload.py``); a live file that is a symbolic link is refused;
2. the real daemon binary checks it (``containerd --config C config dump``,
   ``dockerd --validate --config-file C``); a rejected candidate is removed and nothing else moves;
3. the live file is kept as ``FILE.gpu-node-backup-TIMESTAMP``, mode 0600 (credentials);
4. the candidate becomes the live file by rename, root:root, mode 0644 (or the live file's
   mode when that is stricter), the candidate and the backup flushed to disk before the rename
   and the folder after it; a mark under ``PENDING_RESTART_DIR`` says a restart is due; all but
   the newest ``keep_backups`` backups are removed. A step that fails (a full disk) removes what
   the swap wrote, so the live file stays as it was and nothing is left beside it;
5. the service is restarted and must be active within a bounded wait; if not, the backup is
   put back, the service restarted on it, and the host fails with both outcomes shown.

The remote part is one shell script so that a lost connection between steps cannot
leave a half-done swap, and so a no-change run costs no command at all.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import StringCommand, operation
from pyinfra.api.command import PyinfraCommand

from ..facts.recovery import PENDING_RESTART_DIR
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import Commands
from ..foundations.redact import shell_daemon_output_filter
from ..node import records as node_records
from .progress import announcing
from .upload import Staging, Upload

CANDIDATE_SUFFIX = ".gpu-node-candidate"
BACKUP_INFIX = ".gpu-node-backup-"
REJECTED_INFIX = ".gpu-node-rejected-"
# Backups (and rejected versions) of a file kept after a swap, unless the caller says otherwise.
KEEP_BACKUPS = 5


@dataclass(frozen=True)
class Validator:
    """A command that exits 0 when the candidate is good; ``{candidate}`` stands for its path."""

    argv: Sequence[str]
    what: str

    def argv_for(self, candidate: str) -> list[str]:
        """The command's words for the candidate at ``candidate``."""
        return [candidate if arg == "{candidate}" else arg for arg in self.argv]


def candidate_path(path: str) -> str:
    return path + CANDIDATE_SUFFIX


@dataclass(frozen=True)
class FileRecord:
    """How a swap records its file for the undo run (deploy/node/records.py): the unit that reads it
    (restarted when the undo changes it) and its format (toml, json: the undo can take the nvidia
    wiring back out of a file changed since)."""

    unit: str | None = None
    format: str = ""
    records_dir: str = node_records.RECORDS_DIR


def pending_restart_mark(service: str, directory: str = PENDING_RESTART_DIR) -> str:
    return f"{directory}/{service}"


def _script_header(path: str, service: str | None, timeout: int, pending_dir: str) -> str:
    return shell_scripts.script(
        "safe_install_header",
        dest=path,
        candidate=candidate_path(path),
        unit=service or "",
        timeout=int(timeout),
        pending=pending_restart_mark(service, pending_dir) if service else "",
        backup_infix=BACKUP_INFIX,
        rejected_infix=REJECTED_INFIX,
    )


def _validate_part(validator: Validator | None, path: str) -> str:
    if not validator:
        return ""
    return f"daemon_output_filter() {{ {shell_daemon_output_filter()}; }}\n" + shell_scripts.script(
        "safe_install_validate", validator.argv_for(candidate_path(path)), validator_what=validator.what
    )


# coreutils' sync, fsyncing the files it is given where it can (deploy/shell/flush.sh)
FLUSH_FUNCTION = shell_scripts.body("flush")


def _record_part(record: FileRecord | None) -> str:
    """The record of the live file before its first change, and the copy of what gpu-node last wrote
    kept aside while this swap may still be rolled back."""
    if record is None:
        return ""
    return node_records.library(record.records_dir) + shell_scripts.script(
        "safe_install_record", record_unit=record.unit or "", record_format=record.format
    )


def _swap_part(keep_backups: int, record: FileRecord | None = None, mode_owner: tuple[str, str] | None = None) -> str:
    forced_mode, forced_owner = mode_owner or ("", "")
    return (
        FLUSH_FUNCTION
        + shell_scripts.script("safe_install_prepare", forced_mode=forced_mode, forced_owner=forced_owner)
        # Recorded before this swap's own backup, which would read as a change before records were kept.
        + _record_part(record)
        + shell_scripts.script("safe_install_swap", keep_backups=int(keep_backups))
    )


_RESTART_FUNCTIONS = shell_scripts.body("safe_install_restart")
_RESTART_PART = _RESTART_FUNCTIONS + shell_scripts.body("safe_install_rollback")


def install_script(
    path: str,
    validator: Validator | None,
    service: str | None,
    timeout: int,
    pending_dir: str = PENDING_RESTART_DIR,
    placed: str = "",
    keep_backups: int = KEEP_BACKUPS,
    record: FileRecord | None = None,
    mode_owner: tuple[str, str] | None = None,
    finished: str = "",
) -> str:
    """
    The remote half of the safe install: validate, back up, swap, restart, roll back. ``placed``:
    the staging's ``place_script`` that puts the candidate in place first ("": it is there);
    ``record``: the file recorded for the undo run before its first change (None: not recorded);
    ``mode_owner``: the mode and owner the file gets (None: 0644 root, or the live file's stricter
    mode); ``finished``: shell run once the new file stays (installed, and its unit active again).
    """
    return (
        _script_header(path, service, timeout, pending_dir)
        + _finished(finished)
        + placed
        + _validate_part(validator, path)
        + _swap_part(keep_backups, record, mode_owner)
        + _RESTART_PART
    )


def _finished(finished: str) -> str:
    return f"finished() {{\n{finished}\n}}\n" if finished else ""


def removal_script(
    path: str, service: str | None, timeout: int, pending_dir: str = PENDING_RESTART_DIR, finished: str = ""
) -> str:
    """
    The safe install's removal of ``path`` (the undo run's, of a file gpu-node created): kept as a
    backup (0600), removed, the unit restarted, and the file put back if the unit does not come back.
    """
    return (
        _script_header(path, service, timeout, pending_dir)
        + _finished(finished)
        + FLUSH_FUNCTION
        + shell_scripts.body("safe_install_remove")
        + _RESTART_PART
    )


def validate_script(path: str, validator: Validator, placed: str = "") -> str:
    """
    Only the check of the candidate, for a swap that waits on something (a drain) first; the
    candidate goes either way, so a drain that fails leaves nothing beside the live file.
    """
    return (
        _script_header(path, None, 0, PENDING_RESTART_DIR)
        + placed
        + _validate_part(validator, path)
        + 'rm -f "$candidate"\n'
    )


def restart_pending_script(path: str, service: str, timeout: int, pending_dir: str = PENDING_RESTART_DIR) -> str:
    """Restart a unit whose config an interrupted run installed without restarting it."""
    return (
        _script_header(path, service, timeout, pending_dir)
        + _RESTART_FUNCTIONS
        + shell_scripts.body("safe_install_restart_pending")
    )


def _staged_candidate(path: str, content: str) -> Generator[str | PyinfraCommand, Any, str]:
    """The candidate's upload commands, and the script lines that put it in place."""
    staging = Staging.new(host, [Upload(candidate_path(path), content.encode(), live=path)])
    yield from staging.commands()
    return staging.place_script()


@operation(is_idempotent=False)
def install_file(
    path: str,
    content: str,
    validator: Validator | None = None,
    service: str | None = None,
    restart_timeout: int = 30,
    before_restart: Sequence[PyinfraCommand] = (),
    keep_backups: int = KEEP_BACKUPS,
    record: FileRecord | None = None,
) -> Commands:
    """
    Replace ``path`` with ``content`` safely (see the module docstring). Callers decide that the
    content differs and check it in Python when there is no ``validator``.

    + path: the live file
    + content: its new text
    + validator: the daemon's own check of the candidate (None: checked by the caller)
    + service: the systemd unit to restart and watch (None: no restart)
    + restart_timeout: seconds the unit has to become active before the rollback
    + before_restart: commands run once the candidate passed its check, before the swap and
      restart (a drain); given only with a service
    + keep_backups: how many ``FILE.gpu-node-backup-*`` stay after a swap (the newest)
    + record: how the file is recorded for the undo run before its first change (None: not recorded)
    """
    if service and before_restart:
        if validator:
            placed = yield from _staged_candidate(path, content)
            yield StringCommand(validate_script(path, validator, placed))
        # Nothing beside the live file while the drain runs: a failed drain leaves no candidate.
        yield from before_restart
        # The same bytes again: the checked candidate was removed in case the drain failed.
        placed = yield from _staged_candidate(path, content)
        yield announcing(restart_message(path, service, restart_timeout))
        yield StringCommand(
            install_script(
                path, None, service, restart_timeout, placed=placed, keep_backups=keep_backups, record=record
            )
        )
        return
    placed = yield from _staged_candidate(path, content)
    if service:
        yield announcing(restart_message(path, service, restart_timeout))
    yield StringCommand(
        install_script(
            path, validator, service, restart_timeout, placed=placed, keep_backups=keep_backups, record=record
        )
    )


def restart_message(path: str, service: str, timeout: int) -> str:
    """What a runtime's swap and restart says as it starts (its daemon has a bounded time to come back)."""
    return (
        f"installing the new {path} and restarting {service}: it has {timeout} s (service_restart_timeout) "
        f"to be active again, else the previous {path} goes back; a failure quotes journalctl -u {service}"
    )


@operation(is_idempotent=False)
def restart_after_interruption(
    path: str, service: str, restart_timeout: int = 30, before_restart: Sequence[PyinfraCommand] = ()
) -> Commands:
    """Restart ``service``, which an interrupted run left running on an old ``path``."""
    yield from before_restart
    yield StringCommand(restart_pending_script(path, service, restart_timeout))


def file_in_place(
    path: str,
    service: str | None,
    restart_pending: bool,
    restart_timeout: int,
    before_restart: Sequence[PyinfraCommand],
    noop_message: str,
) -> Commands:
    """``path`` already holds what it should: restart only what an interrupted run left pending."""
    if restart_pending and service:
        yield from restart_after_interruption._inner(
            path=path,
            service=service,
            restart_timeout=restart_timeout,
            before_restart=before_restart,
        )
        return
    host.noop(noop_message)
