#!/bin/sh
# The shell functions a command that changes the node defines first, to record the change for the
# undo run (deploy/node_records.py). Given before it: gn_records (the records folder). The names of
# a file record's parts (original, original.stat, absent, written, earlier) are node_records.py's.
# shellcheck disable=SC2154 # gn_records: assigned before the script
# shellcheck disable=SC2034 # gn_new, gn_record: read by the commands that call these
gn_folder() { mkdir -p "$gn_records/$1" && chmod 700 "$gn_records" "$gn_records/$1"; }
gn_file_record() { gn_record="$gn_records/files/$(printf %s "$1" | sha256sum | cut -c1-64)"; }
# PATH UNIT FORMAT: what PATH holds before gpu-node's first change (its bytes, mode and owner, or that
# there was none), once; gn_new=1 when this call made the record.
gn_record_file() {
    gn_new=
    gn_file_record "$1"
    [ -d "$gn_record" ] && return 0
    gn_folder files && gn_temp=$(mktemp -d "$gn_record.XXXXXX") || return 1
    if (umask 077 && printf %s "$1" >"$gn_temp/path" && printf %s "$2" >"$gn_temp/unit" \
            && printf %s "$3" >"$gn_temp/format" && if [ -e "$1" ]; then
                cp -- "$1" "$gn_temp/original" && stat -L -c '%a %u:%g' -- "$1" >"$gn_temp/original.stat"
            else : >"$gn_temp/absent"; fi \
            && for gn_backup in "$1".gpu-node-backup-*; do [ ! -e "$gn_backup" ] || : >"$gn_temp/earlier"; break; done) \
            && mv -- "$gn_temp" "$gn_record"; then
        gn_new=1
        return 0
    fi
    rm -rf -- "$gn_temp"
    return 1
}
# PATH: what gpu-node has just written there.
gn_wrote_file() {
    gn_file_record "$1"
    [ -d "$gn_record" ] || return 0
    (umask 077 && cp -- "$1" "$gn_record/written.new") && mv -f -- "$gn_record/written.new" "$gn_record/written"
}
# UNIT...: each unit's enablement and activity before gpu-node's first change of it, once.
gn_record_units() {
    gn_folder units || return 1
    for gn_unit in "$@"; do
        [ -e "$gn_records/units/$gn_unit" ] && continue
        gn_enabled=$(systemctl is-enabled -- "$gn_unit" 2>/dev/null)
        gn_active=$(systemctl is-active -- "$gn_unit" 2>/dev/null)
        (umask 077 && printf '%s %s\n' "${gn_enabled:-not-found}" "${gn_active:-inactive}" \
            >"$gn_records/units/$gn_unit.new") && mv -f -- "$gn_records/units/$gn_unit.new" "$gn_records/units/$gn_unit" \
            || return 1
    done
}
# LIST NAME...: NAMEs added to the record file LIST, one a line.
gn_record_names() {
    gn_list=$1; shift
    gn_folder . && (umask 077 && printf '%s\n' "$@" >>"$gn_records/$gn_list")
}
