#!/bin/sh
# InstalledKernels' read (deploy/facts/installed_kernels.py): the running kernel, each installed kernel
# (its image, its headers, its nvidia modules and their versions), DKMS, the NVML library, what the
# boot loader starts next, the kernel and header packages, Fabric Manager's package.
# Every place a family keeps a kernel's image: Debian, Ubuntu and SUSE /boot/vmlinuz-<release>;
# Fedora, RHEL, Arch and newer SUSE /usr/lib/modules/<release>/vmlinuz; arm64's Image.
read -r running < /proc/sys/kernel/osrelease
echo "running $running"
seen=" "
for dir in /usr/lib/modules/* /lib/modules/*; do
  [ -d "$dir" ] || continue
  release=${dir##*/}
  case "$seen" in *" $release "*) continue ;; esac
  seen="$seen$release "
  image=no
  for file in "/boot/vmlinuz-$release" "/boot/Image-$release" "$dir/vmlinuz" "$dir/Image"; do
    [ -e "$file" ] && image=yes
  done
  headers=no; [ -e "$dir/build/Makefile" ] && headers=yes
  echo "kernel $release $image $headers"
  find "$dir" -name 'nvidia*.ko*' 2>/dev/null | while read -r module; do
    case "${module##*/}" in *-drm.ko*|*-modeset.ko*|*-uvm.ko*|*-peermem.ko*) continue ;; esac
    echo "module $release $(modinfo -F version "$module" 2>/dev/null | head -n 1) $module"
  done
done
command -v dkms >/dev/null 2>&1 && echo "dkms"
for lib in /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/nvidia/current /usr/lib/aarch64-linux-gnu \
  /usr/lib/aarch64-linux-gnu/nvidia/current /usr/lib64 /usr/lib; do
  for file in "$lib"/libnvidia-ml.so.*.*; do [ -f "$file" ] && [ ! -L "$file" ] && echo "library $file"; done
done
for env in /boot/grub/grubenv /boot/grub2/grubenv; do
  [ -r "$env" ] && { sed -n 's/^\(saved_entry\|next_entry\)=\(.*\)$/grubenv \1 \2/p' "$env"; break; }
done
[ -r /etc/default/grub ] && sed -n 's/^GRUB_DEFAULT=\(.*\)$/grub_default \1/p' /etc/default/grub
command -v grubby >/dev/null 2>&1 && echo "grubby $(grubby --default-kernel 2>/dev/null)"
command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W -f '${db:Status-Abbrev} ${db:Status-Want} ${Package}\n' \
  'linux-image-*' 'linux-headers-*' 2>/dev/null | awk '$1 ~ /^.i/ {print "deb " $2 " " $3}'
command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' \
  'nvidia-fabricmanager*' 2>/dev/null | awk '$1 ~ /^.i/ {print "fabricmanager " $2 " " $3}'
command -v rpm >/dev/null 2>&1 && rpm -q --qf 'fabricmanager %{NAME} %{VERSION}\n' nvidia-fabric-manager 2>/dev/null |
  grep '^fabricmanager '
true
