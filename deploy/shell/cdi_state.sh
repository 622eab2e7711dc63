#!/bin/sh
# CdiState's read (deploy/facts/cdi.py). Given before it: spec_file, env, runtime_config (paths),
# path_unit (the toolkit's refresh path unit); the positional parameters: the folders the unit may
# be in. read_base64: node_text.base64_reader's.
# The spec is stale when the module index (a driver install rebuilds it) or nvidia-ctk changed after
# it: what the toolkit's own path unit watches. Change times, not modification times: a package
# keeps its build's mtime on the files it installs. Only a missing or stale spec asks nvidia-smi
# whether the driver answers, so a node whose spec is current pays nothing for it.
# shellcheck disable=SC2154 # spec_file, env, runtime_config, path_unit: assigned before the script
ctk=$(command -v nvidia-ctk 2>/dev/null || true)
echo "ctk $ctk"
for dir in "$@"; do
  if [ -f "$dir/$path_unit" ]; then echo "refresh_unit $dir/$path_unit"; break; fi
done
# One systemctl call for both (each is a round trip to systemd); is-enabled and is-active print these.
enabled=; active=
for property in $(systemctl show -p UnitFileState -p ActiveState "$path_unit" 2>/dev/null); do
  case $property in UnitFileState=*) enabled=${property#*=} ;; ActiveState=*) active=${property#*=} ;; esac
done
echo "refresh_enabled $enabled"
echo "refresh_active $active"
[ -f "$env" ] && echo "env $(read_base64 "$env")"
[ -f "$runtime_config" ] && echo "runtime_config $(read_base64 "$runtime_config")"
# the newest of their change times, in the shell (uname -r is the kernel's osrelease): one process
read -r kernel < /proc/sys/kernel/osrelease
newest=
for changed in $(stat -c %Z "/lib/modules/$kernel/modules.dep" ${ctk:+"$ctk"} 2>/dev/null); do
  { [ -z "$newest" ] || [ "$changed" -gt "$newest" ]; } && newest=$changed
done
echo "inputs_changed $newest"
if [ -f "$spec_file" ]; then
  spec=$(stat -c %Z "$spec_file"); echo "spec_changed $spec"; echo "spec $(read_base64 "$spec_file")"
else
  spec=0
fi
if [ "$spec" = 0 ] || [ "${newest:-0}" -gt "$spec" ]; then
  smi=$(command -v nvidia-smi 2>/dev/null || true)
  if [ -n "$smi" ]; then
    out=$("$smi" -L 2>&1); echo "smi_exit_code $?"
    echo "smi_gpus $(printf '%s\n' "$out" | grep -c '^GPU [0-9]')"
  fi
fi
true
