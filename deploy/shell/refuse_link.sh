#!/bin/sh
# refuse_link LIVE: end the script in one line when the live file LIVE is a symbolic link: gpu-node
# renames a new file over the old one, which would replace the link with a regular file
# (deploy/operations/upload.py).
refuse_link() {
    if [ -L "$1" ]; then
        target=$(readlink -- "$1")
        printf 'gpu-node: %s is a symbolic link (to %s): not changed; gpu-node renames a new file over the old one, which would replace the link with a regular file: point its path setting at the file it links to, or make it a regular file\n' "$1" "$target" >&2
        exit 1
    fi
}
