#!/bin/sh
# Before the host's IMEX unit is masked with --now (deploy/operations/dra.py), in the same command:
# while it runs and a process other than its own holds an IMEX channel (a multi-node job's), nothing
# is masked: one line on stderr, between the given before and after, and exit $busy_status. Given
# before it: services (the IMEX unit), before, after, unknown, busy_status; gpu_holders.sh before it.
# shellcheck disable=SC2154 # services, before, after, unknown, busy_status: assigned before the script
if [ "$(systemctl is-active "$services" 2>/dev/null)" = active ]; then
    busy=$(imex_holders | awk '$1 == "unknown" || $3 == "-"')
    if [ "$busy" = unknown ]; then
        busy=$unknown
    elif [ -n "$busy" ]; then
        busy=$(printf '%s\n' "$busy" | gh_named)
    fi
    if [ -n "$busy" ]; then
        printf '%s%s%s\n' "$before" "$busy" "$after" >&2
        exit "$busy_status"
    fi
fi
