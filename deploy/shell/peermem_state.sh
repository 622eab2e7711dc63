#!/bin/sh
# PeermemState's read (deploy/facts/rack.py): which of the GPUDirect RDMA modules are loaded, the OFED's
# version (`ofed_info -s`; none: the kernel's inbox stack), whether gpu-node's soft dependency is in
# place, and when nvidia-peermem's and ib_core's module files for the running kernel were written (a
# peermem built before the ib_core it loads against disagrees about its symbols' versions). Given
# before it: softdep (gpu-node's modprobe.d file); the positional parameters: the modules watched.
# shellcheck disable=SC2154 # softdep: assigned before the script
for module in "$@"; do
    [ -d "/sys/module/$module" ] && echo "loaded $module"
done
command -v ofed_info >/dev/null 2>&1 && echo "ofed $(ofed_info -s 2>/dev/null | head -n 1)"
[ -f "$softdep" ] && echo "softdep"
for module in nvidia-peermem ib_core; do
    file=$(modinfo -F filename "$module" 2>/dev/null | head -n 1)
    [ -f "$file" ] && echo "built $module $(stat -c %Y "$file")"
done
true
