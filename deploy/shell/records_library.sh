#!/bin/sh
# The shell functions a command that changes the node defines first, to record the change for the
# undo run (deploy/node/records.py). Given before it: gn_records (the records folder). The names of
# a file record's parts (original, original.stat, absent, written, earlier) are deploy/node/records.py's.
# shellcheck disable=SC2154 # gn_records: assigned before the script
# shellcheck disable=SC2034 # gn_new, gn_record: read by the commands that call these
# FOLDER: status 1 and one line unless it is a folder (not a link) root owns and no one else may write:
# a folder another user owns or may write may hold records they planted, which the undo would act on
# as root (refused rather than taken over: a chown would make what they planted root's).
gn_owned() {
    if [ -L "$1" ] || [ ! -d "$1" ]; then
        echo "gpu-node: $1 is not a folder (a symbolic link or another kind): gpu-node keeps its records only in a folder root alone owns and writes; move it away" >&2
        return 1
    fi
    gn_owner_mode=$(stat -c '%u %a' -- "$1") || return 1
    gn_mode=${gn_owner_mode#* }
    if [ "${gn_owner_mode%% *}" != 0 ]; then
        echo "gpu-node: $1 is owned by uid ${gn_owner_mode%% *}, not root: gpu-node keeps its records only in a folder root alone owns and writes; move it away" >&2
        return 1
    fi
    case ${gn_mode#"${gn_mode%??}"} in
        *[2367]*) echo "gpu-node: $1 is writable by its group or others (mode $gn_mode): gpu-node keeps its records only in a folder root alone owns and writes; move it away" >&2
                  return 1 ;;
    esac
}
# SUBFOLDER: the records folder and SUBFOLDER in it (. for none), made root's alone (0700) where absent,
# refused (gn_owned) where there already and not root's alone.
gn_folder() {
    for gn_dir in "$gn_records" "$gn_records/$1"; do
        if [ ! -e "$gn_dir" ] && [ ! -L "$gn_dir" ]; then
            mkdir -p -- "${gn_dir%/*}" && mkdir -m 700 -- "$gn_dir" || return 1
        fi
        gn_owned "$gn_dir" && chmod 700 -- "$gn_dir" || return 1
    done
}
gn_file_record() { gn_record="$gn_records/files/$(printf %s "$1" | sha256sum | cut -c1-64)"; }
# PATH UNIT FORMAT: what PATH holds before gpu-node's first change (its bytes, mode and owner, or that
# there was none), once; gn_new=1 when this call made the record.
gn_record_file() {
    gn_new=
    gn_folder files || return 1
    gn_file_record "$1"
    [ -d "$gn_record" ] && return 0
    gn_temp=$(mktemp -d "$gn_record.XXXXXX") || return 1
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
    gn_folder files || return 1
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
# FOLDER (absolute): FOLDER made (0755) where absent, with each absent folder above it, the outermost
# first; each named in the record file created-folders once made (the undo removes the empty ones).
# Recorded after its mkdir, unlike a file: a record written first would name a folder a failed or
# raced mkdir left to someone else, which the undo would remove; a kill between leaves one unrecorded.
gn_make_folder() {
    if [ -z "$1" ] || [ -e "$1" ] || [ -L "$1" ]; then return 0; fi
    case $1 in /*) ;; *) echo "gpu-node: $1 is not an absolute path" >&2; return 1 ;; esac
    gn_make_folder "${1%/*}" && mkdir -m 755 -- "$1" || return 1
    gn_record_names created-folders "$1" || { rmdir -- "$1"; return 1; }
}
# LIST NAME...: NAMEs added to the record file LIST, one a line.
gn_record_names() {
    gn_list=$1; shift
    gn_folder . && (umask 077 && printf '%s\n' "$@" >>"$gn_records/$gn_list")
}
