"""
The Kubernetes GPU layer, run on control-plane hosts: RuntimeClass, GPU node labels, the
NVIDIA device plugin (static manifests or the helm chart) with its sharing configs, the
vector-add smoke pod, and with gpu_health_monitor=npd node-problem-detector's GPU health condition.

The control plane learns about GPU nodes by reading facts of the GPU nodes (``gpu_nodes_group``) of the
same pyinfra run (``gpu_host.get_fact(...)`` while preparing the control-plane host): their
hostname (the default Kubernetes node name), the NVIDIA GPUs on their PCI bus and the product
names nvidia-smi reports, and their own settings (how that node shares its GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import NoGroupError

from ..facts.gpu_node_identity import GpuNode, GpuNodeIdentity, kube_node_name
from ..facts.k8s import KubeNodes
from ..facts.read_ahead import known_fact
from ..foundations import templates
from ..foundations.pyinfra_api import deploy
from ..k8s import dra, health_monitor
from ..operations import kubectl
from ..operations.allocator_move import move_step
from ..operations.drain import DrainTarget
from ..settings import Settings, host_settings

DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
SMOKE_POD_NAME = "gpu-node-smoke-test"
SMOKE_POD_NAMESPACE = "default"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
RUNTIME_CLASS = "nvidia"
CONTAINER_DRIVER_ROOT = "/driver-root"
# The bundles apply_manifests applies (each object annotated with its bundle's name)
RUNTIME_CLASS_BUNDLE = "runtimeclass"
DEVICE_PLUGIN_BUNDLE = "nvidia-device-plugin"


@dataclass(frozen=True)
class SharingConfig:
    """One device plugin config (config file version v1), from one host's settings."""

    sharing: str  # none, time-slicing, mps
    replicas: int
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    mig_strategy: str
    driver_root: str
    # GPUs handed out by CDI name through the CRI (the runtime injects them from the node's spec)
    cdi: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, cdi: bool | None = None) -> SharingConfig:
        """One host's config; ``cdi``: the node's (GpuNode.cdi), else what the settings alone say."""
        sharing = settings.gpu_sharing if settings.gpu_sharing in ("time-slicing", "mps") else "none"
        return cls(
            sharing=sharing,
            replicas=settings.gpu_sharing_replicas if sharing != "none" else 1,
            rename_by_default=settings.time_slicing_rename_by_default,
            fail_requests_greater_than_one=settings.time_slicing_fail_requests_greater_than_one,
            mig_strategy=settings.mig_strategy,
            driver_root=settings.nvidia_driver_root,
            cdi=settings.cdi == "true" if cdi is None else cdi,
        )

    @property
    def name(self) -> str:
        """The config's key in the ConfigMap and the value of the node's config label."""
        parts = [self.sharing if self.sharing != "none" else "no-sharing"]
        if self.sharing != "none":
            parts.append(str(self.replicas))
        if self.rename_by_default:
            parts.append("renamed")
        if self.fail_requests_greater_than_one:
            parts.append("strict")
        if self.mig_strategy != "none":
            parts.append(f"mig-{self.mig_strategy}")
        if self.cdi:
            parts.append("cdi")
        return "-".join(parts)

    def document(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "version": "v1",
            "flags": {
                "migStrategy": self.mig_strategy,
                "failOnInitError": True,
                "nvidiaDriverRoot": self.driver_root,
                "plugin": {
                    "passDeviceSpecs": False,
                    # cdi-cri whatever nvidia_runtime_mode says: the runtime's cdi mode needs containerd's CDI
                    # on, which injects cdi-annotations' devices itself too; cdi-cri keeps one injector
                    "deviceListStrategy": "cdi-cri" if self.cdi else "envvar",
                    "deviceIDStrategy": "uuid",
                },
            },
        }
        if self.driver_root != "/":
            # The manifests mount the host's driver root there (as NVIDIA's helm chart does).
            config["flags"]["plugin"]["containerDriverRoot"] = CONTAINER_DRIVER_ROOT
        resources = [{"name": "nvidia.com/gpu", "replicas": self.replicas}]
        if self.sharing == "time-slicing":
            config["sharing"] = {
                "timeSlicing": {
                    "renameByDefault": self.rename_by_default,
                    "failRequestsGreaterThanOne": self.fail_requests_greater_than_one,
                    "resources": resources,
                }
            }
        elif self.sharing == "mps":
            config["sharing"] = {"mps": {"resources": resources}}
        return config

    def text(self) -> str:
        return yaml.safe_dump(self.document(), sort_keys=False, default_flow_style=False)

    @property
    def gpu_resource(self) -> str:
        return "nvidia.com/gpu.shared" if self.rename_by_default else "nvidia.com/gpu"


