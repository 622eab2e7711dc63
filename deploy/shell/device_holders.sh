#!/bin/sh
# DeviceHolders' read (deploy/facts/gpu_holders.py). Given before it: modules, services (space
# separated names, deploy/driver/reload.py's); gpu_holders.sh before it. Who holds /dev/nvidia*
# and whether the driver's services' stop ends it (fuser from psmisc, where installed), which
# nvidia modules are loaded, which of the driver's services are active.
# shellcheck disable=SC2154 # modules, services: assigned before the script
if command -v fuser >/dev/null 2>&1; then
  echo fuser
  driver_holders
fi
for module in $modules; do [ -d "/sys/module/$module" ] && echo "module $module"; done
for unit in $services; do [ "$(systemctl is-active "$unit" 2>/dev/null)" = active ] && echo "active $unit"; done
true
