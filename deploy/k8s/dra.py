"""
GPUs through Dynamic Resource Allocation (``gpu_allocator=dra``), pure: what a DRA node needs on
the host (each prerequisite one line, for preflight's refusal and verify's steps), what the
cluster needs (the oldest Kubernetes that serves ``resource.k8s.io/v1``, the sharing config a
claim carries to NVIDIA's DRA driver) and the order a node group moves between the device plugin
and DRA. No host, no commands: deploy/tasks/dra.py reads and acts, deploy/tasks/k8s.py renders.

The facts about NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu) used here:
its driver name ``gpu.nvidia.com`` (the ResourceSlices' driver, the ``opaque.driver`` of a
claim's config), its ``GpuConfig`` of ``resource.nvidia.com/v1beta1`` (``sharing.strategy``
TimeSlicing or MPS, behind its feature gates TimeSlicingSettings and MPSSupport), its chart's
values (``nvidiaDriverRoot``, ``resources.gpus/computeDomains``, ``imex.mode``), and the host
needs its documentation states (a driver of 565 or newer, 570.158.01 for ComputeDomains, CDI in
the runtime).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import InvalidVersion, Version

from ..foundations.batches import split_batches
from ..rack.imex import IMEX_UNIT

if TYPE_CHECKING:
    from ..settings import Settings

DRIVER = "gpu.nvidia.com"
# The label that says which allocator serves a node's GPUs: the DRA kubelet plugin runs only where
# it says dra; a DRA node carries no nvidia.com/gpu.present, which the device plugin's DaemonSet and
# the nvidia RuntimeClass select on, so neither reaches it and the device plugin's objects stay as
# they are for the nodes it serves.
ALLOCATOR_LABEL = "gpu-node.io/gpu-allocator"
NAMESPACE = "nvidia-dra-driver-gpu"
IMAGE_REPOSITORY = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
HELM_CHART = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
HELM_RELEASE = "nvidia-dra-driver-gpu"
DEVICE_CLASS = "gpu-node.nvidia.com"
CLAIM_TEMPLATE = "gpu-node-gpu"
SMOKE_POD = "gpu-node-dra-smoke-test"
CLAIM_NAME = "gpu"  # the pod's claim, and the claim's one request
CONFIG_API = "resource.nvidia.com/v1beta1"

# resource.k8s.io/v1 is served (and DRA on by default) from 1.34.
MIN_KUBERNETES = (1, 34)
MIN_DRIVER_BRANCH = 565
MIN_COMPUTE_DOMAIN_DRIVER = "570.158.01"
# The one line a mask refused because an IMEX channel is in use says, around who holds it
IMEX_BUSY = (
    f"reboot/drain required: {IMEX_UNIT} not masked (dra_imex=driver-managed), an IMEX channel is in use: ",
    ": a multi-node job runs on this node; drain it (drain_before_restart=true) or let the job end, and rerun",
)
IMEX_UNKNOWN = "fuser (psmisc) is not installed, so whether a job holds an IMEX channel is unknown"

Status = Literal["pass", "fail", "unknown"]


@dataclass(frozen=True)
class Prerequisite:
    """One host prerequisite of a DRA node: ``unknown`` until what decides it exists (a driver or a
    containerd this run installs); ``line`` says why, in one line."""

    name: str
    status: Status
    line: str

    @property
    def step(self) -> str:
        """Its step's name in verify's node report (deploy/reports/node_report.py), beside verify's own."""
        return "dra_" + self.name.replace(" ", "_")


