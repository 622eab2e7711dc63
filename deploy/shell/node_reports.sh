#!/bin/sh
# NodeReports' read (deploy/facts/reports.py): each *.json entry directly in the folder, one line
# each, at most max_reports of them: a regular file's name, modification time and text (read_base64:
# node_text's base64_reader, bounded); any other entry's name alone, not read (a symbolic link is
# not followed: [ -f ] would follow it; a FIFO, device or folder is not a regular file); past the
# bound, the next entry's name and nothing after it. Given before it: folder, max_reports.
# shellcheck disable=SC2154 # folder, max_reports: assigned before the script
count=0
for report in "$folder"/*.json; do
  if [ ! -e "$report" ] && [ ! -L "$report" ]; then
    continue  # the pattern itself, when nothing matched
  fi
  name=$(printf %s "${report##*/}" | base64 -w0)
  if [ "$count" -ge "$max_reports" ]; then
    echo "more $name"
    break
  fi
  count=$((count + 1))
  if [ -L "$report" ] || [ ! -f "$report" ]; then
    echo "other $name"
  else
    echo "report $name $(stat -c %Y -- "$report") $(read_base64 "$report")"
  fi
done
true
