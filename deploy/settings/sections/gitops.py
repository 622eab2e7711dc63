"""The GitOps files section (deploy/render_cluster.py, on the controller)."""

from __future__ import annotations

from pydantic import Field

from ..values import ControllerPath, KubernetesMinor
from .base import Section


class GitOpsSettings(Section):
    """
    GitOps files (deploy/render_cluster.py, on the controller)

    What deploy/k8s_gpu.py would apply, written as files (docs/cluster.md, GitOps); the other
    Kubernetes settings say what goes in them.
    """

    manifests_dir: ControllerPath = Field(
        "gpu-node-manifests", description="the folder deploy/render_cluster.py writes on the controller"
    )
    manifests_inventory: ControllerPath | None = Field(
        None,
        description="an inventory file whose control_plane and gpu_nodes hosts' own settings (host data, "
        "group_data) the files follow, as `pyinfra INVENTORY deploy/k8s_gpu.py` would read them, "
        "connecting to none; unset: this run's settings alone",
    )
    manifests_kubernetes_version: KubernetesMinor | None = Field(
        None,
        description="the Kubernetes minor the files are for (e.g. 1.30), which deploy/k8s_gpu.py reads from the "
        "cluster: gpushare's scheduler config and extender depend on it (required with gpushare)",
    )
