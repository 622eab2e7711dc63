"""The kernel stage: kernel prerequisites for Kubernetes, and nouveau kept off the GPU."""

from __future__ import annotations

from typing import Any

from pyinfra import host, logger

from ..distros.families import Platform
from ..driver.fabric import NVLINK5_MODULES_LOAD_PATH, Fabric, fabric_of
from ..driver.fabric import modules_load_text as fabric_modules_load_text
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..operations import files, kernel
from ..settings import Settings

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


def managed_files(fabric: Fabric | None = None) -> dict[str, str]:
    """path -> the text the kernel stage keeps there (``fabric``: the node's, where Fabric Manager is
    installed: an NVLink5 node also loads ib_umad at boot)."""
    texts = {MODULES_LOAD_PATH: modules_load_text(), SYSCTL_PATH: sysctl_text(), BLACKLIST_PATH: blacklist_text()}
    fabric_text = fabric_modules_load_text(fabric, HEADER) if fabric is not None else None
    if fabric_text is not None:
        texts[NVLINK5_MODULES_LOAD_PATH] = fabric_text
    return texts


def read_files() -> list[str]:
    """Every file this stage may keep, whatever the node's fabric: what preflight reads ahead."""
    return [*managed_files(), NVLINK5_MODULES_LOAD_PATH]


def node_fabric(settings: Settings, node: dict[str, Any] | None) -> Fabric | None:
    """The node's NVLink fabric where Fabric Manager is installed (NodeSurvey, read by preflight)."""
    return fabric_of(node) if settings.fabric_manager_install and node is not None else None


def reads(settings: Settings) -> list[FactCall]:
    """The facts this stage decides on, for preflight to read ahead in its one command: the same
    calls its operations make."""
    calls = [files.digest_read(path) for path in read_files()]
    if settings.kernel_modules_load:
        calls += [kernel.module_read(module, sysctl) for module, (_, sysctl) in KUBERNETES_MODULES.items()]
        calls.append(kernel.sysctls_read(KUBERNETES_SYSCTLS))
    return calls


@deploy("Kernel prerequisites")
def kernel_prerequisites(settings: Settings, platform: Platform, node: dict[str, Any] | None = None) -> None:
    # An operation only for what differs: a fleet's no-op re-run pays pyinfra's per-operation
    # cost for nothing otherwise. The facts are the ones the operations themselves read.
    fabric = node_fabric(settings, node)
    texts = managed_files(fabric)
    current = {path: read(host, files.digest_read(path)) for path in texts}
    names = {
        MODULES_LOAD_PATH: "Persist the overlay and br_netfilter modules",
        SYSCTL_PATH: "Persist the Kubernetes sysctls",
        BLACKLIST_PATH: "Blacklist nouveau and nova",
        NVLINK5_MODULES_LOAD_PATH: "Persist ib_umad for Fabric Manager on NVLink5",
    }
    changing = {path for path, text in texts.items() if not files.text_up_to_date(current[path], text)}
    for path in (MODULES_LOAD_PATH, SYSCTL_PATH, NVLINK5_MODULES_LOAD_PATH):
        if path in changing and path in texts:
            files.put_text(name=names[path], dest=path, content=texts[path])
    if BLACKLIST_PATH in changing:
        blacklist = files.put_text(name=names[BLACKLIST_PATH], dest=BLACKLIST_PATH, content=texts[BLACKLIST_PATH])
        kernel.rebuild_initramfs(
            name="Rebuild the initramfs after blacklisting nouveau",
            command=platform.family.initramfs_command,
            _if=blacklist.did_change,
        )
    unchanged = [path for path in texts if path not in changing]
    if unchanged:
        logger.debug(f"{host.print_prefix}up to date: {', '.join(unchanged)}")

    if not settings.kernel_modules_load:
        logger.info(
            f"{host.print_prefix}kernel_modules_load=false: modules and sysctls are persisted "
            "for the next boot, not loaded now"
        )
        return
    for module, (filesystem, sysctl) in KUBERNETES_MODULES.items():
        state = read(host, kernel.module_read(module, sysctl))
        if kernel.module_present(state, module, filesystem, sysctl):
            continue
        kernel.load_module(
            name=f"Load the {module} kernel module",
            module=module,
            provides_filesystem=filesystem,
            provides_sysctl=sysctl,
        )
    state = read(host, kernel.sysctls_read(KUBERNETES_SYSCTLS))
    if kernel.differing_sysctls(state, KUBERNETES_SYSCTLS):
        kernel.apply_sysctls(name="Apply the Kubernetes sysctls", values=KUBERNETES_SYSCTLS)
    for module in fabric.modules if fabric is not None else ():
        kernel.load_module(name=f"Load the {module} kernel module (Fabric Manager on NVLink5)", module=module)
