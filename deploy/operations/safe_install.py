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

import shlex
from dataclasses import dataclass
from typing import Sequence

from pyinfra import host
from pyinfra.api import StringCommand, operation
from pyinfra.api.command import PyinfraCommand

from .. import node_records
from ..facts.recovery import PENDING_RESTART_DIR
from .progress import announcing
from .upload import Staging, Upload
from ..redact import shell_daemon_output_filter

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

    def command(self, candidate: str) -> str:
        """The shell command; ``candidate`` is inserted as given (e.g. a quoted variable)."""
        return " ".join(candidate if arg == "{candidate}" else shlex.quote(arg) for arg in self.argv)


def candidate_path(path: str) -> str:
    return path + CANDIDATE_SUFFIX


@dataclass(frozen=True)
class FileRecord:
    """How a swap records its file for the undo run (deploy/node_records.py): the unit that reads it
    (restarted when the undo changes it) and its format (toml, json: the undo can take the nvidia
    wiring back out of a file changed since)."""

    unit: str | None = None
    format: str = ""
    records_dir: str = node_records.RECORDS_DIR



def pending_restart_mark(service: str, directory: str = PENDING_RESTART_DIR) -> str:
    return f"{directory}/{service}"


def _script_header(path: str, service: str | None, timeout: int, pending_dir: str) -> str:
    quote = shlex.quote
    return f"""set -u
dest={quote(path)}
candidate={quote(candidate_path(path))}
unit={quote(service or "")}
timeout={int(timeout)}
pending={quote(pending_restart_mark(service, pending_dir) if service else "")}
stamp=$(date +%Y%m%dT%H%M%S)
fail() {{ printf 'gpu-node: %s\\n' "$@" >&2; exit 1; }}
gn_record=""
record_new=""
# what a swap that stays does last (the undo run's: its record and the backups go)
finished() {{ :; }}
"""


def _validate_part(validator: Validator | None) -> str:
    if not validator:
        return ""
    return f"""if ! check_output=$({validator.command('"$candidate"')} 2>&1); then
    rm -f "$candidate"
    # The daemon's complaint can quote a credential from the file: withheld.
    fail "$dest was not changed: {validator.what} rejected the new version:" \\
        "$(printf '%s\\n' "$check_output" | {shell_daemon_output_filter()})"
fi
"""


# coreutils' sync fsyncs the files it is given (8.24+); an older one takes none and flushes all.
FLUSH_FUNCTION = """flush() {
    if sync --help 2>/dev/null | grep -q -e --file-system; then sync -- "$@"; else sync; fi
}
"""


def _record_part(record: FileRecord | None) -> str:
    """The record of the live file before its first change, and the copy of what gpu-node last wrote
    kept aside while this swap may still be rolled back."""
    if record is None:
        return ""
    return (node_records.record_file('"$dest"', record.unit, record.format, record.records_dir)
            + """ || undo "could not record $dest before changing it (under $gn_records)"
record_new=$gn_new
rm -f -- "$gn_record/written.previous"
if [ -z "$record_new" ] && [ -e "$gn_record/written" ]; then
    cp -p -- "$gn_record/written" "$gn_record/written.previous" || undo "could not record $dest before changing it"
fi
""")


