"""
The undo run's operations (deploy/tasks/undo.py): each file gpu-node recorded put back, from what
its record and the node hold now (deploy/facts/records.py), and the records forgotten once done.

A file still holding what gpu-node last wrote gets its original back byte for byte (copied on the
node from its record, with its mode and owner), or goes where gpu-node created it. A file changed
since keeps every edit: a runtime config (TOML, JSON) loses only the values gpu-node set that it
still holds (deploy/runtimes/reverse_merge.py); any other file is left byte for byte, its original kept in
its record. Runtime configs change through the safe install (deploy/operations/safe_install.py):
backed up, swapped, their unit restarted and watched, rolled back if it does not come back.
"""

from __future__ import annotations

import shlex
from collections.abc import Container
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from ..foundations.pyinfra_api import Commands
from ..foundations.toml_layout import ConfigError
from ..node import records as node_records
from ..runtimes import reverse_merge
from ..runtimes.docker.daemon_json import DaemonConfigError, parse_daemon_json, render_daemon_json
from . import safe_install
from .package_manager import PackageManager
from .upload import symlink_refusal

RESTORE, REMOVE, MERGE, KEEP, FORGET = "restore", "remove", "merge", "keep", "forget"


@dataclass(frozen=True)
class FileUndo:
    """What the undo run does to one recorded file, and its one line saying so and why."""

    record: dict[str, Any]  # deploy/facts/records.py NodeRecords's, for this file
    action: str  # RESTORE, REMOVE, MERGE (``content``), KEEP (left byte for byte), FORGET (nothing to change)
    line: str
    content: str | None = None

    @property
    def path(self) -> str:
        path: str = self.record["path"]
        return path

    @property
    def folder(self) -> str:
        """The record's folder on the node."""
        return f"{node_records.FILES_DIR}/{self.record['id']}"

    @property
    def changes(self) -> bool:
        return self.action in (RESTORE, REMOVE, MERGE)


def _merged(record: dict[str, Any]) -> tuple[str | None, str]:
    """The live file with gpu-node's values taken out (None: none left in it), and what was taken
    out; ConfigError/DaemonConfigError when that cannot be done safely."""
    path, live = record["path"], record["live_text"]
    original = record["original_text"] if not record["absent"] else None
    written = record["written_text"]
    if live is None or written is None or (original is None and not record["absent"]):
        raise ConfigError(f"{path}: its record does not hold the texts to compare")
    if record["format"] == node_records.TOML:
        if original is None:  # absent (checked above)
            # gpu-node wrote it whole (containerd's default config and the wiring): which values were the
            # wiring is not known.
            raise ConfigError(
                f"{path}: gpu-node created it (from the runtime's default config), so the values "
                "its wiring set are not known apart from the rest"
            )
        text, result = reverse_merge.reverse_toml(live, original, written, path)
        return (text if result.changed else None), reverse_merge.described(result)
    result = reverse_merge.reverted(
        parse_daemon_json(live, path),
        parse_daemon_json(original, f"{path} (before gpu-node)") if original else {},
        parse_daemon_json(written, f"{path} (as gpu-node wrote it)"),
    )
    return (render_daemon_json(result.result) if result.changed else None), reverse_merge.described(result)


def decide(record: dict[str, Any]) -> FileUndo:
    """What to do with one recorded file (see the module), and the line that says it."""
    path = record["path"]
    kept_at = f"{node_records.FILES_DIR}/{record['id']}/{node_records.ORIGINAL}"
    if record["earlier"]:
        backups = sorted(record["leftovers"])
        return FileUndo(
            record,
            KEEP,
            f"{path}: left as it is: gpu-node changed it before it kept records "
            "(a run of gpu-node 0.1), so what it held before gpu-node is not known"
            + (f"; its oldest backup is {backups[0]}" if backups else ""),
        )
    if record["live"] in ("link", "other"):
        return FileUndo(
            record,
            KEEP,
            f"{path}: left as it is: it is no longer a regular file (a symbolic link or "
            f"another kind) since gpu-node wrote it"
            + ("" if record["absent"] else f"; its original is kept at {kept_at}"),
        )
    if record["live"] is None:
        if record["absent"]:
            return FileUndo(record, FORGET, f"{path}: not there, as before gpu-node")
        return FileUndo(
            record,
            KEEP,
            f"{path}: left absent: someone removed it since gpu-node last wrote it; its original is kept at {kept_at}",
        )
    if not record["absent"] and record["live_sha256"] == record["original_sha256"]:
        return FileUndo(record, FORGET, f"{path}: holds what it held before gpu-node already")
    if record["written_sha256"] is not None and record["live_sha256"] == record["written_sha256"]:
        if record["absent"]:
            return FileUndo(
                record, REMOVE, f"{path}: removed: gpu-node created it, and it is as gpu-node last wrote it"
            )
        return FileUndo(
            record,
            RESTORE,
            f"{path}: restored byte for byte as it was before gpu-node (mode and owner "
            f"{record['original_stat']}): it is as gpu-node last wrote it",
        )
    if record["format"] not in (node_records.TOML, node_records.JSON):
        return FileUndo(
            record,
            KEEP,
            f"{path}: left as it is: changed since gpu-node last wrote it, and gpu-node "
            "takes its own values out only of runtime configs"
            + ("" if record["absent"] else f"; its original is kept at {kept_at}"),
        )
    try:
        merged, taken = _merged(record)
    except (ConfigError, DaemonConfigError) as error:
        return FileUndo(
            record,
            KEEP,
            f"left as it is: {error}" + ("" if record["absent"] else f"; its original is kept at {kept_at}"),
        )
    if merged is None:
        return FileUndo(
            record,
            FORGET,
            f"{path}: left as it is: changed since gpu-node last wrote it, and none of "
            "the values gpu-node set is left in it",
        )
    return FileUndo(
        record,
        MERGE,
        f"{path}: changed since gpu-node last wrote it: the values gpu-node set taken back "
        f"out ({taken}), every other edit kept",
        content=merged,
    )


