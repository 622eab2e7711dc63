#!/bin/sh
# The IMEX channel CUDA's fabric memory needs (imex_channels=device-node), made at every boot by
# gpu-node-imex-channel.service (channels do not survive a reboot): channel0 under the major number the
# driver registered nvidia-caps-imex-channels with (NVIDIA's IMEX guide, "IMEX Channels"), readable and
# writable by all as that guide makes it. Given before it: proc_devices (/proc/devices), channel (its path).
# shellcheck disable=SC2154 # proc_devices, channel: assigned before the script
major=$(awk '$2 == "nvidia-caps-imex-channels" {print $1}' "$proc_devices")
if [ -z "$major" ]; then
    echo "gpu-node: no nvidia-caps-imex-channels in $proc_devices (is the nvidia module loaded?): no IMEX channel made" >&2
    exit 1
fi
if [ -c "$channel" ] && [ "$(stat -c %t "$channel")" = "$(printf %x "$major")" ]; then
    exit 0
fi
mkdir -p "${channel%/*}" && rm -f "$channel" && mknod "$channel" c "$major" 0 && chmod 666 "$channel"
