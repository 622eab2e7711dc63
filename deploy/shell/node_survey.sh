#!/bin/sh
# NodeSurvey's read (deploy/facts/nvidia.py): the GPUs, switches and Mellanox functions on the PCI
# bus, Secure Boot, kernel modules, versions, disk and reboot state, a line each. Given before it:
# nvidia_vendor, mellanox_vendor (PCI vendor IDs), switch_marker (the VPD's NVLink5 mark); the
# positional parameters: the modules watched under /sys/module.
# shellcheck disable=SC2154 # nvidia_vendor, mellanox_vendor, switch_marker: assigned before the script
# sysfs and procfs values are read with the shell's read, not cat (uname -r is the kernel's
# osrelease): a GPU server has hundreds of PCI functions, and a process for each adds up.
read -r kernel < /proc/sys/kernel/osrelease
ids() { device=; class=; read -r device < "$1/device"; read -r class < "$1/class"; }
if [ -d /sys/bus/pci/devices ]; then
  for dev in /sys/bus/pci/devices/*; do
    vendor=; read -r vendor < "$dev/vendor"
    case "$vendor" in
      "$nvidia_vendor")
        ids "$dev"
        echo "pci ${dev##*/} $device $class" ;;
      "$mellanox_vendor")
        # physical functions only: a virtual function has no VPD of its own
        [ -e "$dev/physfn" ] && continue
        ids "$dev"
        role=-
        grep -qa "$switch_marker" "$dev/vpd" 2>/dev/null && role=$switch_marker
        echo "mellanox ${dev##*/} $device $class $role" ;;
    esac
  done
elif command -v lspci >/dev/null 2>&1; then
  lspci -D -n -d 10de: 2>/dev/null | while read -r slot class ids rest; do
    echo "pci $slot 0x${ids#*:} 0x${class%:}00"
  done
fi
if command -v mokutil >/dev/null 2>&1; then
  echo "secureboot mokutil $(mokutil --sb-state 2>&1 | head -n 1)"
fi
for var in /sys/firmware/efi/efivars/SecureBoot-*; do
  [ -r "$var" ] && echo "secureboot efivar $(od -An -t u1 "$var" 2>/dev/null | awk '{print $NF}')"
done
for module in "$@"; do
  [ -d "/sys/module/$module" ] && echo "module $module"
done
[ -r /sys/module/nvidia/version ] && read -r loaded < /sys/module/nvidia/version && echo "loaded_version $loaded"
echo "built_version $(modinfo -F version nvidia 2>/dev/null | head -n 1)"
echo "kernel $kernel"
df -Pm / /var 2>/dev/null | awk 'NR == 2 {print "disk / " $4} NR == 3 {print "disk /var " $4}'
# (a package's file may end without a newline: read then fails, having read the name)
for base in /usr/lib/modules/*/pkgbase; do
  name=; [ -r "$base" ] && { read -r name < "$base"; [ -n "$name" ]; } && echo "kernel_pkgbase $name"
done
name=; [ -r "/usr/lib/modules/$kernel/pkgbase" ] && { read -r name < "/usr/lib/modules/$kernel/pkgbase"; [ -n "$name" ]; } &&
  echo "running_pkgbase $name"
[ -e /run/reboot-required ] && echo "reboot_required"
[ -r /run/reboot-required.pkgs ] && sed 's/^/reboot_package /' /run/reboot-required.pkgs
true