def forget_script(undo: FileUndo) -> str:
    """Shell, once the file is as the undo leaves it: gpu-node's backups of it and its record go."""
    path = shlex.quote(undo.path)
    return (
        f"rm -f -- {path}{safe_install.BACKUP_INFIX}* {path}{safe_install.REJECTED_INFIX}* "
        f"&& rm -rf -- {shlex.quote(undo.folder)}"
    )


def _unchanged_since_read(undo: FileUndo) -> str:
    """Shell that ends the script in one line when the file changed after this run read it."""
    expected = undo.record["live_sha256"] or ""
    return (
        f'now=$( [ -f "$dest" ] && [ ! -L "$dest" ] && sha256sum <"$dest" | cut -c1-64 )\n'
        f'[ "$now" = {shlex.quote(expected)} ] || fail "$dest changed while the undo ran: not changed; run it again"\n'
    )


@operation(is_idempotent=False)
def put_back_file(undo: FileUndo, restart: bool = True, restart_timeout: int = 30) -> Commands:
    """
    Put one recorded file back as ``undo`` decided (``decide``): restored from its record, removed,
    or its wiring taken out, through the safe install; then its backups and its record go. With
    ``restart``, the unit that reads it is restarted (when it is active) and watched, the file put
    back as it was if the unit does not come back.

    + undo: the decision for the file (``FileUndo``)
    + restart: restart the file's unit after the change (the last file of that unit)
    + restart_timeout: seconds the unit has to become active before the rollback
    """
    if not undo.changes:
        if undo.action == FORGET:
            yield StringCommand(forget_script(undo))
        else:
            host.noop(undo.line)
        return
    service = (undo.record["unit"] or None) if restart else None
    finished = forget_script(undo)
    if undo.action == REMOVE:
        yield StringCommand(
            _guarded(safe_install.removal_script(undo.path, service, restart_timeout, finished=finished), undo, service)
        )
        return
    if undo.action == MERGE:
        assert undo.content is not None  # a merge's text (merged_text)
        placed = yield from safe_install._staged_candidate(undo.path, undo.content)
        mode_owner = None
    else:
        original = shlex.quote(f"{undo.folder}/{node_records.ORIGINAL}")
        placed = (
            symlink_refusal(undo.path)
            + f'(umask 077 && rm -f -- "$candidate" && cp -- {original} "$candidate") '
            + f'|| {{ rm -f -- "$candidate"; fail "could not copy {undo.folder}/original beside $dest; it was not changed"; }}\n'
        )
        mode, _, owner = (undo.record["original_stat"] or "644 0:0").partition(" ")
        mode_owner = (mode, owner)
    script = safe_install.install_script(
        undo.path, None, service, restart_timeout, placed=placed, mode_owner=mode_owner, finished=finished
    )
    yield StringCommand(_guarded(script, undo, service))


def _guarded(script: str, undo: FileUndo, service: str | None) -> str:
    """``script`` after its header, checking first that the file is what this run read, and restarting
    only a unit that is active (the undo does not start what was stopped)."""
    header, _, rest = script.partition("finished() {")
    rest = "finished() {" + rest
    active = (
        'if [ -n "$unit" ] && ! systemctl is-active --quiet "$unit"; then unit=""; pending=""; fi\n' if service else ""
    )
    return header + _unchanged_since_read(undo) + active + rest


# Packages, holds, keys. -----------------------------------------------------------------------------


