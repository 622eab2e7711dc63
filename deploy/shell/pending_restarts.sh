#!/bin/sh
# PendingRestarts' read (deploy/facts/recovery.py): each mark an interrupted swap left under
# pending_dir (given before it), its unit and the config it installed.
# shellcheck disable=SC2154 # pending_dir: assigned before the script
for mark in "$pending_dir"/*; do [ -f "$mark" ] && printf '%s %s\n' "${mark##*/}" "$(head -n 1 "$mark")"; done; true
