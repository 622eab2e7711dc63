"""
The lab for gpu_allocator=dra (docs/lab.md, "DRA"): official Kubernetes server binaries of a release
that serves ``resource.k8s.io/v1`` (1.34 or newer, their own tarball in the lab's ``kubernetes-dra/``
folder beside the 1.28 one the other lab tests pin), one GPU node container on sid's real containerd
2.x (CDI on by default, as DRA needs), provisioned by deploy/gpu_node.py, NVIDIA's mock NVML laid
out as its driver root by ``lab/nvml_mock.py``, joined as a kubelet; deploy/k8s_gpu.py then deploys
the DRA driver's kubelet plugin from the lab's image of it.

The node is provisioned as a device-plugin node: a lab node has no NVIDIA driver for the DRA group's
preflight to accept (its driver branch is read from the kernel's module), so the host prerequisites
are tests/unit/test_dra_node.py's; the cluster side, the claim and the containerd 2.x that injects
the claimed devices are real here.

What a test can check without the lab (tests/unit/test_dra_lab.py): the release check, the lab
changes to containerd 2.x's config (run through the real containerd 2.1's ``config dump``), and the
readings of a ResourceClaim's allocation and of a container's devices.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomlkit
from harness import Node, run, sid_containerd_deb, wait_for
from packaging.version import InvalidVersion, Version

from lab import LAB_DOC, LabMissing, assets, lab_path, nvml_mock
from lab.cluster import LabCluster
from lab.control_plane import ControlPlane
from lab.kubelet import KubeletNode, machine_kernel_settings

SERVER_FOLDER = "kubernetes-dra"
SERVER_CACHE = "kubernetes-server-dra"
OLDEST = Version("1.34")
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# containerd 2.x's CRI plugins (config version 3)
CRI_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_IMAGES = "io.containerd.cri.v1.images"


def release_refusal(tag: str) -> str | None:
    """Why the kubernetes-dra tarball (its ``kube-apiserver.docker_tag``) cannot serve the DRA lab; None: it can."""
    where = f"{SERVER_FOLDER}/{assets.SERVER_TARBALL}"
    try:
        version = Version(tag.strip().lstrip("v"))
    except InvalidVersion:
        return f"{where} records the release {tag.strip()!r}, which is no version"
    if Version(f"{version.major}.{version.minor}") < OLDEST:
        return (
            f"{where} is Kubernetes {tag.strip()}; the DRA lab needs 1.34 or newer (resource.k8s.io/v1): "
            f"provide a newer release there (see {LAB_DOC})"
        )
    return None


def server_bin() -> Path:
    """The kubernetes-dra tarball's binaries, unpacked; its release checked (unpack names a tarball
    without its version record)."""
    tarball = lab_path(SERVER_FOLDER, assets.SERVER_TARBALL)
    names = (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kubectl",
        assets.SERVER_VERSION_FILE,
    )
    folder = assets.unpack(
        tarball, {f"{assets.SERVER_BIN}/{name}": name for name in names}, assets.CACHE / SERVER_CACHE
    )
    refusal = release_refusal((folder / assets.SERVER_VERSION_FILE).read_text())
    if refusal:
        raise LabMissing(refusal)
    return folder


def kubernetes_binary(name: str) -> Path:
    """kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or kubectl of the DRA release."""
    return server_bin() / name


def cni_paths(dump: str) -> dict:
    """Where containerd 2.x's CRI looks for CNI plugins and configs (its ``config dump``); 2.1 lists
    plugin folders in ``bin_dirs`` and leaves the old ``bin_dir`` empty."""
    cni = tomlkit.parse(dump)["plugins"][CRI_RUNTIME]["cni"]
    folders = [folder for folder in [cni.get("bin_dir", ""), *cni.get("bin_dirs", [])] if folder]
    return {"cni_bin": folders[0], "cni_conf": cni["conf_dir"], "config": CONTAINERD_CONFIG}


def lab_config(text: str, sandbox_image: str) -> str | None:
    """
    The LAB CHANGES to a containerd 2.x config.toml (version 3) as KubeletNode makes them to 1.x's:
    the lab's pause image as the pinned sandbox image, and ``restrict_oom_score_adj`` (a node
    container lacks CAP_SYS_RESOURCE). None: the file has them already.
    """
    document = tomlkit.parse(text)
    plugins = document.setdefault("plugins", tomlkit.table())
    runtime = plugins.setdefault(CRI_RUNTIME, tomlkit.table())
    pinned = plugins.setdefault(CRI_IMAGES, tomlkit.table()).setdefault("pinned_images", tomlkit.table())
    if runtime.get("restrict_oom_score_adj") is True and pinned.get("sandbox") == sandbox_image:
        return None
    runtime["restrict_oom_score_adj"] = True
    pinned["sandbox"] = sandbox_image
    return tomlkit.dumps(document)


# The lab's nodes run on this machine's cgroup v1, which a kubelet refuses from 1.35 unless told.
KUBELET_SETTINGS = {"failCgroupV1": False}


@dataclass
class Containerd2Kubelet(KubeletNode):
    """A kubelet on containerd 2.x, of the DRA release (KubeletNode's steps, 2.x's config)."""

    kubelet_settings: dict = field(default_factory=lambda: dict(KUBELET_SETTINGS))

    def containerd_config_paths(self) -> dict:
        return cni_paths(self.sh("containerd config dump").stdout)

    def configure_containerd(self, sandbox_image: str) -> None:
        changed = lab_config(self.node.read(CONTAINERD_CONFIG), sandbox_image)
        if changed is None:
            return
        self.node.write(CONTAINERD_CONFIG, changed)
        self.sh("systemctl restart containerd")
        wait_for(
            lambda: self.sh("ctr version", check=False).returncode == 0, timeout=60, what="containerd after restart"
        )


def claim_allocation(claim: dict) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each device a ResourceClaim (resource.k8s.io/v1) was allocated."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    return [(result["driver"], result["pool"], result["device"]) for result in results]


def container_devices(inspect: dict) -> list[str]:
    """The device nodes in a container's runtime spec (``crictl inspect``'s ``info.runtimeSpec``)."""
    spec = inspect.get("info", {}).get("runtimeSpec", {})
    return sorted(device["path"] for device in (spec.get("linux") or {}).get("devices") or [])


def start(image: str, toolkit_data: dict, name: str = "lab-dra-gpu-1", gpus: int = 2) -> LabCluster:
    """
    The DRA lab: its control plane and one GPU node on containerd 2.x, as a LabCluster (its
    ``pyinfra`` runs deploy files against them, its ``stop`` removes them by id and PID and checks
    this machine's kernel settings). Raises LabMissing naming what the lab lacks.
    """
    server_bin()  # a missing or too old release is named before anything starts
    lab = LabCluster(image, toolkit_data=toolkit_data, names=(name,))
    lab.kernel_before = machine_kernel_settings()
    began = time.monotonic()
    try:
        lab.control_plane = ControlPlane(kubernetes_binary=kubernetes_binary).start()
        node = Node(image=image, extra_run_args=["--hostname", name])
        lab.nodes.append(Containerd2Kubelet(node, name, 1, kubernetes_binary=kubernetes_binary))
        node.start()
        run(["docker", "cp", str(sid_containerd_deb()), f"{node.id}:/tmp/containerd-sid.deb"])
        node.sh(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/containerd-sid.deb",
            timeout=600,
        )
        # Debian ships a version 2 config.toml with 2.x: the deploy starts from the binary's own default (3).
        node.sh(f"rm -f {CONTAINERD_CONFIG} && systemctl restart containerd")
        lab.provisioning = lab.run_gpu_node({"nvidia_runtime_default": "false"})
        if lab.provisioning.returncode != 0:
            raise AssertionError(f"deploy/gpu_node.py failed on the DRA lab node:\n{lab.provisioning.explain()}")
        lab.gpu_count = nvml_mock.install(node, "a100", gpus)
        lab.nodes[0].join(lab.control_plane, images=("pause", "dra-driver"))
    except BaseException:
        lab.stop()
        raise
    lab.timings["total_up"] = time.monotonic() - began
    return lab


def resource_slices(lab: LabCluster, node: str) -> list[dict]:
    """The ResourceSlices the DRA driver publishes for ``node``."""
    items = lab.control_plane.get_json("resourceslices")["items"]
    return [
        item for item in items if item["spec"].get("nodeName") == node and item["spec"]["driver"] == "gpu.nvidia.com"
    ]


def inspect_container(kubelet: KubeletNode, pod: str, container: str, namespace: str = "default") -> dict:
    ids = kubelet.crictl(
        "ps",
        "-q",
        "--label",
        f"io.kubernetes.pod.name={pod}",
        "--label",
        f"io.kubernetes.pod.namespace={namespace}",
        "--label",
        f"io.kubernetes.container.name={container}",
    ).stdout.split()
    if not ids:
        raise AssertionError(f"no running container {container} of pod {namespace}/{pod} on {kubelet.name}")
    return json.loads(kubelet.sh(f"crictl inspect {shlex.quote(ids[0])}").stdout)
