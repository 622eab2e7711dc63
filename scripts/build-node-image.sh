#!/usr/bin/env bash
# Build the systemd Debian bookworm node image once and reuse it.
# The tag carries a hash of this recipe, so a changed recipe builds a new image.
# Prints the image tag on stdout.
set -euo pipefail

suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd,systemd-sysv,dbus,ca-certificates,python3,kmod,procps,gnupg,ccache
recipe_hash=$( (cat "$0"; echo "$suite $mirror $packages") | sha256sum | cut -c1-12)
image="gpu-node-test/node-${suite}:${recipe_hash}"

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image"
    exit 0
fi

rootfs=$(mktemp -d /tmp/gpu-node-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >&2
# deb822 sources with the security suite, as a stock bookworm host has.
rm -f "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# A node container shares the machine's kernel: nothing in it may try to tune it.
for unit in systemd-sysctl.service systemd-modules-load.service systemd-udevd.service \
        systemd-networkd.service systemd-resolved.service systemd-timesyncd.service; do
    ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
echo 'APT::Install-Recommends "false";' >"$rootfs/etc/apt/apt.conf.d/90no-recommends"
# Several tests have DKMS build Debian's NVIDIA module: the node's gcc-12 goes through ccache, whose
# cache tests/harness.py shares between nodes, so a build of the same driver again reuses the objects
# of the first (minutes each on CI's 2 cores). DKMS, make and gcc still run; Debian's gcc-12, when
# installed, lands beside the wrapper (dpkg-divert). DKMS gives its builds a PATH of its own, so a
# ccache folder early in PATH is never seen.
chroot "$rootfs" dpkg-divert --local --rename --divert /usr/bin/gcc-12.distrib --add /usr/bin/gcc-12 >&2
printf '#!/bin/sh\nexec ccache /usr/bin/gcc-12.distrib "$@"\n' >"$rootfs/usr/bin/gcc-12"
chmod 755 "$rootfs/usr/bin/gcc-12"
echo 'cache_dir = /var/cache/gpu-node-tests-ccache' >"$rootfs/etc/ccache.conf"
apt_clean="$rootfs/var/cache/apt/archives"
rm -f "$apt_clean"/*.deb
rm -rf "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import -c 'CMD ["/sbin/init"]' - "$image" >&2
echo "$image"
