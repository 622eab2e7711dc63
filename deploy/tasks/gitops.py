"""
What deploy/k8s_gpu.py applies, written as files on the controller for GitOps (Argo CD, Flux) or
``kubectl apply``: the deploy's own renderers and bundle stamps, from settings alone (no cluster,
no GPU node is reached). Run by deploy/render_cluster.py.

The folder (``manifests_dir``)::

    README.md                                what is here, how to apply it, what is not here
    manifests/<bundle>.yaml                  the API objects, one file per bundle the deploy applies
    helm/values.yaml                         with device_plugin_install_method=helm: the chart's values,
                                             as helm gets them
    flux/nvidia-device-plugin.yaml           the same chart and values as Flux's HelmRepository and HelmRelease
    argocd/nvidia-device-plugin.yaml         and as an Argo CD Application
    control-plane/kube-scheduler-config.yaml with gpushare: a file for kube-scheduler, no API object
    helm/dra-values.yaml, flux/nvidia-dra-driver-gpu.yaml, argocd/nvidia-dra-driver-gpu.yaml
                                             with gpu_allocator=dra and dra_driver_install_method=helm:
                                             the DRA driver chart's values, for helm, Flux and Argo CD
    smoke/dra-smoke-pod.yaml                 with gpu_allocator=dra and smoke_test: the pod that asks for
                                             one GPU through a claim, to create once (not to sync)

``manifests/gpu-health-monitor.yaml`` is there with gpu_health_monitor=npd (node-problem-detector).

Only ``manifests/`` is for ``kubectl apply -f`` (Flux applies every YAML file under the path it is
given, and the values are no Kubernetes object); ``flux/`` and ``argocd/`` are each for its own tool.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from pyinfra import host, logger
from pyinfra.api.exceptions import NoGroupError, PyinfraError
from pyinfra_cli.inventory import make_inventory

from ..facts.gpu_node_identity import GpuNode
from ..facts.k8s import FIELD_MANAGER
from ..foundations.pyinfra_api import deploy
from ..k8s import dra, health_monitor
from ..k8s.gpushare import NODE_LABEL, GpushareError, scheduler_config_yaml
from ..operations import controller_files
from ..operations.controller_files import ControllerFile
from ..operations.kubectl import HELM_CHART, HELM_RELEASE, HELM_REPO_URL, dump_documents, stamp_manifest
from ..settings import Settings, SettingsError, parse_settings
from . import dra_cluster
from . import gpushare as gpushare_task
from .gitops_charts import ARGOCD_NAMESPACE, FLUX_NAMESPACE, MANAGED_BY, device_plugin_chart, dra_chart
from .k8s import (
    CONFIG_LABEL,
    DEVICE_PLUGIN_BUNDLE,
    DEVICE_PLUGIN_NAMESPACE,
    RUNTIME_CLASS_BUNDLE,
    SharingConfig,
    helm_chart_version,
    needs_device_plugin,
    node_labels,
    render_device_plugin,
    render_runtime_class,
    uses_gpushare,
)

README = "README.md"
MANIFESTS = "manifests"
HELM_VALUES = "helm/values.yaml"
FLUX_HELM = "flux/nvidia-device-plugin.yaml"
ARGOCD_HELM = "argocd/nvidia-device-plugin.yaml"
SCHEDULER_CONFIG = "control-plane/kube-scheduler-config.yaml"
DRA_HELM_VALUES = "helm/dra-values.yaml"
DRA_FLUX_HELM = "flux/nvidia-dra-driver-gpu.yaml"
DRA_ARGOCD_HELM = "argocd/nvidia-dra-driver-gpu.yaml"
DRA_SMOKE_POD = "smoke/dra-smoke-pod.yaml"
# A Node the folder labels is never pruned or deleted by Argo CD or Flux (the kubelet's, not the folder's)
NODE_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}
# The GPU nodes' labels: a bundle of the folder alone (deploy/k8s_gpu.py labels from the nodes' facts)
NODE_LABELS_BUNDLE = "node-labels"
BUNDLES = (
    RUNTIME_CLASS_BUNDLE,
    DEVICE_PLUGIN_BUNDLE,
    gpushare_task.EXTENDER_BUNDLE,
    gpushare_task.DEVICE_PLUGIN_BUNDLE,
    dra_cluster.DRIVER_BUNDLE,
    dra_cluster.CLAIMS_BUNDLE,
    health_monitor.BUNDLE,
    NODE_LABELS_BUNDLE,
)
WHAT_BUNDLES_HOLD = {
    RUNTIME_CLASS_BUNDLE: "the RuntimeClass `nvidia`",
    DEVICE_PLUGIN_BUNDLE: "NVIDIA's device plugin: its namespace, the sharing configs (ConfigMap), RBAC, "
    "the DaemonSet(s)",
    gpushare_task.EXTENDER_BUNDLE: "gpushare's scheduler extender: RBAC, Deployment, NodePort Service",
    gpushare_task.DEVICE_PLUGIN_BUNDLE: "gpushare's device plugin: RBAC, DaemonSet on nodes labelled `gpushare=true`",
    dra_cluster.DRIVER_BUNDLE: f"NVIDIA's DRA driver for GPUs: its namespace, RBAC, the kubelet plugin's DaemonSet "
    f"on nodes labelled `{dra.ALLOCATOR_LABEL}=dra`",
    dra_cluster.CLAIMS_BUNDLE: f"the DeviceClass `{dra.DEVICE_CLASS}` and the ResourceClaimTemplate "
    f"`{dra.CLAIM_TEMPLATE}` (one GPU; the sharing config the settings give)",
    health_monitor.BUNDLE: f"node-problem-detector on every GPU node (gpu_health_monitor=npd): its namespace, "
    f"account bound to `{health_monitor.CLUSTER_ROLE}`, its config (a custom plugin running "
    f"gpu-node's health check) and DaemonSet; it sets the node condition `{health_monitor.CONDITION}`",
    NODE_LABELS_BUNDLE: "the GPU nodes' labels: a Node object each, its name and the labels its settings decide "
    "alone (a server-side apply sets these and no other field)",
}


def manifest_file(bundle: str) -> str:
    return f"{MANIFESTS}/{bundle}.yaml"


# Every file a render may write: one a new render no longer writes is removed (a stale bundle in
# manifests/ would still be applied by whatever syncs the folder).
# The last two: what earlier releases wrote instead of flux/ and argocd/.
EVERY_FILE = (
    README,
    *(manifest_file(bundle) for bundle in BUNDLES),
    HELM_VALUES,
    FLUX_HELM,
    ARGOCD_HELM,
    SCHEDULER_CONFIG,
    DRA_HELM_VALUES,
    DRA_FLUX_HELM,
    DRA_ARGOCD_HELM,
    DRA_SMOKE_POD,
    "helm/release.yaml",
    "helm/dra-release.yaml",
)


class RenderError(PyinfraError):
    """The files cannot be written as asked: raised with a one-line reason, before any file is written."""


def settings_only_node(host_name: str, settings: Settings) -> GpuNode:
    """
    A GPU node as the files see it: its own settings, none of its facts. Its GPUs, hostname and
    CDI spec are unknown, so cdi=auto counts as no spec (its config without CDI).
    """
    return GpuNode(
        host_name=host_name,
        node_name=host_name,
        products=(),
        pci_gpus=0,
        nvidia_smi="not read",
        gpu_sharing=settings.gpu_sharing,
        nvidia_runtime_default=settings.nvidia_runtime_default,
        settings=settings,
    )


def settings_labels(node: GpuNode) -> dict[str, str]:
    """
    The labels deploy/k8s_gpu.py sets on a GPU node that the node's settings decide alone: its own
    (node_labels, gpushare's) with a GPU present, as the gpu_nodes group says it has; no ``accelerator``
    (the GPU's product, a fact), no label it removes.
    """
    labels = node_labels(replace(node, pci_gpus=max(node.pci_gpus, 1)))
    if node.gpu_sharing == "gpushare":
        labels[NODE_LABEL] = "true"
    return {key: value for key, value in sorted(labels.items()) if value is not None and key != "accelerator"}


def node_labels_manifest(settings: Settings, nodes: list[GpuNode]) -> str | None:
    """The GPU nodes' labels as Node objects, for those whose Kubernetes name the settings give
    (kube_node_names): a name guessed wrong would make a Node no kubelet runs. None: no node named."""
    names = dict(settings.kube_node_names)
    named = sorted((node for node in nodes if node.host_name in names), key=lambda node: names[node.host_name])
    twice = sorted(
        {
            names[node.host_name]
            for node in named
            if [names[other.host_name] for other in named].count(names[node.host_name]) > 1
        }
    )
    if twice:
        raise RenderError(
            f"kube_node_names gives several GPU nodes the Kubernetes name {', '.join(twice)}: each node needs its own"
        )
    documents = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": names[node.host_name],
                "labels": {**settings_labels(node), **MANAGED_BY},
                "annotations": dict(NODE_ANNOTATIONS),
            },
        }
        for node in named
    ]
    return dump_documents(documents) if documents else None


def dra_files(
    settings: Settings, nodes: list[GpuNode], kubernetes_minor: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The DRA driver's bundles and files (deploy/tasks/dra_cluster.py's), as its deploy applies them;
    refused for a cluster older than 1.34 where ``kubernetes_minor`` says it."""
    refusal = kubernetes_minor and dra.kubernetes_refusal(kubernetes_minor, source="manifests_kubernetes_version")
    if refusal:
        raise RenderError(refusal)
    chosen = dra_cluster.dra_settings(settings, nodes)
    manifests, written = {}, {}
    if chosen.dra_driver_install_method == "helm":
        chart = dra_chart(chosen)
        written[DRA_HELM_VALUES] = chart.values
        written[DRA_FLUX_HELM] = chart.flux_text()
        written[DRA_ARGOCD_HELM] = chart.argocd_text()
    else:
        manifests[dra_cluster.DRIVER_BUNDLE] = dra_cluster.render_driver(chosen)
    manifests[dra_cluster.CLAIMS_BUNDLE] = dra_cluster.render_claims(chosen)
    if settings.smoke_test:
        written[DRA_SMOKE_POD] = dra_cluster.render_smoke_pod(chosen)
    return manifests, written


def cluster_files(settings: Settings, nodes: list[GpuNode], kubernetes_minor: str | None) -> dict[str, str]:
    """
    Relative path -> text: what deploy/k8s_gpu.py applies on a control plane with ``settings``
    for these GPU nodes on a cluster of ``kubernetes_minor`` (needed only with gpushare; with DRA,
    checked where given).
    """
    manifests: dict[str, str] = {RUNTIME_CLASS_BUNDLE: render_runtime_class()}
    written: dict[str, str] = {}
    if uses_gpushare(settings, nodes):
        if kubernetes_minor is None:
            raise RenderError(
                "manifests_kubernetes_version is not set: gpushare's scheduler config and extender "
                "depend on the cluster's Kubernetes minor (e.g. --data manifests_kubernetes_version=1.30)"
            )
        try:
            written[SCHEDULER_CONFIG] = scheduler_config_yaml(kubernetes_minor)  # refuses clusters older than 1.23
        except GpushareError as error:
            raise RenderError(f"manifests_kubernetes_version={kubernetes_minor}: {error}") from None
        manifests.update(gpushare_task.gpushare_manifests(settings, kubernetes_minor))
    if needs_device_plugin(settings, nodes):
        if settings.device_plugin_install_method == "helm":
            chart = device_plugin_chart(settings, nodes)
            written[HELM_VALUES] = chart.values
            written[FLUX_HELM] = chart.flux_text()
            written[ARGOCD_HELM] = chart.argocd_text()
        else:
            manifests[DEVICE_PLUGIN_BUNDLE] = render_device_plugin(settings, nodes)
    if dra_cluster.uses_dra(settings, nodes):
        dra_manifests, dra_written = dra_files(settings, nodes, kubernetes_minor)
        manifests.update(dra_manifests)
        written.update(dra_written)
    if settings.gpu_health_monitor == "npd":
        manifests[health_monitor.BUNDLE] = health_monitor.render(settings)
    labels = node_labels_manifest(settings, nodes)
    if labels:
        manifests[NODE_LABELS_BUNDLE] = labels
    for bundle, manifest in manifests.items():
        # stamped as apply_manifests stamps them: a deploy run after this folder is applied changes nothing
        written[manifest_file(bundle)] = stamp_manifest(manifest, bundle)[0]
    written[README] = readme(settings, nodes, kubernetes_minor, written)
    return dict(sorted(written.items()))


def readme(settings: Settings, nodes: list[GpuNode], kubernetes_minor: str | None, written: dict[str, str]) -> str:
    lines = [
        "# The cluster's GPU objects, written by gpu-node",
        "",
        "`deploy/render_cluster.py` wrote these files from gpu-node's settings: what `deploy/k8s_gpu.py`",
        "applies with the same settings, the same bytes. Change the settings and render again rather than",
        "editing them; a new render rewrites this folder's files.",
        "",
        "| file | what |",
        "|---|---|",
    ]
    for bundle in BUNDLES:
        if manifest_file(bundle) in written:
            lines.append(f"| `{manifest_file(bundle)}` | {WHAT_BUNDLES_HOLD[bundle]} |")
    if HELM_VALUES in written:
        lines.append(
            f"| `{HELM_VALUES}` | the values of NVIDIA's device plugin chart, as helm gets them (not an API object) |"
        )
        lines.append(f"| `{FLUX_HELM}` | the chart, its version and values as Flux's HelmRepository and HelmRelease |")
        lines.append(f"| `{ARGOCD_HELM}` | the same as an Argo CD Application |")
    if SCHEDULER_CONFIG in written:
        lines.append(
            f"| `{SCHEDULER_CONFIG}` | gpushare's KubeSchedulerConfiguration: a file kube-scheduler "
            "reads, not an API object |"
        )
    if DRA_HELM_VALUES in written:
        lines.append(
            f"| `{DRA_HELM_VALUES}` | the values of the DRA driver's chart, as helm gets them (not an API object) |"
        )
        lines.append(f"| `{DRA_FLUX_HELM}` | the DRA driver's chart as Flux's HelmRepository and HelmRelease |")
        lines.append(f"| `{DRA_ARGOCD_HELM}` | the same as an Argo CD Application |")
    if DRA_SMOKE_POD in written:
        lines.append(
            f"| `{DRA_SMOKE_POD}` | a pod asking for one GPU through a claim of `{dra.CLAIM_TEMPLATE}`: "
            "to create once, not to sync |"
        )
    lines += [
        "",
        "## Apply",
        "",
        "Only `manifests/` holds API objects. Apply it as the deploy does (server-side, its field manager):",
        "",
        f"    kubectl apply --server-side --field-manager={FIELD_MANAGER} -f manifests/",
        "",
        "or point Argo CD (a directory source, sync option `ServerSideApply=true`) or a Flux Kustomization at",
        "`manifests/`. The objects carry the deploy's `gpu-node.io/bundle` and `gpu-node.io/digest` annotations,",
        "so `deploy/k8s_gpu.py` run later with the same settings applies nothing.",
    ]
    if FLUX_HELM in written or DRA_FLUX_HELM in written:
        lines += [
            "",
            "## The Helm charts through Flux or Argo CD",
            "",
            f"`flux/` holds Flux's objects (namespace `{FLUX_NAMESPACE}`): a second Kustomization with",
            "`path: <this folder>/flux` installs the charts. `argocd/` holds Argo CD's Applications (namespace",
            f"`{ARGOCD_NAMESPACE}`), for `kubectl apply -f argocd/` or an app of apps. Both carry the values of `helm/`",
            "as YAML. Let one of helm, Flux, Argo CD or `deploy/k8s_gpu.py` install a chart, not two.",
        ]
    if HELM_VALUES in written:
        lines += [
            "",
            "## The device plugin's Helm chart",
            "",
            f"Chart `{HELM_CHART}` version `{helm_chart_version(settings)}` from {HELM_REPO_URL}, release "
            f"`{HELM_RELEASE}`",
            f"in the namespace `{DEVICE_PLUGIN_NAMESPACE}` (created), with `{HELM_VALUES}`:",
            "",
            f"    helm upgrade --install {HELM_RELEASE} {HELM_CHART} --repo {HELM_REPO_URL} "
            f"--version {helm_chart_version(settings)} \\",
            f"      --namespace {DEVICE_PLUGIN_NAMESPACE} --create-namespace --values {HELM_VALUES}",
        ]
    if dra_cluster.uses_dra(settings, nodes):
        lines += [
            "",
            "## DRA (gpu_allocator=dra)",
            "",
            "The DRA objects are `resource.k8s.io/v1`: the cluster must run Kubernetes 1.34 or newer.",
        ]
    if DRA_HELM_VALUES in written:
        chosen = dra_cluster.dra_settings(settings, nodes)
        lines += [
            "",
            f"The DRA driver is chart `{dra.HELM_CHART}` version `{dra_cluster.helm_chart_version(chosen)}`, "
            f"release `{dra.HELM_RELEASE}` in the namespace `{dra.NAMESPACE}` (created), with `{DRA_HELM_VALUES}`:",
            "",
            f"    helm upgrade --install {dra.HELM_RELEASE} {dra.HELM_CHART} "
            f"--version {dra_cluster.helm_chart_version(chosen)} \\",
            f"      --namespace {dra.NAMESPACE} --create-namespace --values {DRA_HELM_VALUES}",
        ]
    if DRA_SMOKE_POD in written:
        lines += [
            "",
            f"`{DRA_SMOKE_POD}` checks a claim reaches a GPU, as `deploy/k8s_gpu.py` does once the driver runs:",
            "",
            f"    kubectl create -f {DRA_SMOKE_POD}",
            f"    kubectl wait --for=jsonpath='{{.status.phase}}'=Succeeded pod/{dra.SMOKE_POD} "
            f"--namespace {dra_cluster.SMOKE_NAMESPACE}",
            f"    kubectl delete -f {DRA_SMOKE_POD}",
        ]
    if SCHEDULER_CONFIG in written:
        lines += [
            "",
            f"## gpushare's kube-scheduler (Kubernetes {kubernetes_minor})",
            "",
            f"On each control-plane node, `{SCHEDULER_CONFIG}` goes to",
            f"`{settings.gpushare_scheduler_config_path}`, and the kube-scheduler static pod runs with",
            f"`--config={settings.gpushare_scheduler_config_path}` and that file mounted (hostPath). No `kubectl apply`",
            "reaches a static pod: `deploy/k8s_gpu.py` edits it on the host, with a backup and a rollback.",
        ]
    names = dict(settings.kube_node_names)
    lines += [
        "",
        "## Each node's labels",
        "",
        "The objects above run where the nodes' labels say: the device plugin and the RuntimeClass on",
        "`nvidia.com/gpu.present=true`, the MPS daemon on `nvidia.com/mps.capable=true`, gpushare's plugin on",
        f"`{NODE_LABEL}=true`, the DRA kubelet plugin on `{dra.ALLOCATOR_LABEL}=dra`. Each inventory GPU node",
        f"that `kube_node_names` names has a Node object in `{manifest_file(NODE_LABELS_BUNDLE)}` with the labels",
        "its settings decide, so syncing `manifests/` labels it. The labels from the node's facts are not",
        "here: `accelerator=<product>` (nothing here selects on it) and, with `cdi=auto`, whether its config",
        "uses CDI. `deploy/k8s_gpu.py` labels from the facts: let it or this folder label a node, not both.",
    ]
    if nodes:
        lines += [
            "",
            "| inventory host | Kubernetes node | labels |",
            "|---|---|---|",
        ]
        for node in sorted(nodes, key=lambda node: node.host_name):
            shown = ", ".join(f"`{key}={value}`" for key, value in settings_labels(node).items())
            where = (
                f"`{names[node.host_name]}`"
                if node.host_name in names
                else "not named in `kube_node_names`: its hostname, in lower case; not labelled by this folder"
            )
            lines.append(f"| `{node.host_name}` | {where} | {shown} |")
        if any(node.settings.cdi == "auto" and node.gpu_sharing != "gpushare" for node in nodes):
            lines += [
                "",
                "With `cdi=auto` a node's config depends on whether its CDI spec exists, a fact: these",
                "files take it as absent (set `cdi=true` or `false` for a config that does not guess).",
            ]
    else:
        lines += [
            "",
            "No GPU node is known to this render (`manifests_inventory` unset or without `gpu_nodes`):",
            "no node is labelled by this folder.",
        ]
    if needs_device_plugin(settings, nodes):
        default = SharingConfig.from_settings(settings).name
        lines += ["", f"A node without a `{CONFIG_LABEL}` label gets the config `{default}`."]
    return "\n".join(lines) + "\n"


def cluster_inputs(settings: Settings) -> tuple[list[tuple[str, Settings]], list[GpuNode]]:
    """
    The control planes' (name, settings) and the GPU nodes: from ``manifests_inventory``'s hosts
    when it is set (none is connected to), else this run's own settings and no GPU node.
    """
    if settings.manifests_inventory is None:
        return [(host.name, settings)], []
    cwd = host.state.cwd or os.getcwd()
    path = os.path.join(cwd, settings.manifests_inventory)
    if not os.path.isfile(path):
        raise RenderError(f"manifests_inventory={settings.manifests_inventory}: no such file")
    # pyinfra's own loader, as `pyinfra INVENTORY ...` reads it: its groups, host data, the group_data
    # beside it and in the working directory, and this run's --data over them; no host is connected.
    inventory = make_inventory(path, override_data=dict(host.state.inventory.override_data), cwd=cwd)

    def group(name: str) -> list[tuple[str, Settings]]:
        try:
            hosts = inventory.get_group(name)
        except NoGroupError:
            return []
        found = []
        for member in hosts:
            try:
                found.append((member.name, parse_settings(member.data.dict())))
            except SettingsError as error:
                raise SettingsError(f"{error} (host {member.name} of {settings.manifests_inventory})") from None
        return found

    control_planes = group(settings.control_plane_group) or [(host.name, settings)]
    nodes = [settings_only_node(name, node_settings) for name, node_settings in group(settings.gpu_nodes_group)]
    if not nodes:
        logger.warning(
            f"{host.print_prefix}{settings.manifests_inventory} has no {settings.gpu_nodes_group} hosts: "
            "the files follow the control plane's settings alone"
        )
    return control_planes, nodes


@deploy("GitOps files of the Kubernetes GPU layer")
def write_cluster_files(settings: Settings) -> None:
    """Write ``manifests_dir`` on the controller (this host must be @local)."""
    if host.name != "@local":
        raise RenderError(
            f"deploy/render_cluster.py writes on the controller, not on {host.name}: run it as "
            "pyinfra @local deploy/render_cluster.py"
        )
    control_planes, nodes = cluster_inputs(settings)
    first, rendered = None, {}
    for name, control_plane in control_planes:
        found = cluster_files(control_plane, nodes, settings.manifests_kubernetes_version)
        if first is not None and found != rendered:
            differ = sorted(path for path in set(found) | set(rendered) if found.get(path) != rendered.get(path))
            raise RenderError(
                f"control_plane hosts {first} and {name} have settings that render different "
                f"files ({', '.join(differ)}): give them the same Kubernetes settings"
            )
        first, rendered = first or name, found

    unnamed = [node.host_name for node in nodes if node.host_name not in dict(control_planes[0][1].kube_node_names)]
    if unnamed:
        logger.warning(
            f"{host.print_prefix}kube_node_names does not name the GPU nodes {', '.join(unnamed)}: "
            f"{manifest_file(NODE_LABELS_BUNDLE)} does not label them"
        )
    base = host.state.cwd or os.getcwd()
    targets = {relative: ControllerFile(base, settings.manifests_dir, relative) for relative in EVERY_FILE}
    try:
        # every path checked before the first file is written: a link anywhere stops the run unchanged
        stale = [
            relative
            for relative in EVERY_FILE
            if relative not in rendered and controller_files.check_path(targets[relative])
        ]
        for relative in rendered:
            controller_files.check_path(targets[relative])
    except controller_files.LinkRefusal as refused:
        raise RenderError(str(refused)) from None
    for relative, text in rendered.items():
        controller_files.put_text(name=f"Write {targets[relative].shown}", target=targets[relative], text=text)
    for relative in stale:
        controller_files.remove(
            name=f"Remove {targets[relative].shown} (not rendered for these settings)", target=targets[relative]
        )
