"""
The cluster side of gpu_allocator=dra, run on the control plane by deploy/k8s_gpu.py when a GPU
node (or, with none known, the control plane's own settings) chose DRA: NVIDIA's DRA driver for
GPUs (gpu-node's manifests of its GPU kubelet plugin, or its Helm chart), the DeviceClass, the
ResourceClaimTemplate and a smoke pod asking for one GPU through a claim. Refused in one line on a
cluster older than 1.34, read from the server's version.
"""

from __future__ import annotations

from ..facts.gpu_node_identity import GpuNode
from ..foundations import templates
from ..foundations.pyinfra_api import deploy
from ..k8s import dra
from ..operations import failure, kubectl
from ..settings import Settings

DRIVER_BUNDLE = "nvidia-dra-driver-gpu"
CLAIMS_BUNDLE = "dra-claims"
SMOKE_NAMESPACE = "default"


def uses_dra(settings: Settings, nodes: list[GpuNode]) -> bool:
    """Whether any GPU node (or, with none known, the control plane's settings) chose DRA."""
    if nodes:
        return any(node.settings.gpu_allocator == "dra" for node in nodes)
    return settings.gpu_allocator == "dra"


def dra_settings(settings: Settings, nodes: list[GpuNode]) -> Settings:
    """The settings the DRA objects follow: the first DRA node's (the group's), else the control plane's."""
    return next((node.settings for node in nodes if node.settings.gpu_allocator == "dra"), settings)


def _gates(settings: Settings) -> dict[str, bool]:
    return dra.feature_gates(settings.gpu_sharing, settings.dra_compute_domains, settings.dra_imex)


def image(settings: Settings) -> str:
    return f"{dra.IMAGE_REPOSITORY}:{settings.dra_driver_version}"


def render_driver(settings: Settings) -> str:
    gates = _gates(settings)
    return templates.render(
        "k8s/dra/driver.yaml.j2",
        namespace=dra.NAMESPACE,
        image=image(settings),
        allocator_label=dra.ALLOCATOR_LABEL,
        driver_root=settings.nvidia_driver_root,
        mps=settings.gpu_sharing == "mps",
        feature_gates_text=",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items())),
    )


def render_helm_values(settings: Settings) -> str:
    return templates.render(
        "k8s/dra/driver-values.yaml.j2",
        image_tag=settings.dra_driver_version,
        allocator_label=dra.ALLOCATOR_LABEL,
        driver_root=settings.nvidia_driver_root,
        feature_gates=_gates(settings),
        compute_domains=settings.dra_compute_domains,
        imex_mode="hostManaged" if settings.dra_imex == "host-managed" else "driverManaged",
    )


def helm_chart_version(settings: Settings) -> str:
    return settings.dra_driver_version.lstrip("v")


def render_claims(settings: Settings) -> str:
    return templates.render(
        "k8s/dra/claims.yaml.j2",
        device_class=dra.DEVICE_CLASS,
        driver=dra.DRIVER,
        claim_template=dra.CLAIM_TEMPLATE,
        namespace=SMOKE_NAMESPACE,
        request=dra.CLAIM_NAME,
        config=dra.gpu_config(settings.gpu_sharing, settings.gpu_sharing_replicas),
    )


def render_smoke_pod(settings: Settings) -> str:
    return templates.render(
        "k8s/dra/smoke-pod.yaml.j2",
        name=dra.SMOKE_POD,
        namespace=SMOKE_NAMESPACE,
        image=settings.smoke_test_image,
        claim_template=dra.CLAIM_TEMPLATE,
        claim=dra.CLAIM_NAME,
    )


@deploy("NVIDIA DRA driver")
def dra_driver(settings: Settings, nodes: list[GpuNode]) -> None:
    cluster = kubectl.require_cluster(settings.kubeconfig)
    refusal = dra.kubernetes_refusal(cluster["git_version"])
    if refusal:
        failure.fail(name="Check the cluster serves DRA (resource.k8s.io/v1)", message=refusal)
        return
    chosen = dra_settings(settings, nodes)
    if chosen.dra_driver_install_method == "helm":
        kubectl.helm_upgrade(
            name="Install the NVIDIA DRA driver helm chart",
            kubeconfig=settings.kubeconfig,
            namespace=dra.NAMESPACE,
            release=dra.HELM_RELEASE,
            chart=dra.HELM_CHART,
            repo=None,
            chart_version=helm_chart_version(chosen),
            values=render_helm_values(chosen),
        )
    else:
        kubectl.apply_manifests(
            name="Apply the NVIDIA DRA driver",
            manifest=render_driver(chosen),
            kubeconfig=settings.kubeconfig,
            bundle=DRIVER_BUNDLE,
        )
    kubectl.apply_manifests(
        name="Apply the DRA DeviceClass and ResourceClaimTemplate",
        manifest=render_claims(chosen),
        kubeconfig=settings.kubeconfig,
        bundle=CLAIMS_BUNDLE,
    )
    if settings.smoke_test:
        kubectl.run_smoke_test(
            name="Run the vector-add pod through a DRA claim",
            kubeconfig=settings.kubeconfig,
            manifest=render_smoke_pod(chosen),
            namespace=SMOKE_NAMESPACE,
            pod=dra.SMOKE_POD,
            timeout=settings.smoke_test_timeout,
        )