@operation()
def release_holds(manager: PackageManager, names: list[str], lock_timeout: int) -> Commands:
    """
    Release the holds gpu-node placed (``names``, those it recorded) that are still there, as the
    family's ``manager`` holds (``apt-mark unhold``, ``dnf versionlock delete``, ``zypper removelock``,
    pacman's IgnorePkg).
    """
    commands = manager.released_holds(names, lock_timeout)
    if not commands:
        host.noop("no hold gpu-node placed is left")
        return
    yield from commands


@operation()
def remove_packages(manager: PackageManager, names: list[str], lock_timeout: int) -> Commands:
    """
    Remove the packages gpu-node installed (``names``, those it recorded: named or pulled in, none
    the node had before) that are still installed (the family's ``manager``'s fact of them), and
    nothing else: a removal that would take another package with it fails the host in one line,
    nothing removed.
    """
    installed: Container[str] = host.get_fact(manager.installed_fact)
    present = sorted(name for name in names if name in installed)
    if not present:
        host.noop("none of the packages gpu-node installed is left")
        return
    if manager.lock.holders is not None:
        # rpm and pacman do not wait for a busy manager's lock (apt-get does, bounded, by its option)
        yield StringCommand(manager.lock.script(lock_timeout))
    yield manager.removal(present, lock_timeout)


@operation()
def remove_rpm_keys(keys: list[str]) -> Commands:
    """Take the keys gpu-node imported into rpm's database (``keys``: gpg-pubkey-KEYID-DATE) back out."""
    words = " ".join(shlex.quote(key) for key in keys)
    yield StringCommand(
        f'for key in {words}; do if rpm -q "$key" >/dev/null 2>&1; then rpm -e "$key" || exit 1; fi; done'
    )


@operation()
def remove_own_files(paths: list[str]) -> Commands:
    """Remove gpu-node's own files from a run before it kept records (known by their first line)."""
    yield StringCommand("rm", "-f", "--", *[QuoteString(path) for path in paths])


@operation()
def remove_folders(paths: list[str]) -> Commands:
    """Remove the folders gpu-node made (``paths``, deepest first) that are still folders, reached
    through no symbolic link, with nothing in them: a file that came in since the undo read the node
    stays, with its folder (rmdir's own check, which no file can slip past)."""
    words = " ".join(shlex.quote(path) for path in paths)
    yield StringCommand(
        f'for folder in {words}; do if [ "$({UNLINKED_FOLDER})" = "$folder" ]; then '
        'rmdir --ignore-fail-on-non-empty -- "$folder" || exit 1; fi; done'
    )


# Shell: the real path of "$folder" where it is a folder (none where it is not), to compare with it.
UNLINKED_FOLDER = 'cd -P -- "$folder" 2>/dev/null && pwd -P'


def forget_removed_folders() -> str:
    """Shell: the record of the folders gpu-node made reduced to those still there, so that a folder a
    package makes later at the path of one the undo removed is not taken for gpu-node's."""
    made = shlex.quote(node_records.CREATED_FOLDERS)
    return (
        f"{{ [ ! -f {made} ] || {{ while IFS= read -r folder; do "
        f'if [ "$({UNLINKED_FOLDER})" = "$folder" ]; then printf "%s\\n" "$folder"; fi; '
        f"done <{made} | (umask 077 && cat >{made}.new) && mv -f -- {made}.new {made}; }}; }}"
    )


@operation()
def forget_records(kept: list[str]) -> Commands:
    """
    Remove gpu-node's records (deploy/node/records.py) once the undo is done, but the records of the
    files it left as they are (``kept``: their record folders' names), whose originals stay there, with
    the record of the folders gpu-node made (a later undo that takes those files takes their folder
    too), and the module signing key gpu-node generated (node_records.SIGNING_KEYS, no record); the
    folder goes when nothing is left in it.
    """
    records = shlex.quote(node_records.RECORDS_DIR)
    signing_keys = shlex.quote(node_records.SIGNING_KEYS)
    if not kept:
        yield StringCommand(
            f"find {records} -mindepth 1 -maxdepth 1 ! -name {signing_keys} -exec rm -rf -- {{}} + "
            f"&& {{ [ -d {records}/{signing_keys} ] || rmdir -- {records}; }}"
        )
        return
    names = " ".join(f"! -name {shlex.quote(name)}" for name in kept)
    created_folders = shlex.quote(PurePosixPath(node_records.CREATED_FOLDERS).name)
    yield StringCommand(
        f"find {records} -mindepth 1 -maxdepth 1 ! -name files ! -name {created_folders} ! -name {signing_keys} "
        f"-exec rm -rf -- {{}} + && {forget_removed_folders()} "
        f"&& find {shlex.quote(node_records.FILES_DIR)} -mindepth 1 -maxdepth 1 {names} -exec rm -rf -- {{}} +"
    )
