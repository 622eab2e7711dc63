#!/bin/sh
# Generate the module signing key DKMS signs the NVIDIA modules with (deploy/operations/module_signing.py),
# unless it is there: its private part root's alone from its first byte (umask 077: the folder, the key
# and the certificate are never readable by others, not even for a moment), placed by rename. Given
# before it: folder, key, cert (paths on the node).
# shellcheck disable=SC2154 # folder, key, cert: assigned before the script
umask 077
[ -e "$key" ] && [ -e "$cert" ] && exit 0
mkdir -p "$folder" && chmod 700 "$folder" || exit 1
work=$(mktemp -d "$folder/.new.XXXXXX") || exit 1
# the node's name in the certificate, as mokutil --list-enrolled and modinfo's signer show it
name=$(hostname 2>/dev/null | tr -cd 'A-Za-z0-9.-' | cut -c1-40)
if ! openssl req -new -x509 -nodes -days 36500 -newkey rsa:2048 -sha256 \
    -subj "/CN=gpu-node module signing key${name:+ ($name)}" \
    -addext "keyUsage=digitalSignature" -addext "extendedKeyUsage=codeSigning,1.3.6.1.4.1.2312.16.1.2" \
    -keyout "$work/key" -outform DER -out "$work/cert" >"$work/log" 2>&1; then
  printf 'gpu-node: openssl could not generate the module signing key: %s\n' "$(tail -n 1 "$work/log")" >&2
  rm -rf "$work"
  exit 1
fi
mv -f "$work/key" "$key" && mv -f "$work/cert" "$cert" && rm -rf "$work"
