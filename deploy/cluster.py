"""
The Kubernetes half as a site calls it from its own deploy file (``from gpu_node import
configure_cluster``) and as deploy/k8s_gpu.py runs it: on the control-plane hosts only
(``control_plane_group``), reading the facts of the GPU nodes of the same run for their labels;
and its files for GitOps (``render_cluster_files``, deploy/render_cluster.py).
"""

from __future__ import annotations

from typing import Any

from pyinfra import host

from .entry import freeze_imported_objects
from .foundations.pyinfra_api import deploy
from .settings import DEFAULTS, SettingsError, call_settings, host_settings
from .signatures import document_settings
from .tasks.dra_cluster import dra_driver, uses_dra
from .tasks.gitops import write_cluster_files
from .tasks.k8s import device_plugin, gpu_cluster, gpu_health_monitor, move_nodes, needs_device_plugin, uses_gpushare


@document_settings
@deploy("GPU cluster", data_defaults=DEFAULTS)
def configure_cluster(**settings: Any) -> None:
    """
    Make the cluster schedule (and share) GPUs: the RuntimeClass, the device plugin or gpushare, the
    GPU nodes' labels, the smoke pod, node-problem-detector's GPU condition (docs/cluster.md), through
    kubectl on this host when it is in the control-plane group (other hosts are skipped; a run with
    none stops in one line). Settings as ``provision_gpu_node`` takes them.
    """
    call_settings(host.state, settings, "configure_cluster")
    freeze_imported_objects()
    cluster = host_settings(host)
    if cluster.control_plane_group not in host.groups:
        if not any(cluster.control_plane_group in other.groups for other in host.state.activated_hosts):
            # Nothing would run anywhere: a run that cannot reach the cluster says so, not "0 changes".
            raise SettingsError(
                f"no host of this run is in {cluster.control_plane_group} (control_plane_group): the cluster "
                f"deploy runs kubectl there; put the host kubectl runs on in {cluster.control_plane_group} (or "
                "name its group with control_plane_group) and include it in the run"
            )
        return
    gpu_nodes = gpu_cluster(cluster)
    if uses_gpushare(cluster, gpu_nodes):
        from .tasks.gpushare import gpushare

        gpushare(cluster, [node for node in gpu_nodes if node.gpu_sharing == "gpushare"])
    if needs_device_plugin(cluster, gpu_nodes):
        device_plugin(cluster, gpu_nodes)
    if uses_dra(cluster, gpu_nodes):
        dra_driver(cluster, gpu_nodes)
    move_nodes(cluster, gpu_nodes)
    if cluster.gpu_health_monitor == "npd":
        gpu_health_monitor(cluster)


@document_settings
@deploy("GPU cluster files", data_defaults=DEFAULTS)
def render_cluster_files(**settings: Any) -> None:
    """
    Write what ``configure_cluster`` would apply as files (``manifests_dir``), for GitOps or
    ``kubectl apply``, on the controller (``@local``): no cluster and no GPU node reached
    (docs/cluster.md, GitOps). Settings as ``provision_gpu_node`` takes them.
    """
    call_settings(host.state, settings, "render_cluster_files")
    freeze_imported_objects()
    write_cluster_files(host_settings(host))
