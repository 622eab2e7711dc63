#!/bin/sh
# The candidate's owner and mode, before the swap (safe_install_swap.sh). forced_mode and
# forced_owner: what the undo run's restore gives (the original's); empty: 0644 root, or the live
# file's mode when it denies others.
# shellcheck disable=SC2154 # dest, candidate, forced_mode, forced_owner, record_new, gn_record: assigned before this part
# shellcheck disable=SC2034 # live_mode, live_owner, backup, new_pending: read by the parts that follow
# What this swap wrote goes if it cannot finish: the live file stays as it was, alone.
backup=""
new_pending=""
undo() {
    rm -f -- "$candidate" ${backup:+"$backup"} ${new_pending:+"$new_pending"}
    [ -z "$record_new" ] || rm -rf -- "$gn_record"
    fail "$1; $dest was not changed"
}
# 0644, or the live file's mode when it denies others (it may hold registry credentials); the
# undo run's restore gives the original's (forced_mode, forced_owner).
mode=0644
owner=root:root
if [ -e "$dest" ]; then
    # shellcheck disable=SC2015 # C runs when A or B fails: meant
    live_mode=$(stat -c %a "$dest") && live_owner=$(stat -c %u:%g "$dest") || undo "could not read $dest"
    case $live_mode in *[0-3]) mode=$live_mode ;; esac
fi
[ -z "$forced_mode" ] || { mode=$forced_mode; owner=$forced_owner; }
# shellcheck disable=SC2015 # C runs when A or B fails: meant
chown "$owner" "$candidate" && chmod "$mode" "$candidate" || undo "could not set owner and mode of $candidate"
