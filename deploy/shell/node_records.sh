#!/bin/sh
# NodeRecords' read (deploy/facts/records.py): for each file gpu-node recorded
# (deploy/node/records.py), its record's own files and the live file's state now; the texts only
# where the undo may have to take the wiring out of a changed file (a format), each read whole
# (read_base64: node_text.base64_reader's, bounded); then the units' and the package lists' records,
# and the folders gpu-node made.
# Given before it: records (the folder), root_alone (its owner and mode as gpu-node keeps it: uid 0,
# 0700), signing_keys (the name of the folder in it holding the module signing key gpu-node generated,
# which is no record). A folder that is anything else is named by its owner and mode (or as a link) and
# not read further: another user could have written what it holds.
# shellcheck disable=SC2154 # records, root_alone, signing_keys: assigned before the script
if [ -L "$records" ]; then echo "records link"; exit 0; fi
[ -d "$records" ] || exit 0
owner_mode=$(stat -c '%u %a' -- "$records")
if [ "$owner_mode" = "$root_alone" ] && [ -d "$records/$signing_keys" ]; then
  echo signing_keys
  # the key alone, as the undo leaves it: no records
  [ -n "$(find "$records" -mindepth 1 -maxdepth 1 ! -name "$signing_keys")" ] || exit 0
fi
echo "records $owner_mode"
[ "$owner_mode" = "$root_alone" ] || exit 0
b64() { base64 -w0 <"$1" 2>/dev/null; }
for record in "$records"/files/*; do
  [ -f "$record/path" ] || continue
  echo "file ${record##*/}"
  echo "path $(b64 "$record/path")"
  echo "unit $(b64 "$record/unit")"
  format=$(cat "$record/format" 2>/dev/null)
  echo "format $format"
  [ -e "$record/absent" ] && echo absent
  [ -e "$record/earlier" ] && echo earlier
  if [ -f "$record/original" ]; then
    echo "original_stat $(cat "$record/original.stat")"
    echo "original_sha256 $(sha256sum <"$record/original" | cut -c1-64)"
  fi
  [ -f "$record/written" ] && echo "written_sha256 $(sha256sum <"$record/written" | cut -c1-64)"
  path=$(cat "$record/path"; echo x); path=${path%x}
  if [ -L "$path" ]; then echo live_link
  elif [ -f "$path" ]; then
    echo "live_sha256 $(sha256sum <"$path" | cut -c1-64)"
    echo "live_stat $(stat -c '%a %u:%g' -- "$path")"
  elif [ -e "$path" ]; then echo live_other
  fi
  if [ -n "$format" ]; then
    [ -f "$record/original" ] && echo "original_text $(read_base64 "$record/original")"
    [ -f "$record/written" ] && echo "written_text $(read_base64 "$record/written")"
    [ -f "$path" ] && [ ! -L "$path" ] && echo "live_text $(read_base64 "$path")"
  fi
  for leftover in "$path".gpu-node-backup-* "$path".gpu-node-rejected-*; do
    [ -e "$leftover" ] && echo "leftover $(printf %s "$leftover" | base64 -w0)"
  done
done
for unit in "$records"/units/*; do
  name=${unit##*/}
  case $name in *.new) continue ;; esac
  [ -f "$unit" ] || continue
  enabled=$(systemctl is-enabled -- "$name" 2>/dev/null)
  active=$(systemctl is-active -- "$name" 2>/dev/null)
  echo "unit_record $name $(head -n 1 "$unit")"
  echo "unit_now $name ${enabled:-not-found} ${active:-inactive}"
done
for list in installed-packages:installed held-packages:held imported-rpm-keys:rpm_key; do
  [ -f "$records/${list%%:*}" ] && LC_ALL=C sort -u "$records/${list%%:*}" | sed "/^$/d; s/^/${list#*:} /"
done
# each folder gpu-node made that is still a folder, reached through no symbolic link (one leading
# elsewhere now is not the folder gpu-node made), and the names in it (a few more than gpu-node puts
# in one: a folder holding more is not gpu-node's alone anyway)
if [ -f "$records/created-folders" ]; then
  LC_ALL=C sort -u "$records/created-folders" | while IFS= read -r folder; do
    [ "$(cd -P -- "$folder" 2>/dev/null && pwd -P)" = "$folder" ] || continue
    echo "created_folder $(printf %s "$folder" | base64 -w0)"
    count=0
    for entry in "$folder"/* "$folder"/.[!.]* "$folder"/..?*; do
      [ -e "$entry" ] || [ -L "$entry" ] || continue
      count=$((count + 1))
      [ "$count" -le 16 ] || { echo "folder_entry"; break; }
      echo "folder_entry $(printf %s "${entry##*/}" | base64 -w0)"
    done
  done
fi
[ -e "$records/packages-before-install" ] && echo unfinished_install
true
