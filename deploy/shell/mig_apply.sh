#!/bin/sh
# A changed MIG layout applied now (deploy/operations/rack.py), in one command: only where no process but
# the driver's own services holds /dev/nvidia* (read again here, as the run planned it), else one line
# on stderr between the given before and after, and exit $busy_status; then systemd reads the unit's
# drop-in again and nvidia-mig-manager.service runs once more (its hooks stop and start the GPU's
# clients). Given before it: unit, before, after, unknown, busy_status; gpu_holders.sh before it.
# shellcheck disable=SC2154 # unit, before, after, unknown, busy_status: assigned before the script
if command -v fuser >/dev/null 2>&1; then
    busy=$(driver_holders | awk '$3 == "-"' | gh_named)
else
    busy=$unknown
fi
if [ -n "$busy" ]; then
    printf '%s%s%s\n' "$before" "$busy" "$after" >&2
    exit "$busy_status"
fi
systemctl daemon-reload && systemctl restart "$unit"