def _swap_part(keep_backups: int, record: FileRecord | None = None, mode_owner: tuple[str, str] | None = None) -> str:
    mode_owner = (f"mode={shlex.quote(mode_owner[0])}\nowner={shlex.quote(mode_owner[1])}\n" if mode_owner else "")
    return f"""{FLUSH_FUNCTION}# What this swap wrote goes if it cannot finish: the live file stays as it was, alone.
backup=""
new_pending=""
undo() {{
    rm -f -- "$candidate" ${{backup:+"$backup"}} ${{new_pending:+"$new_pending"}}
    [ -z "$record_new" ] || rm -rf -- "$gn_record"
    fail "$1; $dest was not changed"
}}
# 0644, or the live file's mode when it denies others (it may hold registry credentials); the
# undo run's restore gives the original's (mode_owner).
mode=0644
owner=root:root
if [ -e "$dest" ]; then
    live_mode=$(stat -c %a "$dest") && live_owner=$(stat -c %u:%g "$dest") || undo "could not read $dest"
    case $live_mode in *[0-3]) mode=$live_mode ;; esac
fi
{mode_owner}chown "$owner" "$candidate" && chmod "$mode" "$candidate" || undo "could not set owner and mode of $candidate"
# Recorded before this swap's own backup, which would read as a change before records were kept.
{_record_part(record)}if [ -e "$dest" ]; then
    backup="$dest{BACKUP_INFIX}$stamp"
    # 0600: containerd configs can hold registry credentials.
    error=$(install -p -m 0600 -o root -g root "$dest" "$backup" 2>&1) || undo "could not back up $dest: $error"
fi
if [ -n "$pending" ]; then
    # A mark an interrupted run left stays if this swap is undone: its restart is still due.
    [ -e "$pending" ] || new_pending=$pending
    error=$(mkdir -p "${{pending%/*}}" 2>&1 && printf '%s\\n' "$dest" 2>&1 >"$pending.new" \\
        && mv -f "$pending.new" "$pending" 2>&1) || {{ rm -f "$pending.new"; undo "could not write $pending: $error"; }}
fi
error=$(flush "$candidate" ${{backup:+"$backup"}} ${{pending:+"$pending"}} 2>&1) \\
    || undo "could not flush $candidate to disk: $error"
mv -f "$candidate" "$dest" || undo "could not move $candidate over $dest"
flush "$(dirname "$dest")"
[ -z "$gn_record" ] || {{ gn_wrote_file "$dest"; flush "$gn_record"/* "$gn_record"; }}
prune() {{
    # The newest {keep_backups} of FILE$1TIMESTAMP stay (the names sort by time).
    set -- "$dest$1"*
    [ -e "$1" ] || return 0
    surplus=$(( $# - {int(keep_backups)} ))
    while [ "$surplus" -gt 0 ]; do rm -f -- "$1"; shift; surplus=$(( surplus - 1 )); done
}}
LC_ALL=C prune {BACKUP_INFIX}
LC_ALL=C prune {REJECTED_INFIX}
echo "installed $dest${{backup:+ (previous version kept as $backup, mode 0600)}}"
[ -n "$unit" ] || {{ finished; exit 0; }}
"""


_RESTART_FUNCTIONS = """wait_active() {
    deadline=$(( $(date +%s) + timeout ))
    while :; do
        # Active twice a second apart: a daemon that dies right after start is not up.
        if systemctl is-active --quiet "$unit" && sleep 1 && systemctl is-active --quiet "$unit"; then
            return 0
        fi
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 1
    done
}
restart() {
    restart_output=$(timeout "$timeout" systemctl restart "$unit" 2>&1)
    restart_status=$?
    # A failed or killed restart leaves the old daemon active: that is not a restart.
    [ "$restart_status" -eq 0 ] && wait_active && return 0
    state=$(systemctl is-active "$unit" 2>&1)
    journal=$(journalctl -u "$unit" -n 8 --no-pager -o cat 2>/dev/null)
    why="$unit is $state, not active, ${timeout} s after 'systemctl restart' (exit $restart_status) $restart_output
$journal"
    return 1
}
"""

_RESTART_PART = f"""{_RESTART_FUNCTIONS}
if restart; then
    rm -f "$pending"
    finished
    echo "restarted $unit: active"
    exit 0
fi
first_error=$why
[ ! -e "$dest" ] || install -p -m 0600 -o root -g root "$dest" "$dest{REJECTED_INFIX}$stamp"
if [ -n "$backup" ]; then
    cp -p "$backup" "$candidate" && chmod "$live_mode" "$candidate" && chown "$live_owner" "$candidate" \\
        && flush "$candidate" && mv -f "$candidate" "$dest" && flush "$(dirname "$dest")"
    restored="restored the previous $dest from $backup"
else
    rm -f "$dest"
    restored="removed the new $dest (there was none before)"
fi
# The undo run's record follows the file back: no record of a change that did not stay.
if [ -n "$record_new" ]; then
    rm -rf -- "$gn_record"
elif [ -n "$gn_record" ] && [ -e "$gn_record/written.previous" ]; then
    mv -f -- "$gn_record/written.previous" "$gn_record/written"
fi
if restart; then
    rm -f "$pending"
    outcome="rollback: $restored; $unit is active again on it"
else
    outcome="rollback: $restored, but $why"
fi
fail "$unit did not come back on the new $dest (kept as $dest{REJECTED_INFIX}$stamp):" \\
    "$first_error" "$outcome"
"""


def install_script(path: str, validator: Validator | None, service: str | None, timeout: int,
                   pending_dir: str = PENDING_RESTART_DIR, placed: str = "",
                   keep_backups: int = KEEP_BACKUPS, record: FileRecord | None = None,
                   mode_owner: tuple[str, str] | None = None, finished: str = "") -> str:
    """
    The remote half of the safe install: validate, back up, swap, restart, roll back. ``placed``:
    the staging's ``place_script`` that puts the candidate in place first ("": it is there);
    ``record``: the file recorded for the undo run before its first change (None: not recorded);
    ``mode_owner``: the mode and owner the file gets (None: 0644 root, or the live file's stricter
    mode); ``finished``: shell run once the new file stays (installed, and its unit active again).
    """
    return (_script_header(path, service, timeout, pending_dir) + _finished(finished) + placed
            + _validate_part(validator) + _swap_part(keep_backups, record, mode_owner) + _RESTART_PART)


