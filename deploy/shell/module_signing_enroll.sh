#!/bin/sh
# Stage the module signing key's enrollment (deploy/operations/module_signing.py): mokutil --import with
# the one-time password's crypt hash, which root's copy (0600, placed by place_uploads) holds; that
# copy removed whatever happens. The password itself never reaches the node. Given before it: cert,
# hash_file.
# shellcheck disable=SC2154 # cert, hash_file: assigned before the script
trap 'rm -f "$hash_file"' EXIT
if ! out=$(mokutil --import "$cert" --hash-file "$hash_file" 2>&1); then
  printf 'gpu-node: mokutil could not stage the module signing key %s for enrollment: %s\n' "$cert" \
    "$(printf '%s' "$out" | tail -n 1)" >&2
  exit 1
fi
