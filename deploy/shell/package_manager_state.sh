#!/bin/sh
# PackageManagerState's read (deploy/facts/recovery.py): on a node with dpkg, who holds the locks
# given as the positional parameters (lock_holders.sh), and whether an earlier dpkg run was
# interrupted.
if command -v dpkg >/dev/null 2>&1; then
  lock_holders "$@"
  # a glob, not ls: one process fewer on every run
  for update in /var/lib/dpkg/updates/* /var/lib/dpkg/updates/.[!.]*; do
    [ -e "$update" ] && { echo 'audit dpkg was interrupted'; break; }
  done
  dpkg --audit 2>/dev/null | sed 's/^/audit /'
fi
