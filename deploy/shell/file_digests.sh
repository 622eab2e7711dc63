#!/bin/sh
# FileDigests' read (deploy/facts/files.py) of the paths given as its positional parameters: a line
# for each, present (a regular file, through links) or absent, then one stat and one sha256sum over
# the present ones, in the same order (one process each, not two per file).
for path do
    shift
    if [ -f "$path" ]; then
        printf 'present %s\n' "$path"
        set -- "$@" "$path"
    else
        printf 'absent %s\n' "$path"
    fi
done
if [ "$#" -gt 0 ]; then stat -L -c 'stat %a %U:%G' -- "$@" && sha256sum -- "$@"; fi
true