def _finished(finished: str) -> str:
    return f"finished() {{\n{finished}\n}}\n" if finished else ""


def removal_script(path: str, service: str | None, timeout: int, pending_dir: str = PENDING_RESTART_DIR,
                   finished: str = "") -> str:
    """
    The safe install's removal of ``path`` (the undo run's, of a file gpu-node created): kept as a
    backup (0600), removed, the unit restarted, and the file put back if the unit does not come back.
    """
    return (_script_header(path, service, timeout, pending_dir) + _finished(finished) + FLUSH_FUNCTION + """[ -e "$dest" ] || { finished; echo "$dest is not there"; exit 0; }
backup="$dest""" + BACKUP_INFIX + """$stamp"
live_mode=$(stat -c %a "$dest") && live_owner=$(stat -c %u:%g "$dest") || fail "could not read $dest; it was not removed"
error=$(install -p -m 0600 -o root -g root "$dest" "$backup" 2>&1 && flush "$backup" 2>&1) \\
    || { rm -f -- "$backup"; fail "could not back up $dest: $error; it was not removed"; }
if [ -n "$pending" ]; then
    error=$(mkdir -p "${pending%/*}" 2>&1 && printf '%s\\n' "$dest" 2>&1 >"$pending.new" \\
        && mv -f "$pending.new" "$pending" 2>&1) || { rm -f "$pending.new" "$backup"; fail "could not write $pending: $error; $dest was not removed"; }
fi
rm -f -- "$dest" || { rm -f -- "$backup"; fail "could not remove $dest"; }
flush "$(dirname "$dest")"
echo "removed $dest (kept as $backup until the undo is done, mode 0600)"
[ -n "$unit" ] || { finished; exit 0; }
""" + _RESTART_PART)


def validate_script(path: str, validator: Validator, placed: str = "") -> str:
    """
    Only the check of the candidate, for a swap that waits on something (a drain) first; the
    candidate goes either way, so a drain that fails leaves nothing beside the live file.
    """
    return (_script_header(path, None, 0, PENDING_RESTART_DIR) + placed + _validate_part(validator)
            + 'rm -f "$candidate"\n')


def restart_pending_script(path: str, service: str, timeout: int,
                           pending_dir: str = PENDING_RESTART_DIR) -> str:
    """Restart a unit whose config an interrupted run installed without restarting it."""
    return _script_header(path, service, timeout, pending_dir) + _RESTART_FUNCTIONS + """
if restart; then
    rm -f "$pending"
    echo "restarted $unit: active on $dest (an interrupted run had installed it without a restart)"
    exit 0
fi
fail "$unit did not come back after the restart an interrupted run left pending for $dest:" "$why"
"""


def _staged_candidate(path: str, content: str):
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
):
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
        yield StringCommand(install_script(path, None, service, restart_timeout, placed=placed,
                                           keep_backups=keep_backups, record=record))
        return
    placed = yield from _staged_candidate(path, content)
    if service:
        yield announcing(restart_message(path, service, restart_timeout))
    yield StringCommand(install_script(path, validator, service, restart_timeout, placed=placed,
                                       keep_backups=keep_backups, record=record))


def restart_message(path: str, service: str, timeout: int) -> str:
    """What a runtime's swap and restart says as it starts (its daemon has a bounded time to come back)."""
    return (f"installing the new {path} and restarting {service}: it has {timeout} s (service_restart_timeout) "
            f"to be active again, else the previous {path} goes back; a failure quotes journalctl -u {service}")

@operation(is_idempotent=False)
def restart_after_interruption(path: str, service: str, restart_timeout: int = 30,
                    before_restart: Sequence[PyinfraCommand] = ()):
    """Restart ``service``, which an interrupted run left running on an old ``path``."""
    yield from before_restart
    yield StringCommand(restart_pending_script(path, service, restart_timeout))


def file_in_place(path: str, service: str | None, restart_pending: bool, restart_timeout: int,
                  before_restart: Sequence[PyinfraCommand], noop_message: str):
    """``path`` already holds what it should: restart only what an interrupted run left pending."""
    if restart_pending and service:
        yield from restart_after_interruption._inner(
            path=path, service=service, restart_timeout=restart_timeout, before_restart=before_restart,
        )
        return
    host.noop(noop_message)
