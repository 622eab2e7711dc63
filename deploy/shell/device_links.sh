#!/bin/sh
# NvidiaDeviceLinks' read (deploy/facts/devices.py): each NVIDIA character device under the dev dir
# (dev, given before it), its major:minor, and where /dev/char/<major:minor> leads (both resolved):
# systemd names a unit's allowed devices by these links when it re-applies them (a daemon-reload),
# and a device without one is dropped from running containers.
# shellcheck disable=SC2154 # dev: assigned before the script
for node in "$dev"/nvidia* "$dev"/nvidia-caps/*; do
  [ -c "$node" ] || continue
  # shellcheck disable=SC2046 # the two hex numbers stat prints, split on purpose
  set -- $(stat -c '%t %T' "$node")
  id="$((0x$1)):$((0x$2))"
  echo "node $id $(readlink -f "$node") $(readlink -f "/dev/char/$id" 2>/dev/null)"
done
true
