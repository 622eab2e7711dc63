#!/bin/sh
# The safe install's removal of dest (the undo run's, of a file gpu-node created): kept as a
# backup (0600), removed, then the unit restarted as after a swap (safe_install_rollback.sh).
# shellcheck disable=SC2154 # dest, pending, stamp, backup_infix, unit: assigned before this part
# shellcheck disable=SC2034 # live_mode, live_owner: read by the part that follows
[ -e "$dest" ] || { finished; echo "$dest is not there"; exit 0; }
backup="$dest$backup_infix$stamp"
# shellcheck disable=SC2015 # C runs when A or B fails: meant
live_mode=$(stat -c %a "$dest") && live_owner=$(stat -c %u:%g "$dest") || fail "could not read $dest; it was not removed"
error=$(install -p -m 0600 -o root -g root "$dest" "$backup" 2>&1 && flush "$backup" 2>&1) \
    || { rm -f -- "$backup"; fail "could not back up $dest: $error; it was not removed"; }
if [ -n "$pending" ]; then
    error=$(mkdir -p "${pending%/*}" 2>&1 && printf '%s\n' "$dest" 2>&1 >"$pending.new" \
        && mv -f "$pending.new" "$pending" 2>&1) || { rm -f "$pending.new" "$backup"; fail "could not write $pending: $error; $dest was not removed"; }
fi
rm -f -- "$dest" || { rm -f -- "$backup"; fail "could not remove $dest"; }
flush "$(dirname "$dest")"
echo "removed $dest (kept as $backup until the undo is done, mode 0600)"
[ -n "$unit" ] || { finished; exit 0; }
