#!/bin/sh
# ImexState's read (deploy/facts/rack.py): the IMEX unit's state, whether the nvidia module is loaded
# and the channel exists, nodes_config.cfg (base64), and what `nvidia-imex-ctl -N` prints of the domain
# (bounded by ctl_timeout seconds). Given before it: unit, nodes_config, channel, ctl_timeout;
# read_base64.sh before it.
# shellcheck disable=SC2154 # unit, nodes_config, channel, ctl_timeout: assigned before the script
echo "enabled $(systemctl is-enabled "$unit" 2>/dev/null)"
echo "active $(systemctl is-active "$unit" 2>/dev/null)"
[ -d /sys/module/nvidia ] && echo "module"
[ -c "$channel" ] && echo "channel"
[ -f "$nodes_config" ] && echo "nodes_config $(read_base64 "$nodes_config")"
if command -v nvidia-imex-ctl >/dev/null 2>&1; then
    out=$(timeout "$ctl_timeout" nvidia-imex-ctl -N 2>&1)
    echo "ctl_status $?"
    printf '%s\n' "$out" | head -n 600 | sed 's/^/ctl /'
fi
true
