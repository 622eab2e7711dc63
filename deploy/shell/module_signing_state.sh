#!/bin/sh
# ModuleSigningState's read (deploy/facts/module_signing.py): the module signing key's and its
# certificate's owner and mode, the certificate's serial and subject, whether mokutil finds it
# enrolled, and each installed kernel's NVIDIA modules with the key that signed them. Given before it:
# key, cert (paths on the node).
# shellcheck disable=SC2154 # key, cert: assigned before the script
for file in "$key" "$cert"; do
  if [ -L "$file" ]; then echo "file link $file"
  elif [ -e "$file" ]; then echo "file $(stat -c '%U:%G %a' "$file") $file"
  else echo "file missing - $file"; fi
done
if [ -f "$cert" ] && command -v openssl >/dev/null 2>&1; then
  # DER, as mokutil takes it; PEM is named so that the plan can say how to convert it
  if serial=$(openssl x509 -inform DER -in "$cert" -noout -serial 2>/dev/null); then
    echo "cert der ${serial#serial=}"
    echo "subject $(openssl x509 -inform DER -in "$cert" -noout -subject -nameopt utf8,sep_comma_plus 2>/dev/null | sed 's/^subject=//')"
  elif openssl x509 -inform PEM -in "$cert" -noout >/dev/null 2>&1; then echo "cert pem"
  else echo "cert invalid"; fi
fi
if command -v mokutil >/dev/null 2>&1; then
  echo "mokutil $( [ -f "$cert" ] && mokutil --test-key "$cert" 2>&1 | head -n 1)"
fi
seen=" "
for dir in /usr/lib/modules/* /lib/modules/*; do
  [ -d "$dir" ] || continue
  release=${dir##*/}
  case "$seen" in *" $release "*) continue ;; esac
  seen="$seen$release "
  find "$dir" -name 'nvidia*.ko*' 2>/dev/null | while read -r module; do
    # one modinfo per module: its sig_key (the signing certificate's serial) and signer lines
    modinfo "$module" 2>/dev/null | awk -v release="$release" -v module="$module" '
      /^sig_key:/ { key = $2 } /^signer:/ { sub(/^signer:[ \t]*/, ""); signer = $0 }
      END { print "module " release " " (key == "" ? "-" : key) " " module " " signer }'
  done
done
true
