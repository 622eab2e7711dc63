#!/bin/sh
# Before any change (deploy/operations/packages.py): wait up to lock_timeout seconds (given before
# it) for apt/dpkg locks held by others (the positional parameters, lock_holders.sh); then finish
# an interrupted dpkg run.
# shellcheck disable=SC2154 # lock_timeout: assigned before the script
deadline=$(( $(date +%s) + lock_timeout ))
while held=$(lock_holders "$@"); [ -n "$held" ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        printf 'gpu-node: %s\n' "the package manager is busy: after waiting $lock_timeout s (apt_lock_timeout), \
$(printf '%s\n' "$held" | sed 's/^held \([^ ]*\) \([0-9]*\) \(.*\)/\1 is held by process \2 (\3)/' | tr '\n' ';')\
 nothing was changed: run again once it is done" >&2
        exit 1
    fi
    sleep 1
done
if [ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ] || [ -n "$(dpkg --audit 2>/dev/null)" ]; then
    echo "an earlier dpkg run was interrupted: dpkg --configure -a"
    if ! DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold --configure -a; then
        # dpkg's journal is replayed: what is left is a package whose own script fails (a DKMS build),
        # which the run's install may replace (the other kernel module type) or name in its own failure.
        [ -z "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ] ||
            { echo "gpu-node: 'dpkg --configure -a' could not finish the interrupted dpkg run (above)" >&2; exit 1; }
        echo "packages dpkg could not configure are left to this run's installs (above)"
    fi
fi
