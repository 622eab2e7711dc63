#!/bin/sh
# Whether each of the positional parameters resolves to an executable as a runtime's exec would
# find it (a bare name on the PATH): "exec 1 <path>", else "exec 0 <path>" (deploy/facts/verification.py).
for path in "$@"; do
  p=$(command -v "$path" 2>/dev/null || true); if [ -n "$p" ] && [ -x "$p" ]; then echo "exec 1 $path"; else echo "exec 0 $path"; fi
done
true
