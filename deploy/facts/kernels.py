"""The node's installed kernels, the one its boot loader starts next, and the NVIDIA modules each has."""

from __future__ import annotations

from .base import NodeFact

# Every place a family keeps a kernel's image: Debian, Ubuntu and SUSE /boot/vmlinuz-<release>;
# Fedora, RHEL, Arch and newer SUSE /usr/lib/modules/<release>/vmlinuz; arm64's Image.
KERNELS_SCRIPT = r"""
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
"""


class InstalledKernels(NodeFact):
    """
    The kernels installed on the node (a folder under ``/usr/lib/modules`` or ``/lib/modules``;
    ``image``: the boot loader has its image, ``headers``: its ``build/Makefile`` is there for DKMS),
    the ``nvidia*.ko*`` main modules under each with ``modinfo``'s version (DKMS's ``updates/dkms``,
    a distribution's prebuilt package, a KMP's ``updates`` or ``extra``), whether ``dkms`` is there,
    the user-space driver's NVML library (``libnvidia-ml.so.<version>``, Debian's under ``nvidia/current``), what names the next
    boot (GRUB's environment block, ``GRUB_DEFAULT``, ``grubby --default-kernel``), and on Debian's
    family the kernel and header packages installed and which are held; Fabric Manager's package and
    version (dpkg or rpm), which must be the driver's.

    .. code:: python

        {
            "running": "6.1.0-56-amd64",
            "kernels": {"6.1.0-56-amd64": {"image": True, "headers": True,
                        "modules": [{"version": "535.261.03",
                                     "path": "/lib/modules/6.1.0-56-amd64/updates/dkms/nvidia-current.ko"}]}},
            "dkms": True,
            "library": "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03",
            "grubenv": {"saved_entry": "gnulinux-advanced-...>gnulinux-6.1.0-56-amd64-advanced-..."},
            "grub_default": "saved",
            "grubby": None,
            "packages": {"linux-image-amd64": {"held": False}},
            "fabric_manager": {"nvidia-fabricmanager-535": "535.261.03-1"},
        }
    """

    def command(self):
        return KERNELS_SCRIPT.strip()

    @staticmethod
    def default():
        return {"running": "", "kernels": {}, "dkms": False, "library": None, "grubenv": {},
                "grub_default": None, "grubby": None, "packages": {}, "fabric_manager": {}}

    def process(self, output):
        found = self.default()
        for line in output:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "running":
                found["running"] = rest.strip()
            elif kind == "kernel":
                words = rest.split()
                if len(words) == 3:
                    found["kernels"][words[0]] = {"image": words[1] == "yes", "headers": words[2] == "yes",
                                                  "modules": []}
            elif kind == "module":
                release, _, tail = rest.partition(" ")
                version, _, path = tail.partition(" ")  # no version: an empty field
                if release in found["kernels"] and path.strip():
                    found["kernels"][release]["modules"].append({"version": version or None, "path": path.strip()})
            elif kind == "dkms":
                found["dkms"] = True
            elif kind == "library" and rest.strip() and not found["library"]:
                found["library"] = rest.strip()  # the first: the multiarch folder's
            elif kind == "grubenv":
                key, _, value = rest.partition(" ")
                if value.strip():
                    found["grubenv"][key] = value.strip()
            elif kind == "grub_default":
                found["grub_default"] = rest.strip().strip("\"'") or None
            elif kind == "grubby":
                found["grubby"] = rest.strip() or None
            elif kind == "fabricmanager":
                words = rest.split()
                if len(words) == 2:
                    found["fabric_manager"][words[0]] = words[1]
            elif kind == "deb":
                want, _, name = rest.partition(" ")
                if name:
                    found["packages"][name.strip()] = {"held": want == "hold"}
        return found
