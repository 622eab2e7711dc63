#!/bin/sh
# The record of the live file before its first change (deploy/node/records.py's gn_record_file),
# and the copy of what gpu-node last wrote kept aside while this swap may still be rolled back.
# shellcheck disable=SC2154 # dest, record_unit, record_format, gn_records, gn_new, gn_record: assigned before this part
gn_record_file "$dest" "$record_unit" "$record_format" || undo "could not record $dest before changing it (under $gn_records)"
record_new=$gn_new
rm -f -- "$gn_record/written.previous"
if [ -z "$record_new" ] && [ -e "$gn_record/written" ]; then
    cp -p -- "$gn_record/written" "$gn_record/written.previous" || undo "could not record $dest before changing it"
fi
