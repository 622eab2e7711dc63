#!/bin/sh
# After the swap: the unit restarted on the new file; if it does not come back, the previous file
# put back (or the new one removed), the unit restarted on it, and the host failed with both outcomes.
# shellcheck disable=SC2154 # dest, candidate, unit, pending, stamp, rejected_infix, backup, live_mode, live_owner, record_new, gn_record, why: assigned before this part
if restart; then
    rm -f "$pending"
    finished
    echo "restarted $unit: active"
    exit 0
fi
first_error=$why
[ ! -e "$dest" ] || install -p -m 0600 -o root -g root "$dest" "$dest$rejected_infix$stamp"
if [ -n "$backup" ]; then
    cp -p "$backup" "$candidate" && chmod "$live_mode" "$candidate" && chown "$live_owner" "$candidate" \
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
fail "$unit did not come back on the new $dest (kept as $dest$rejected_infix$stamp):" \
    "$first_error" "$outcome"
