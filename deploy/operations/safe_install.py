"""
Install a runtime config file without ever leaving the node on a broken one.

One machinery for containerd's config.toml and Docker's daemon.json:

1. the candidate is uploaded next to the live file (same directory: same filesystem for an
   atomic rename, and relative ``imports`` resolve the same way);
2. the real daemon binary checks it (``containerd --config C config dump``,
   ``dockerd --validate --config-file C``); a rejected candidate is removed and nothing else moves;
3. the live file is kept as ``FILE.gpu-node-backup-TIMESTAMP``;
4. the candidate becomes the live file by rename, mode 0644 root:root;
5. the service is restarted and must be active within a bounded wait; if not, the backup is
   put back, the service restarted on it, and the host fails with both outcomes shown.

The remote part is one shell script so that a lost connection between steps cannot
leave a half-done swap, and so a no-change run costs no command at all.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from io import BytesIO
from typing import Iterator, Sequence

from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.command import FileUploadCommand

CANDIDATE_SUFFIX = ".gpu-node-candidate"
BACKUP_INFIX = ".gpu-node-backup-"
REJECTED_INFIX = ".gpu-node-rejected-"


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


def fail_host(message: str) -> Iterator[StringCommand]:
    """Fail this host (not the whole run) with ``message`` on stderr, changing nothing."""
    yield StringCommand("printf '%s\\n'", QuoteString(f"gpu-node: {message}"), ">&2; exit 1")


@operation(is_idempotent=False)
def fail(message: str):
    """Fail this host with ``message``: a precondition the deploy cannot meet (nothing changes)."""
    yield from fail_host(message)


def install_script(path: str, validator: Validator | None, service: str | None, timeout: int) -> str:
    """The remote half of the safe install: validate, back up, swap, restart, roll back."""
    quote = shlex.quote
    validate = (
        f"""if ! check_output=$({validator.command('"$candidate"')} 2>&1); then
    rm -f "$candidate"
    fail "$dest was not changed: {validator.what} rejected the new version:" "$check_output"
fi
"""
        if validator
        else ""
    )
    lines = f"""set -u
dest={quote(path)}
candidate={quote(candidate_path(path))}
unit={quote(service or "")}
timeout={int(timeout)}
stamp=$(date +%Y%m%dT%H%M%S)
fail() {{ printf 'gpu-node: %s\\n' "$@" >&2; exit 1; }}
{validate}chown root:root "$candidate" && chmod 0644 "$candidate" || fail "could not set owner and mode of $candidate"
backup=""
if [ -e "$dest" ]; then
    backup="$dest{BACKUP_INFIX}$stamp"
    cp -p "$dest" "$backup" || fail "could not back up $dest; it was not changed"
fi
mv -f "$candidate" "$dest" || fail "could not move $candidate over $dest"
echo "installed $dest${{backup:+ (previous version kept as $backup)}}"
[ -n "$unit" ] || exit 0

wait_active() {{
    deadline=$(( $(date +%s) + timeout ))
    while :; do
        # Active twice a second apart: a daemon that dies right after start is not up.
        if systemctl is-active --quiet "$unit" && sleep 1 && systemctl is-active --quiet "$unit"; then
            return 0
        fi
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 1
    done
}}
restart() {{
    restart_output=$(timeout "$timeout" systemctl restart "$unit" 2>&1)
    restart_status=$?
    wait_active && return 0
    state=$(systemctl is-active "$unit" 2>&1)
    journal=$(journalctl -u "$unit" -n 8 --no-pager -o cat 2>/dev/null)
    why="$unit is $state, not active, ${{timeout}} s after 'systemctl restart' (exit $restart_status) $restart_output
$journal"
    return 1
}}

if restart; then
    echo "restarted $unit: active"
    exit 0
fi
first_error=$why
cp -p "$dest" "$dest{REJECTED_INFIX}$stamp"
if [ -n "$backup" ]; then
    cp -p "$backup" "$candidate" && mv -f "$candidate" "$dest"
    restored="restored the previous $dest from $backup"
else
    rm -f "$dest"
    restored="removed the new $dest (there was none before)"
fi
if restart; then
    outcome="rollback: $restored; $unit is active again on it"
else
    outcome="rollback: $restored, but $why"
fi
fail "$unit did not come back on the new $dest (kept as $dest{REJECTED_INFIX}$stamp):" \\
    "$first_error" "$outcome"
"""
    return lines


@operation(is_idempotent=False)
def install_file(
    path: str,
    content: str,
    validator: Validator | None = None,
    service: str | None = None,
    restart_timeout: int = 30,
):
    """
    Replace ``path`` with ``content`` safely (see the module docstring). Callers decide that the
    content differs and check it in Python when there is no ``validator``.

    + path: the live file
    + content: its new text
    + validator: the daemon's own check of the candidate (None: checked by the caller)
    + service: the systemd unit to restart and watch (None: no restart)
    + restart_timeout: seconds the unit has to become active before the rollback
    """
    yield StringCommand("mkdir -p", QuoteString(posixpath.dirname(path) or "/"))
    yield FileUploadCommand(BytesIO(content.encode()), candidate_path(path))
    yield StringCommand(install_script(path, validator, service, restart_timeout))
