"""
GPU memory sharing with Aliyun's gpushare scheduler extender, run on control-plane hosts when
``gpu_sharing=gpushare``: the extender (RBAC, Deployment, NodePort Service), the gpushare device
plugin (RBAC, DaemonSet on nodes labelled ``gpushare=true``), a KubeSchedulerConfiguration for
the cluster's version loaded by the kube-scheduler static pod, the node labels, and the
``kubectl-inspect-gpushare`` plugin checked against a pinned SHA-256.

Its nodes need nvidia as the default runtime: the settings refuse ``gpu_sharing=gpushare`` with
``nvidia_runtime_default=false`` (deploy/settings/sections/gpushare.py says why).
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path

from pyinfra import host, logger

from ..facts.gpu_node_identity import GpuNode, GpuNodeIdentity, kube_node_name
from ..foundations.pyinfra_api import deploy
from ..k8s.gpushare import (
    NODE_LABEL,
    SCHEDULER_MANIFEST,
    GpushareError,
    device_plugin_manifest,
    extender_manifest,
    scheduler_config_yaml,
)
from ..operations import download, kubectl
from ..operations.files import put_text
from ..operations.scheduler_manifest import configure_scheduler_manifest, keep_scheduler_config
from ..settings import Settings

# The bundles apply_manifests applies (each object annotated with its bundle's name)
EXTENDER_BUNDLE = "gpushare-extender"
DEVICE_PLUGIN_BUNDLE = "gpushare-device-plugin"


def gpushare_manifests(settings: Settings, version: str) -> dict[str, str]:
    """Bundle name -> manifest: what gpushare applies with kubectl on a cluster of this version."""
    return {
        EXTENDER_BUNDLE: extender_manifest(version, settings.gpushare_extender_image),
        DEVICE_PLUGIN_BUNDLE: device_plugin_manifest(
            settings.gpushare_device_plugin_image, settings.gpushare_memory_unit
        ),
    }


def checked_inspect_source(settings: Settings) -> tuple[str, str] | None:
    """
    Where kubectl-inspect-gpushare comes from and the SHA-256 pinned for it, refused before any change
    when no checksum is pinned or a local file does not match it; None when the plugin is not to be
    installed.
    """
    pinned = settings.gpushare_inspect_sha256
    if not settings.gpushare_inspect_install:
        return None
    if not pinned:
        raise GpushareError(
            "gpushare_inspect_sha256 is not set: pin the SHA-256 of the kubectl-inspect-gpushare "
            f"you trust ({settings.gpushare_inspect_source}), or set gpushare_inspect_install=false"
        )
    source = settings.gpushare_inspect_source
    if source.startswith("/"):
        path = Path(source)
        if not path.is_file():
            raise GpushareError(f"gpushare_inspect_source={source}: no such file on the controller")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != pinned:
            raise GpushareError(f"refusing {source}: its SHA-256 is {digest}, gpushare_inspect_sha256 pins {pinned}")
    return source, pinned


def scheduler_pod_name(settings: Settings) -> str:
    """The control-plane host's kube-scheduler mirror pod, named after its Kubernetes node."""
    identity = host.get_fact(GpuNodeIdentity, driver_root=settings.nvidia_driver_root)
    return "kube-scheduler-" + kube_node_name(dict(settings.kube_node_names), host.name, identity["hostname"])


def point_scheduler_at_config(settings: Settings, config_text: str) -> None:
    """The control-plane file steps: the scheduler config, then the safe static pod edit."""
    config_path = settings.gpushare_scheduler_config_path
    config_sha256 = hashlib.sha256(config_text.encode()).hexdigest()
    work_dir = posixpath.join(posixpath.dirname(config_path), "staging")
    keep_scheduler_config(
        name="Keep the kube-scheduler's current config for a rollback",
        config_path=config_path,
        config_sha256=config_sha256,
        work_dir=work_dir,
    )
    put_text(
        name="Write the gpushare kube-scheduler config",
        dest=config_path,
        content=config_text,
        record_format=None,  # the control plane's: no undo run takes it back
    )
    configure_scheduler_manifest(
        name="Point the kube-scheduler static pod at the gpushare config",
        config_path=config_path,
        config_sha256=config_sha256,
        kubeconfig=settings.kubeconfig,
        pod_name=scheduler_pod_name(settings),
        work_dir=work_dir,
        manifest_path=SCHEDULER_MANIFEST,
        timeout=settings.gpushare_scheduler_ready_timeout,
    )


@deploy("GPU memory sharing with the gpushare scheduler extender")
def gpushare(settings: Settings, nodes: list[GpuNode]) -> None:
    """
    + nodes: GPU nodes of this run (deploy/k8s_gpu.py passes those with ``gpu_sharing=gpushare``);
      each is labelled ``gpushare=true`` (a node given with another sharing loses the label).
      With none given, the control plane's own settings stand for the nodes' runtime check.
    """
    cluster = kubectl.require_cluster(settings.kubeconfig)
    version = cluster["version"]
    config_text = scheduler_config_yaml(version)  # refuses clusters older than 1.23
    inspect = checked_inspect_source(settings)

    manifests = gpushare_manifests(settings, version)
    kubectl.apply_manifests(
        name="Apply the gpushare scheduler extender",
        manifest=manifests[EXTENDER_BUNDLE],
        kubeconfig=settings.kubeconfig,
        bundle=EXTENDER_BUNDLE,
    )
    kubectl.apply_manifests(
        name="Apply the gpushare device plugin",
        manifest=manifests[DEVICE_PLUGIN_BUNDLE],
        kubeconfig=settings.kubeconfig,
        bundle=DEVICE_PLUGIN_BUNDLE,
    )
    for node in nodes:
        if not node.has_gpu and node.gpu_sharing == "gpushare":
            logger.warning(
                f"{host.print_prefix}GPU node {node.host_name}: no NVIDIA GPU found; "
                f"labelled {NODE_LABEL}=true all the same, as its settings ask"
            )
        kubectl.label_node(
            name=f"Label node {node.node_name} for gpushare",
            kubeconfig=settings.kubeconfig,
            node=node.node_name,
            labels={NODE_LABEL: "true" if node.gpu_sharing == "gpushare" else None},
        )
    if not nodes:
        logger.warning(f"{host.print_prefix}no GPU nodes in this run: no node labelled {NODE_LABEL}=true")

    point_scheduler_at_config(settings, config_text)

    if inspect is None:
        return
    inspect_source, inspect_sha256 = inspect
    if inspect_source.startswith("/"):
        put_text(
            name="Install kubectl-inspect-gpushare from a local file",
            dest=settings.gpushare_inspect_path,
            content=Path(inspect_source).read_bytes(),
            mode="755",
            record_format=None,
        )
    else:
        download.checked_executable(
            name="Install kubectl-inspect-gpushare",
            url=inspect_source,
            dest=settings.gpushare_inspect_path,
            sha256=inspect_sha256,
            timeout=settings.download_timeout,
        )
