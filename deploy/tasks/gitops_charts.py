"""
The charts the GitOps folder holds (deploy/tasks/gitops.py), as Flux and Argo CD install them: NVIDIA's
device plugin chart and the DRA driver's, each as Flux's HelmRepository and HelmRelease and as an Argo
CD Application, with the release, namespace, version and values deploy/k8s_gpu.py's helm install uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from ..facts.gpu_node_identity import GpuNode
from ..k8s import dra
from ..operations.kubectl import HELM_CHART, HELM_RELEASE, HELM_REPO_URL, dump_documents
from ..settings import Settings
from . import dra_cluster
from .k8s import DEVICE_PLUGIN_NAMESPACE, helm_chart_version, render_helm_values

# The namespaces Flux's and Argo CD's own installs watch by default
FLUX_NAMESPACE = "flux-system"
ARGOCD_NAMESPACE = "argocd"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-node"}
# How often Flux looks at the chart's repository and at the release again
FLUX_INTERVAL = "1h"


@dataclass(frozen=True)
class HelmChart:
    """A chart release as deploy/k8s_gpu.py installs it (helm upgrade --install --create-namespace)."""

    release: str
    namespace: str
    repository: str  # https://... or oci://registry/path, the folder the chart is in
    chart: str
    version: str
    values: str  # the values' text, as helm is given it

    @property
    def oci(self) -> bool:
        return self.repository.startswith("oci://")

    def flux_text(self) -> str:
        """Flux's HelmRepository and HelmRelease of the chart: a release of the same name and namespace,
        so helm and deploy/k8s_gpu.py see the release Flux installs as theirs."""
        repository = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmRepository",
            "metadata": {"name": self.release, "namespace": FLUX_NAMESPACE, "labels": MANAGED_BY},
            "spec": {"url": self.repository, "interval": FLUX_INTERVAL, **({"type": "oci"} if self.oci else {})},
        }
        release = {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": self.release, "namespace": FLUX_NAMESPACE, "labels": MANAGED_BY},
            "spec": {
                "interval": FLUX_INTERVAL,
                "releaseName": self.release,
                "targetNamespace": self.namespace,
                "storageNamespace": self.namespace,
                "install": {"createNamespace": True},
                "chart": {
                    "spec": {
                        "chart": self.chart,
                        "version": self.version,
                        "sourceRef": {"kind": "HelmRepository", "name": self.release, "namespace": FLUX_NAMESPACE},
                    }
                },
                "values": yaml.safe_load(self.values),
            },
        }
        return dump_documents([repository, release])

    def argocd_text(self) -> str:
        """Argo CD's Application of the chart (Argo CD renders it and applies the objects: no Helm release)."""
        source = {
            "repoURL": self.repository.removeprefix("oci://"),
            "chart": self.chart,
            "targetRevision": self.version,
            "helm": {"releaseName": self.release, "valuesObject": yaml.safe_load(self.values)},
        }
        application = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": self.release, "namespace": ARGOCD_NAMESPACE, "labels": MANAGED_BY},
            "spec": {
                "project": "default",
                "source": source,
                "destination": {"server": "https://kubernetes.default.svc", "namespace": self.namespace},
                "syncPolicy": {"syncOptions": ["CreateNamespace=true", "ServerSideApply=true"]},
            },
        }
        return dump_documents([application])


def device_plugin_chart(settings: Settings, nodes: list[GpuNode]) -> HelmChart:
    return HelmChart(
        release=HELM_RELEASE,
        namespace=DEVICE_PLUGIN_NAMESPACE,
        repository=HELM_REPO_URL,
        chart=HELM_CHART,
        version=helm_chart_version(settings),
        values=render_helm_values(settings, nodes),
    )


def dra_chart(chosen: Settings) -> HelmChart:
    repository, _, chart = dra.HELM_CHART.rpartition("/")
    return HelmChart(
        release=dra.HELM_RELEASE,
        namespace=dra.NAMESPACE,
        repository=repository,
        chart=chart,
        version=dra_cluster.helm_chart_version(chosen),
        values=dra_cluster.render_helm_values(chosen),
    )
