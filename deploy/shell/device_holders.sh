#!/bin/sh
# DeviceHolders' read (deploy/facts/gpu_holders.py). Given before it: modules, services (space
# separated names, deploy/driver_updates.py's). Who holds /dev/nvidia* (fuser from psmisc, where
# installed), which nvidia modules are loaded, which of the driver's services are active.
# shellcheck disable=SC2154 # modules, services: assigned before the script
if command -v fuser >/dev/null 2>&1; then
  echo fuser
  set -- /dev/nvidia*
  [ -e "$1" ] && fuser -v "$@" 2>&1 | sed 's/^/held /'
fi
for module in $modules; do [ -d "/sys/module/$module" ] && echo "module $module"; done
for unit in $services; do [ "$(systemctl is-active "$unit" 2>/dev/null)" = active ] && echo "active $unit"; done
true