def kubernetes_refusal(git_version: str | None, source: str = "the server") -> str | None:
    """Why a cluster of ``git_version`` (the server's, e.g. v1.33.4; or what ``source`` names, e.g.
    manifests_kubernetes_version) cannot take the DRA objects; None: it can."""
    found = re.match(r"v?(\d+)\.(\d+)", git_version or "")
    if found is None:
        return f"the Kubernetes server's version {git_version!r} cannot be read: gpu_allocator=dra needs 1.34 or newer"
    if (int(found.group(1)), int(found.group(2))) < MIN_KUBERNETES:
        return (
            f"gpu_allocator=dra needs Kubernetes 1.34 or newer (resource.k8s.io/v1), and {source} is "
            f"{git_version}: upgrade the cluster, or keep gpu_allocator=device-plugin"
        )
    return None


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def driver_prerequisite(
    *, installs: bool, branch: str | None, pinned: str | None, installed: str | None, compute_domains: bool
) -> Prerequisite:
    """
    The driver's branch: the version the driver stage installs (``pinned``, else ``branch``) when
    it ``installs``, else the ``installed`` module's. A branch alone (570) is enough for a whole
    branch; at the ComputeDomains' branch it takes an exact version to know the patch release.
    """
    floor = MIN_COMPUTE_DOMAIN_DRIVER if compute_domains else f"{MIN_DRIVER_BRANCH}"
    needs = f"gpu_allocator=dra needs a driver of {floor} or newer" + (
        " (dra_compute_domains)" if compute_domains else ""
    )
    if installs:
        if pinned:
            version, source = _version(pinned.split("-")[0]), f"nvidia_driver_version={pinned}"
        elif branch:
            version, source = Version(branch), f"nvidia_driver_branch={branch}"
        else:
            return Prerequisite(
                "driver",
                "fail",
                f"{needs}, and no nvidia_driver_branch is set: the distribution's "
                "default driver may be older; set nvidia_driver_branch (e.g. 570)",
            )
    else:
        version, source = _version(installed), f"the installed driver {installed}"
        if installed is None:
            return Prerequisite(
                "driver", "fail", f"{needs}, and no NVIDIA driver is installed (nvidia_driver_install=false)"
            )
    if version is None:
        return Prerequisite("driver", "fail", f"{needs}: {source} is no version")
    if version.major < MIN_DRIVER_BRANCH:
        return Prerequisite("driver", "fail", f"{needs}: {source} is older")
    if compute_domains:
        if len(version.release) == 1 and version.major == Version(MIN_COMPUTE_DOMAIN_DRIVER).major:
            return Prerequisite(
                "driver",
                "fail",
                f"{needs}: {source} does not say which {version.major} release; set "
                "nvidia_driver_version, or a newer branch",
            )
        if version < Version(MIN_COMPUTE_DOMAIN_DRIVER):
            return Prerequisite("driver", "fail", f"{needs}: {source} is older")
    return Prerequisite("driver", "pass", f"driver: {source}, at least {floor}")


def cdi_prerequisite(*, cdi_on: bool | None, containerd_version: str | None, after_run: bool = False) -> Prerequisite:
    """CDI on in containerd (``cdi_on``: deploy/runtimes/cdi.py's answer for its version; None: containerd is
    not installed, which the run may do; ``after_run``: it did not)."""
    if cdi_on is None and after_run:
        return Prerequisite(
            "cdi",
            "fail",
            "gpu_allocator=dra needs CDI on in containerd, and no containerd is "
            "installed: wire containerd (container_runtimes=containerd)",
        )
    if cdi_on is None:
        return Prerequisite("cdi", "unknown", "CDI in containerd: containerd is not installed yet; verify checks it")
    if not cdi_on:
        return Prerequisite(
            "cdi",
            "fail",
            f"gpu_allocator=dra needs CDI on in containerd, and containerd "
            f"{containerd_version} has none (1.7 with enable_cdi, on by default "
            "from 2.0): install containerd 1.7 or newer",
        )
    return Prerequisite("cdi", "pass", f"CDI on in containerd {containerd_version}")


def driver_root_prerequisite(root: str, state: dict[str, Any], driver_expected: bool) -> Prerequisite:
    """The driver root the kubelet plugin reads (``nvidia_driver_root``), from DraNodeState:
    a folder, and once the driver is there (``driver_expected``), NVML in it."""
    if not state["root_exists"]:
        return Prerequisite(
            "driver root",
            "fail",
            f"nvidia_driver_root={root} is no folder on this node: the DRA kubelet plugin reads the driver there",
        )
    if state["nvml"]:
        return Prerequisite("driver root", "pass", f"driver root {root}: NVML at {state['nvml']}")
    if not driver_expected:
        return Prerequisite(
            "driver root", "unknown", f"driver root {root}: no libnvidia-ml.so.1 yet (the driver stage installs it)"
        )
    return Prerequisite(
        "driver root",
        "fail",
        f"driver root {root} holds no libnvidia-ml.so.1: the DRA kubelet "
        "plugin finds no driver there; set nvidia_driver_root",
    )