def gather_gpu_nodes(settings: Settings) -> list[GpuNode]:
    """Read the facts of every GPU node of this run (``gpu_nodes_group``, from the control plane's context)."""
    try:
        hosts = inventory.get_group(settings.gpu_nodes_group)
    except NoGroupError:
        hosts = []
    node_names = dict(settings.kube_node_names)
    nodes = []
    for gpu_host in hosts:
        node_settings = host_settings(gpu_host)
        try:
            identity = gpu_host.get_fact(GpuNodeIdentity, driver_root=node_settings.nvidia_driver_root)
        except Exception as error:  # noqa: BLE001 - an unreachable GPU node must not stop the other nodes
            logger.warning(f"{host.print_prefix}cannot read facts of GPU node {gpu_host.name}: {error}; not labelled")
            continue
        nodes.append(
            GpuNode(
                host_name=gpu_host.name,
                node_name=kube_node_name(node_names, gpu_host.name, identity["hostname"]),
                products=tuple(identity["products"]),
                pci_gpus=identity["pci_gpus"],
                nvidia_smi=identity["nvidia_smi"],
                nvml=identity["nvml"],
                cdi_spec=identity["cdi_spec"],
                gpu_sharing=node_settings.gpu_sharing,
                nvidia_runtime_default=node_settings.nvidia_runtime_default,
                settings=node_settings,
            )
        )
    return nodes


def node_labels(node: GpuNode) -> dict[str, str | None]:
    """The labels gpu-node manages on a GPU node; None: remove. Only what is known is set."""
    if not node.has_gpu:
        return {}
    if node.settings.gpu_allocator == "dra":
        # No nvidia.com/gpu.present: the device plugin's DaemonSet and the RuntimeClass select on it.
        dra_labels: dict[str, str | None] = {
            dra.ALLOCATOR_LABEL: "dra",
            "nvidia.com/gpu.present": None,
            CONFIG_LABEL: None,
            "nvidia.com/mps.capable": None,
        }
        return {**dra_labels, **({"accelerator": node.accelerator} if node.accelerator else {})}
    labels: dict[str, str | None] = {"nvidia.com/gpu.present": "true"}
    if node.accelerator:
        labels["accelerator"] = node.accelerator
    return {**labels, **sharing_labels(node)}


def sharing_labels(node: GpuNode) -> dict[str, str | None]:
    """The labels a GPU node's own sharing settings decide (its device plugin config); None: remove."""
    if node.gpu_sharing == "gpushare":
        return {CONFIG_LABEL: None, "nvidia.com/mps.capable": None}
    return {
        CONFIG_LABEL: SharingConfig.from_settings(node.settings, node.cdi).name,
        "nvidia.com/mps.capable": "true" if node.gpu_sharing == "mps" else None,
    }


def product_source(node: GpuNode) -> str:
    """How the node's product names were read, or why they were not."""
    where = f"the driver root {node.settings.nvidia_driver_root}'s libnvidia-ml"
    if node.nvml is None:
        return f"nvidia-smi: {node.nvidia_smi}"
    return f"no nvidia-smi; NVML from {where}: {node.nvml}"


def report_node(node: GpuNode) -> None:
    where = f"GPU node {node.host_name} (Kubernetes node {node.node_name})"
    if not node.has_gpu:
        logger.warning(
            f"{host.print_prefix}{where}: no NVIDIA GPU on its PCI bus and no product from "
            f"nvidia-smi or NVML ({product_source(node)}): not labelled nvidia.com/gpu.present"
        )
    elif not node.accelerator:
        logger.warning(
            f"{host.print_prefix}{where}: {node.pci_gpus} NVIDIA GPU(s) on the PCI bus but no "
            f"product name ({product_source(node)}): no accelerator label"
        )
    else:
        logger.info(f"{host.print_prefix}{where}: {len(node.products)} x {node.products[0]} ({product_source(node)})")


