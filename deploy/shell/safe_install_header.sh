#!/bin/sh
# The safe install's start (deploy/operations/safe_install.py); its values come before it: dest,
# candidate, unit, timeout, pending, backup_infix, rejected_infix. The later parts of the script
# read what it sets.
# shellcheck disable=SC2034 # gn_record, record_new: read by the parts that follow
set -u
stamp=$(date +%Y%m%dT%H%M%S)
fail() { printf 'gpu-node: %s\n' "$@" >&2; exit 1; }
gn_record=""
record_new=""
# what a swap that stays does last (the undo run's: its record and the backups go)
finished() { :; }
