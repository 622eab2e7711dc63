#!/bin/sh
# NodeReports' read (deploy/facts/reports.py): each regular *.json file directly in the folder (a
# symbolic link is not followed), its name, modification time and text (read_base64: node_text's
# base64_reader, bounded), one line each. Given before it: folder.
# shellcheck disable=SC2154 # folder: assigned before the script
for report in "$folder"/*.json; do
  if [ -f "$report" ] && [ ! -L "$report" ]; then
    echo "report $(printf %s "${report##*/}" | base64 -w0) $(stat -c %Y -- "$report") $(read_base64 "$report")"
  fi
done
true