def device_plugin_context(settings: Settings, nodes: list[GpuNode]) -> dict[str, Any]:
    """Template context shared by the static manifests and the helm values."""
    default = SharingConfig.from_settings(settings)
    configs = {default.name: default}
    plugin_nodes = [node for node in nodes if node.gpu_sharing != "gpushare"]
    for node in plugin_nodes:
        config = SharingConfig.from_settings(node.settings, node.cdi)
        configs[config.name] = config
    runtime_class_needed = (not settings.nvidia_runtime_default) or any(
        not node.nvidia_runtime_default for node in plugin_nodes
    )
    return {
        "namespace": DEVICE_PLUGIN_NAMESPACE,
        "image": f"{DEVICE_PLUGIN_IMAGE}:{settings.device_plugin_version}",
        "configs": {name: config.text() for name, config in sorted(configs.items())},
        "default_config": default.name,
        "runtime_class": RUNTIME_CLASS if runtime_class_needed else None,
        "mig_monitor": any(config.mig_strategy != "none" for config in configs.values()),
        "mps": any(config.sharing == "mps" for config in configs.values()),
        "driver_root": settings.nvidia_driver_root if settings.nvidia_driver_root != "/" else None,
        "container_driver_root": CONTAINER_DRIVER_ROOT,
    }


def render_device_plugin(settings: Settings, nodes: list[GpuNode]) -> str:
    return templates.render("k8s/device-plugin.yaml.j2", **device_plugin_context(settings, nodes))


def render_helm_values(settings: Settings, nodes: list[GpuNode]) -> str:
    return templates.render("k8s/device-plugin-values.yaml.j2", **device_plugin_context(settings, nodes))


def helm_chart_version(settings: Settings) -> str:
    """The nvdp/nvidia-device-plugin chart's version: the plugin's release without its v."""
    return settings.device_plugin_version.lstrip("v")


def render_runtime_class() -> str:
    return templates.render("k8s/runtimeclass.yaml.j2")


def render_smoke_pod(settings: Settings, nodes: list[GpuNode]) -> str:
    context = device_plugin_context(settings, nodes)
    return templates.render(
        "k8s/smoke-pod.yaml.j2",
        name=SMOKE_POD_NAME,
        namespace=SMOKE_POD_NAMESPACE,
        image=settings.smoke_test_image,
        resource=SharingConfig.from_settings(settings).gpu_resource,
        runtime_class=context["runtime_class"],
    )


def uses_gpushare(settings: Settings, nodes: list[GpuNode]) -> bool:
    """Whether the control plane or any GPU node shares GPUs through gpushare (its extender is then set up)."""
    return settings.gpu_sharing == "gpushare" or any(node.gpu_sharing == "gpushare" for node in nodes)


def needs_device_plugin(settings: Settings, nodes: list[GpuNode]) -> bool:
    """False only when every GPU node (or, with none known, the control plane) uses gpushare or DRA."""
    if nodes:
        return any(node.gpu_sharing != "gpushare" and node.settings.gpu_allocator != "dra" for node in nodes)
    return settings.gpu_sharing != "gpushare" and settings.gpu_allocator != "dra"


@deploy("Kubernetes GPU nodes: RuntimeClass and labels")
def gpu_cluster(settings: Settings) -> list[GpuNode]:
    """Check the cluster, label the GPU nodes, apply the RuntimeClass; returns the GPU nodes."""
    cluster = kubectl.require_cluster(settings.kubeconfig)
    logger.info(f"{host.print_prefix}Kubernetes {cluster['git_version']} via kubeconfig {cluster['kubeconfig']}")
    nodes = gather_gpu_nodes(settings)
    live_nodes = known_fact(host, KubeNodes, kubeconfig=settings.kubeconfig)["nodes"] or {}

    kubectl.apply_manifests(
        name="Apply the nvidia RuntimeClass",
        manifest=render_runtime_class(),
        kubeconfig=settings.kubeconfig,
        bundle=RUNTIME_CLASS_BUNDLE,
    )
    for node in nodes:
        report_node(node)
        labels = node_labels(node)
        if not labels:
            continue
        if node.node_name not in live_nodes:
            logger.warning(
                f"{host.print_prefix}GPU node {node.host_name}: no Kubernetes node named "
                f"{node.node_name!r}; set kube_node_names to map it; not labelled"
            )
            continue
        if node_move(node, live_nodes) is not None:
            continue  # moved between the allocators after they are deployed (move_nodes)
        kubectl.label_node(
            name=f"Label GPU node {node.node_name}",
            kubeconfig=settings.kubeconfig,
            node=node.node_name,
            labels=labels,
        )
    if not nodes:
        logger.warning(f"{host.print_prefix}no hosts in the {settings.gpu_nodes_group} group: no node labelled")
    return nodes