def imex_action(compute_domains: bool, mode: str, unit: dict[str, Any]) -> str | None:
    """What to do with the host's nvidia-imex.service (DraNodeState's ``imex``): "mask" where the
    driver's ComputeDomain daemons own IMEX and the unit is not masked yet; None: nothing."""
    if not compute_domains or mode != "driver-managed" or unit["enabled"] in ("not-found", "masked"):
        return None
    return "mask"


def imex_in_use(unit: dict[str, Any]) -> str | None:
    """Who holds an IMEX channel while the host's IMEX daemon runs (DraNodeState's ``imex``: its
    ``holders``, each with ``unit`` and ``named``), the daemon's own processes aside; None: nobody,
    so masking it stops no job."""
    if unit["active"] != "active":
        return None
    if unit["holders_unknown"]:
        return IMEX_UNKNOWN
    return "; ".join(holder.named for holder in unit["holders"] if holder.unit is None) or None


def imex_busy_line(in_use: str) -> str:
    return IMEX_BUSY[0] + in_use + IMEX_BUSY[1]


def imex_prerequisite(
    compute_domains: bool, mode: str, unit: dict[str, Any], planned: bool = False, drain: bool = False
) -> Prerequisite:
    """The host's IMEX unit as ``dra_imex`` wants it; ``planned``: before the run, which masks it
    where no IMEX channel is in use, or after the drain ``drain`` (drain_before_restart) allows."""
    enabled, active = unit["enabled"], unit["active"]
    if planned and imex_action(compute_domains, mode, unit) == "mask":
        in_use = imex_in_use(unit)
        if in_use and not drain:
            return Prerequisite("imex", "fail", imex_busy_line(in_use))
        how = "the node drained first, then masked and stopped" if in_use else "masked and stopped"
        return Prerequisite(
            "imex", "pass", f"IMEX: {IMEX_UNIT} is {enabled} and {active}: {how} by this run (dra_imex=driver-managed)"
        )
    if not compute_domains:
        return Prerequisite(
            "imex", "pass", f"IMEX: no ComputeDomains asked (dra_compute_domains=false), {IMEX_UNIT} left as it is"
        )
    if enabled == "not-found":
        return Prerequisite("imex", "pass", f"IMEX: no {IMEX_UNIT} on this node (no NVLink fabric IMEX to hand over)")
    if mode == "driver-managed":
        if enabled == "masked" and active != "active":
            return Prerequisite(
                "imex", "pass", f"IMEX: {IMEX_UNIT} masked and stopped, the driver's ComputeDomain daemons own it"
            )
        return Prerequisite(
            "imex",
            "fail",
            f"IMEX: {IMEX_UNIT} is {enabled} and {active}, where the driver's "
            "ComputeDomain daemons must own it (dra_imex=driver-managed masks it)",
        )
    if active == "active":
        return Prerequisite("imex", "pass", f"IMEX: {IMEX_UNIT} runs on the host (dra_imex=host-managed)")
    return Prerequisite(
        "imex",
        "fail",
        f"IMEX: {IMEX_UNIT} is {enabled} and {active}, and dra_imex=host-managed needs it running on the host",
    )


def node_prerequisites(
    settings: Settings,
    *,
    installed_driver: str | None,
    cdi_on: bool | None,
    containerd_version: str | None,
    node: dict[str, Any],
    after_run: bool,
) -> list[Prerequisite]:
    """
    Every host prerequisite of a DRA node, in order: the driver, CDI, the driver root, IMEX.
    ``node``: DraNodeState; ``after_run``: judged on what the node has now (verify), not on what
    this run will install (preflight).
    """
    installs = settings.runs("driver") and settings.nvidia_driver_install and not after_run
    return [
        driver_prerequisite(
            installs=installs,
            branch=settings.nvidia_driver_branch,
            pinned=settings.nvidia_driver_version,
            installed=installed_driver,
            compute_domains=settings.dra_compute_domains,
        ),
        cdi_prerequisite(cdi_on=cdi_on, containerd_version=containerd_version, after_run=after_run),
        driver_root_prerequisite(settings.nvidia_driver_root, node, driver_expected=after_run or not installs),
        imex_prerequisite(
            settings.dra_compute_domains,
            settings.dra_imex,
            node["imex"],
            planned=not after_run,
            drain=settings.drain_before_restart,
        ),
    ]


