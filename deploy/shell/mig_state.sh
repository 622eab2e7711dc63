#!/bin/sh
# MigState's read (deploy/facts/rack.py): nvidia-mig-manager.service's state, whether the nvidia module
# is loaded, and whether mig-parted finds the layout applied (`nvidia-mig-parted assert`: exit 0 when
# it is, its last lines). Given before it: unit, config (gpu-node's mig-parted config), layout (its name).
# shellcheck disable=SC2154 # unit, config, layout: assigned before the script
echo "enabled $(systemctl is-enabled "$unit" 2>/dev/null)"
echo "active $(systemctl is-active "$unit" 2>/dev/null)"
[ -d /sys/module/nvidia ] && echo "module"
if command -v nvidia-mig-parted >/dev/null 2>&1 && [ -f "$config" ]; then
    out=$(nvidia-mig-parted assert --config-file "$config" --selected-config "$layout" 2>&1)
    echo "assert_status $?"
    printf '%s\n' "$out" | tail -n 5 | sed 's/^/assert /'
fi
true
