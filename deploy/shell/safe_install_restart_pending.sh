#!/bin/sh
# The restart of a unit whose config an interrupted run installed without restarting it.
# shellcheck disable=SC2154 # dest, unit, pending, why: assigned before this part
if restart; then
    rm -f "$pending"
    echo "restarted $unit: active on $dest (an interrupted run had installed it without a restart)"
    exit 0
fi
fail "$unit did not come back after the restart an interrupted run left pending for $dest:" "$why"
