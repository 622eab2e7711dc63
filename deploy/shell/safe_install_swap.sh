#!/bin/sh
# The swap: the live file backed up (0600), the restart marked due, the candidate flushed and
# renamed over it, all but the newest keep_backups backups (and rejected versions) removed.
# shellcheck disable=SC2154 # dest, candidate, pending, stamp, backup_infix, rejected_infix, keep_backups, gn_record, unit: assigned before this part
if [ -e "$dest" ]; then
    backup="$dest$backup_infix$stamp"
    # 0600: containerd configs can hold registry credentials.
    error=$(install -p -m 0600 -o root -g root "$dest" "$backup" 2>&1) || undo "could not back up $dest: $error"
fi
if [ -n "$pending" ]; then
    # A mark an interrupted run left stays if this swap is undone: its restart is still due.
    # shellcheck disable=SC2034 # new_pending: read by undo (safe_install_prepare.sh)
    [ -e "$pending" ] || new_pending=$pending
    error=$(mkdir -p "${pending%/*}" 2>&1 && printf '%s\n' "$dest" 2>&1 >"$pending.new" \
        && mv -f "$pending.new" "$pending" 2>&1) || { rm -f "$pending.new"; undo "could not write $pending: $error"; }
fi
error=$(flush "$candidate" ${backup:+"$backup"} ${pending:+"$pending"} 2>&1) \
    || undo "could not flush $candidate to disk: $error"
mv -f "$candidate" "$dest" || undo "could not move $candidate over $dest"
flush "$(dirname "$dest")"
[ -z "$gn_record" ] || { gn_wrote_file "$dest"; flush "$gn_record"/* "$gn_record"; }
prune() {
    # The newest keep_backups of FILE$1TIMESTAMP stay (the names sort by time).
    set -- "$dest$1"*
    [ -e "$1" ] || return 0
    surplus=$(( $# - keep_backups ))
    while [ "$surplus" -gt 0 ]; do rm -f -- "$1"; shift; surplus=$(( surplus - 1 )); done
}
LC_ALL=C prune "$backup_infix"
LC_ALL=C prune "$rejected_infix"
echo "installed $dest${backup:+ (previous version kept as $backup, mode 0600)}"
[ -n "$unit" ] || { finished; exit 0; }