@deploy("NVIDIA device plugin")
def device_plugin(settings: Settings, nodes: list[GpuNode]) -> None:
    if settings.device_plugin_install_method == "helm":
        kubectl.helm_upgrade_device_plugin(
            name="Install the NVIDIA device plugin helm chart",
            kubeconfig=settings.kubeconfig,
            namespace=DEVICE_PLUGIN_NAMESPACE,
            chart_version=helm_chart_version(settings),
            values=render_helm_values(settings, nodes),
        )
    else:
        kubectl.apply_manifests(
            name="Apply the NVIDIA device plugin",
            manifest=render_device_plugin(settings, nodes),
            kubeconfig=settings.kubeconfig,
            bundle=DEVICE_PLUGIN_BUNDLE,
        )
    if settings.smoke_test:
        kubectl.run_smoke_test(
            name="Run the vector-add smoke pod",
            kubeconfig=settings.kubeconfig,
            manifest=render_smoke_pod(settings, nodes),
            namespace=SMOKE_POD_NAMESPACE,
            pod=SMOKE_POD_NAME,
            timeout=settings.smoke_test_timeout,
        )


@deploy("GPU health monitor: node-problem-detector")
def gpu_health_monitor(settings: Settings) -> None:
    """node-problem-detector on the GPU nodes, its condition from the nodes' health check (gpu_health_monitor=npd)."""
    kubectl.apply_manifests(
        name="Apply node-problem-detector's GPU health monitor",
        manifest=health_monitor.render(settings),
        kubeconfig=settings.kubeconfig,
        bundle=health_monitor.BUNDLE,
    )


def node_move(node: GpuNode, live_nodes: dict[str, Any]) -> tuple[str, str | None, str, dict[str, str | None]] | None:
    """``node``'s entry of dra.move_plan when its live allocator differs from the one it wants (None: none)."""
    if not node.has_gpu or node.node_name not in live_nodes:
        return None
    current, wanted = dra.current_allocator(live_nodes[node.node_name]), node.settings.gpu_allocator
    if current is None or current == wanted:
        return None
    labels = node_labels(node)
    if wanted != "dra":
        labels = {**labels, dra.ALLOCATOR_LABEL: None}
    return node.node_name, current, wanted, labels


@deploy("Move GPU nodes between the device plugin and DRA")
def move_nodes(settings: Settings, nodes: list[GpuNode]) -> None:
    """Each node whose live allocator differs from its settings', in inventory order, batch by batch as
    allocator_move_batches says (the first a canary): cordoned, drained, relabelled, the other allocator gone
    from it, the new one offering its GPUs, uncordoned."""
    live_nodes = known_fact(host, KubeNodes, kubeconfig=settings.kubeconfig)["nodes"] or {}
    moves = [move for move in (node_move(node, live_nodes) for node in nodes) if move is not None]
    for step in dra.move_plan(moves, settings.allocator_move_batches):
        target = DrainTarget(
            node=step.node, control_plane=host.name, kubeconfig=settings.kubeconfig, timeout=settings.drain_timeout
        )
        number, batches = step.batch
        move_step(
            name=f"Move node {step.node} to the {step.allocator} (batch {number} of {batches}"
            f"{', the canary' if number == 1 and batches > 1 else ''}): {step.kind}",
            target=target,
            kind=step.kind,
            allocator=step.allocator,
            labels=dict(step.labels),
        )
