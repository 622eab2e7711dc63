"""Stage 2: kernel prerequisites for Kubernetes, and nouveau kept off the GPU."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from deploy.distros import Platform
from deploy.operations import files, kernel
from deploy.settings import Settings

MODULES_LOAD_PATH = "/etc/modules-load.d/gpu-node-kubernetes.conf"
SYSCTL_PATH = "/etc/sysctl.d/99-gpu-node-kubernetes.conf"
BLACKLIST_PATH = "/etc/modprobe.d/gpu-node-blacklist-nouveau.conf"

# module -> (filesystem it provides, sysctl it provides): evidence it is built in
KUBERNETES_MODULES = {
    "overlay": ("overlay", None),
    "br_netfilter": (None, "net.bridge.bridge-nf-call-iptables"),
}
KUBERNETES_SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.ip_forward": "1",
}
# nova_core / nova_drm: the in-tree Rust successor of nouveau (Linux 6.15+).
BLACKLISTED_MODULES = ("nouveau", "nova_core", "nova_drm")

HEADER = "# Managed by gpu-node (deploy/tasks/kernel.py); local edits are overwritten.\n"


def modules_load_text() -> str:
    return HEADER + "".join(f"{module}\n" for module in KUBERNETES_MODULES)


def sysctl_text() -> str:
    return HEADER + "".join(f"{key} = {value}\n" for key, value in KUBERNETES_SYSCTLS.items())


def blacklist_text() -> str:
    lines = [f"blacklist {module}\n" for module in BLACKLISTED_MODULES]
    return HEADER + "".join(lines) + "options nouveau modeset=0\n"


@deploy("Kernel prerequisites")
def kernel_prerequisites(settings: Settings, platform: Platform):
    files.put_text(
        name="Persist the overlay and br_netfilter modules",
        dest=MODULES_LOAD_PATH,
        content=modules_load_text(),
    )
    files.put_text(
        name="Persist the Kubernetes sysctls",
        dest=SYSCTL_PATH,
        content=sysctl_text(),
    )
    blacklist = files.put_text(
        name="Blacklist nouveau and nova",
        dest=BLACKLIST_PATH,
        content=blacklist_text(),
    )
    kernel.rebuild_initramfs(
        name="Rebuild the initramfs after blacklisting nouveau",
        command=platform.family.initramfs_command,
        _if=blacklist.did_change,
    )

    if not settings.kernel_modules_load:
        logger.info(
            f"{host.print_prefix}kernel_modules_load=false: modules and sysctls are persisted "
            "for the next boot, not loaded now"
        )
        return
    for module, (filesystem, sysctl) in KUBERNETES_MODULES.items():
        kernel.load_module(
            name=f"Load the {module} kernel module",
            module=module,
            provides_filesystem=filesystem,
            provides_sysctl=sysctl,
        )
    kernel.apply_sysctls(name="Apply the Kubernetes sysctls", values=KUBERNETES_SYSCTLS)
