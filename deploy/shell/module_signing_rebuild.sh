#!/bin/sh
# Rebuild with DKMS the NVIDIA modules of each kernel given whose modules the signing key did not sign
# (deploy/operations/module_signing.py): DKMS signs what it builds with the key its framework config
# names. Read again here, as the run left them: a kernel whose modules the key signs meanwhile is
# skipped. Given before it: cert (the key's certificate); the positional parameters: the kernels.
# shellcheck disable=SC2154 # cert: assigned before the script
serial=$(openssl x509 -inform DER -in "$cert" -noout -serial 2>/dev/null) || {
  printf 'gpu-node: cannot read the module signing certificate %s\n' "$cert" >&2; exit 1; }
serial=$(printf '%s' "${serial#serial=}" | sed 's/^0*//')
for kernel in "$@"; do
  stale=$(find "/lib/modules/$kernel" -name 'nvidia*.ko*' 2>/dev/null | while read -r module; do
    key=$(modinfo -F sig_key "$module" 2>/dev/null | tr -d ':' | sed 's/^0*//')
    [ "$key" = "$serial" ] || echo "$module"
  done)
  [ -n "$stale" ] || continue
  # dkms status: "nvidia-current/535.261.03, 6.1.0-56-amd64, x86_64: installed"
  dkms status -k "$kernel" 2>/dev/null | sed -n 's|^\(nvidia[^/,]*\)/\([^,]*\),.*: installed.*$|\1 \2|p' |
  while read -r module version; do
    echo "rebuilding $module/$version for kernel $kernel to sign it"
    dkms build --force -m "$module" -v "$version" -k "$kernel" >/dev/null && \
      dkms install --force -m "$module" -v "$version" -k "$kernel" >/dev/null || {
      printf 'gpu-node: DKMS could not rebuild %s/%s for kernel %s to sign it: see /var/lib/dkms/%s/%s/build/make.log on the node\n' \
        "$module" "$version" "$kernel" "$module" "$version" >&2
      exit 1
    }
  done || exit 1
done