def gpu_config(sharing: str, replicas: int) -> dict[str, Any] | None:
    """The opaque ``GpuConfig`` a claim gives the driver for ``gpu_sharing`` (None: none, the
    driver's default of one container per GPU). MPS: each of ``replicas`` clients gets an even
    share of the GPU's threads."""
    if sharing == "time-slicing":
        parameters = {"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}}
    elif sharing == "mps":
        parameters = {
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": max(1, 100 // replicas)}}
        }
    else:
        return None
    return {"apiVersion": CONFIG_API, "kind": "GpuConfig", **parameters}


def feature_gates(sharing: str, compute_domains: bool, imex: str) -> dict[str, bool]:
    """The driver's feature gates the settings need (its alpha gates are off by default)."""
    gates = {}
    if sharing == "time-slicing":
        gates["TimeSlicingSettings"] = True
    if sharing == "mps":
        gates["MPSSupport"] = True
    if compute_domains and imex == "host-managed":
        gates["HostManagedIMEXDaemon"] = True
    return gates


# Moving nodes between the allocators, batch by batch (allocator_move_batches, read as
# deploy/fleet/rollout.py reads --batches; the first batch a canary: nothing else moves until its nodes
# serve GPUs the new way), and a failed step stops the move there, its nodes left cordoned. Within
# a batch each step is taken on every node before the next: all are cordoned before any drains, so
# a drained pod never lands on a node about to move; the pods the old allocator placed are drained
# before the label moves, the old allocator's plugin leaves the node with the label (its DaemonSet
# no longer selects it), and the node returns to service only once the new allocator offers its GPUs.
MoveKind = Literal["cordon", "drain", "relabel", "wait-gone", "wait-ready", "uncordon"]
MOVE_KINDS: tuple[MoveKind, ...] = ("cordon", "drain", "relabel", "wait-gone", "wait-ready", "uncordon")


@dataclass(frozen=True)
class MoveStep:
    node: str
    kind: MoveKind
    allocator: str  # the allocator the node moves to
    labels: tuple[tuple[str, str | None], ...] = ()  # relabel: key -> value, None removes
    batch: tuple[int, int] = (1, 1)  # (this batch, of how many)


def current_allocator(labels: dict[str, str]) -> str | None:
    """Which allocator a live node's labels give its GPUs to (None: neither, a node not labelled yet)."""
    if labels.get(ALLOCATOR_LABEL) == "dra":
        return "dra"
    if labels.get(ALLOCATOR_LABEL) == "device-plugin" or labels.get("nvidia.com/gpu.present") == "true":
        return "device-plugin"
    return None


def move_plan(nodes: list[tuple[str, str | None, str, dict[str, str | None]]], batches: str = "1") -> list[MoveStep]:
    """
    The steps that move each node whose live allocator differs from the one its settings want,
    in batches of ``batches`` (as deploy/fleet/rollout.py's --batches, of the nodes that move) in the
    order given: ``(node, current, wanted, labels)`` where ``labels`` are the labels the node gets
    with ``wanted`` (deploy/tasks/k8s.py's node_labels; None removes one). A node not labelled yet
    (``current`` None) serves no GPU pods to drain: it only gets its labels.
    """
    moving = [
        (node, wanted, labels) for node, current, wanted, labels in nodes if current is not None and current != wanted
    ]
    groups = split_batches(moving, batches)
    return [
        MoveStep(node, kind, wanted, tuple(sorted(labels.items())) if kind == "relabel" else (), (number, len(groups)))
        for number, group in enumerate(groups, start=1)
        for kind in MOVE_KINDS
        for node, wanted, labels in group
    ]
