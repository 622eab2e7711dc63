#!/bin/sh
# Root's part of a staged upload (deploy/operations/upload.py), run in a subshell of its own (its
# umask stays there): each live file that is a symbolic link refused (refuse_link.sh), then each
# upload copied to its path (0600 root) and the staging folder removed; on a failure, the copies
# too, and one line. Given before it: staging (the folder); the positional parameters: STAGED PATH
# LIVE for each upload (LIVE empty: no live file, nothing to refuse).
# shellcheck disable=SC2154 # staging: assigned before the script
trap 'rm -rf -- "$staging"' EXIT
check_links() {
    while [ $# -gt 0 ]; do
        [ -z "$3" ] || refuse_link "$3"
        shift 3
    done
}
# A list of each upload's folder (every_folder) or path (every_path), in one command: each
# upload's three parameters give way to the one word.
every_folder() {
    run=$1; shift
    n=$(( $# / 3 ))
    while [ "$n" -gt 0 ]; do
        case $2 in */*) folder=${2%/*} ;; *) folder= ;; esac
        set -- "$@" "${folder:-/}"
        shift 3; n=$(( n - 1 ))
    done
    "$run" "$@"
}
every_path() {
    run=$1; shift
    n=$(( $# / 3 ))
    while [ "$n" -gt 0 ]; do
        set -- "$@" "$2"
        shift 3; n=$(( n - 1 ))
    done
    "$run" "$@"
}
make_folders() { mkdir -p -- "$@"; }
remove_files() { rm -f -- "$@"; }
place_each() {
    while [ $# -gt 0 ]; do
        if ! { rm -f -- "$2" && error=$(cp -- "$1" "$2" 2>&1); }; then
            failed=$2; failed_live=${3:-$2}
            return 1
        fi
        shift 3
    done
}
check_links "$@"
every_folder make_folders "$@" || exit 1
umask 077
if ! place_each "$@"; then
    every_path remove_files "$@"
    error=$(printf '%s' "${error:-cp failed}" | tr '\n' ' ')
    printf 'gpu-node: could not write %s: %s; %s was not changed\n' "$failed" "$error" "$failed_live" >&2
    exit 1
fi
