"""
The cluster demo (``./scripts/demo --cluster``), on one of two clusters:

- the opt-in lab, when env GPU_NODE_LAB is set (docs/lab.md): a Kubernetes v1.28.7 cluster on this
  machine (control plane on 127.0.0.1, two node containers), NVIDIA's toolkit 1.20.0 from a local
  signed repository, NVIDIA's mock NVML as each node's driver root (8 mock A100s each; no real GPU),
  then the project's two deploys through pyinfra's CLI: ``deploy/gpu_node.py`` on the GPU nodes and
  ``deploy/k8s_gpu.py`` with time-slicing from the control plane. Prints each node's GPU capacity and
  a scheduled GPU pod, then removes everything (``--keep`` leaves it running);
- else your own cluster, when env KUBECONFIG names one that answers: ``deploy/k8s_gpu.py`` as
  docs/cluster.md describes, with this machine as the control-plane host (``@local``: its kubectl
  and that kubeconfig; set CONTROL_PLANE to use another) and the GPU nodes from env GPU_NODES, in
  pyinfra's default mode: it shows the changes and applies them only once you press Enter. Then
  each node's ``nvidia.com/gpu``.

With neither, one line says what it needs, and it exits 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lab
from harness import REPO, node_image, wait_for
from lab import LabMissing, assets, nvml_mock

REPLICAS = 10
NODE_DATA = {"nvidia_runtime_default": "false"}  # nvidia through the RuntimeClass
GPU_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: demo-gpu-pod
spec:
  restartPolicy: Never
  runtimeClassName: nvidia
  containers:
  - name: work
    image: registry.k8s.io/pause:3.9
    resources:
      limits:
        nvidia.com/gpu: 1
"""
NEEDS = (
    "cluster demo: needs GPU_NODE_LAB (a folder of the release files docs/lab.md lists) "
    "or KUBECONFIG naming a reachable cluster"
)


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def settings(extra_data: list[str]) -> dict[str, str]:
    """``--data key=value`` items as pyinfra takes them."""
    return dict(item.partition("=")[::2] for item in extra_data)


def main(keep: bool = False, extra_data: list[str] | None = None) -> int:
    if lab.configured():
        return lab_demo(keep, settings(extra_data or []))
    kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0].strip()
    if not kubeconfig:
        print(NEEDS, flush=True)
        return 2
    problem = unreachable(kubeconfig)
    if problem:
        print(f"{NEEDS} (KUBECONFIG={kubeconfig}: {problem})", flush=True)
        return 2
    return own_cluster_demo(Path(kubeconfig).resolve(), settings(extra_data or []))


# --- Your own cluster -----------------------------------------------------------------------------


def unreachable(kubeconfig: str) -> str | None:
    """Why kubectl cannot reach the cluster of ``kubeconfig``, in a few words; None when it can."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return "kubectl is not on PATH"
    if not Path(kubeconfig).is_file():
        return "no such file"
    try:
        result = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "--request-timeout=10s", "version", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return "kubectl version did not answer within 30 s"
    try:
        server = json.loads(result.stdout or "{}").get("serverVersion")
    except ValueError:
        server = None
    if server:
        return None
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else f"kubectl version exited {result.returncode} without a server version"


def own_cluster_demo(kubeconfig: Path, data: dict[str, str]) -> int:
    env = {**os.environ, "CONTROL_PLANE": os.environ.get("CONTROL_PLANE") or "@local", "PYTHONUNBUFFERED": "1"}
    data = {"kubeconfig": str(kubeconfig), **data}
    say(
        f"Your cluster (KUBECONFIG={kubeconfig}): deploy/k8s_gpu.py from CONTROL_PLANE={env['CONTROL_PLANE']}; "
        "pyinfra shows the changes first and applies them when you press Enter"
    )
    if not env.get("GPU_NODES"):
        say("GPU_NODES is unset: no GPU node's facts are read, so none is labelled (see docs/cluster.md)")
    command = [sys.executable, "-m", "pyinfra", "inventory.py", "deploy/k8s_gpu.py"]
    for key, value in data.items():
        command += ["--data", f"{key}={value}"]
    say(" ".join(command))
    returncode = subprocess.run(command, cwd=REPO, env=env).returncode
    if returncode != 0:
        return returncode
    nodes = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"], capture_output=True, text=True
    )
    if nodes.returncode == 0:
        say("nvidia.com/gpu per node (allocatable)")
        for item in json.loads(nodes.stdout)["items"]:
            gpus = item["status"].get("allocatable", {}).get("nvidia.com/gpu", "-")
            print(f"    {item['metadata']['name']}: {gpus}", flush=True)
    return 0


# --- The lab --------------------------------------------------------------------------------------


def check_lab() -> None:
    """Every lab file the demo uses, before anything starts: LabMissing names the first one missing."""
    import toolkit_repo

    assets.server_bin()
    assets.crictl()
    for key in ("pause", "device-plugin"):
        assets.image_archive(key)
    assets.nvml_mock_library()
    nvml_mock.profile_file("a100")
    toolkit_repo.lab_debs()


def lab_demo(keep: bool, extra: dict[str, str]) -> int:
    import toolkit_repo
    from lab.cluster import MOCK_DRIVER_ROOT, LabCluster

    try:
        check_lab()
    except LabMissing as missing:
        print(f"cluster demo: {missing}", flush=True)
        return 2
    data = {
        "device_plugin_version": "v0.20.0",
        "gpu_sharing": "time-slicing",
        "gpu_sharing_replicas": str(REPLICAS),
        "smoke_test": "false",
        **NODE_DATA,
        # The mock's driver root, so the plugin and the nvidia runtime see the same mock GPUs.
        "nvidia_driver_root": MOCK_DRIVER_ROOT,
        **extra,
    }
    say("Building (or reusing) the bookworm systemd node image")
    image = node_image()
    root = Path(tempfile.mkdtemp(prefix="gpu-node-cluster-demo-")) / "stable"
    with toolkit_repo.served(root) as repo:
        say(f"Toolkit: {repo.why}; served at {repo.url}")
        cluster = LabCluster(image, toolkit_data=repo.data(), node_data=NODE_DATA)
        say(
            "Starting the lab cluster: control plane on 127.0.0.1, two node containers; "
            "deploy/gpu_node.py provisions them (kernel,toolkit,runtimes,verify), then they join as kubelets "
            "with NVIDIA's mock NVML as their driver root (a100: 8 mock GPUs each)"
        )
        try:
            cluster.start()
        except LabMissing as missing:
            print(f"cluster demo: {missing}", flush=True)
            return 2
        try:
            return show_lab_cluster(cluster, data)
        finally:
            if keep:
                ids = " ".join(k.node.id for k in cluster.nodes)
                print(
                    f"==> Left running: nodes {ids}; control plane PIDs "
                    f"{[p.pid for p in cluster.control_plane.processes.values()]}; "
                    f"KUBECONFIG={cluster.control_plane.kubeconfig}",
                    flush=True,
                )
            else:
                began = time.monotonic()
                cluster.stop()
                say(f"Lab cluster removed ({time.monotonic() - began:.0f} s)")


def show_lab_cluster(cluster, data: dict[str, str]) -> int:
    provisioning = cluster.provisioning.results()
    print(
        f"    gpu_node.py: {sum(1 for op in provisioning['operations'] if op['success'])} operations "
        f"changed the nodes; timings (s): {json.dumps({k: round(v, 1) for k, v in cluster.timings.items()})}",
        flush=True,
    )
    say(
        f"pyinfra inventory.py deploy/k8s_gpu.py (CONTROL_PLANE=@local, GPU_NODES=the two nodes) "
        f"--data gpu_sharing=time-slicing --data gpu_sharing_replicas={REPLICAS} ..."
    )
    result = cluster.pyinfra("deploy/k8s_gpu.py", data, json_output=False)
    print(
        "\n".join(
            line
            for line in result.output.splitlines()
            if "Grand total" in line or "Operation " in line or " | " in line
        ),
        flush=True,
    )
    if result.returncode != 0:
        print(result.stderr[-3000:], flush=True)
        return 1
    wanted = str(cluster.gpu_count * REPLICAS)

    def capacities():
        items = cluster.control_plane.get_json("nodes")["items"]
        return {item["metadata"]["name"]: item["status"].get("allocatable", {}).get("nvidia.com/gpu") for item in items}

    wait_for(
        lambda: all(value == wanted for value in capacities().values()),
        timeout=300,
        interval=2,
        what=f"nvidia.com/gpu {wanted} on every node",
    )
    say(f"GPU capacity per node ({cluster.gpu_count} mock GPUs x {REPLICAS} time-slicing replicas)")
    for name, value in sorted(capacities().items()):
        print(f"    {name}: nvidia.com/gpu = {value}", flush=True)
    say("A pod requesting nvidia.com/gpu: 1 (runtimeClassName: nvidia)")
    cluster.control_plane.apply(GPU_POD)
    pod = wait_for(
        lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
            cluster.control_plane.get_json("pod", "demo-gpu-pod")
        ),
        timeout=180,
        interval=1,
        what="the GPU pod Running",
    )
    node = cluster.node(pod["spec"]["nodeName"])
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    envs = json.loads(node.crictl("inspect", container_id).stdout)["info"]["config"]["envs"]
    visible = next((e["value"] for e in envs if e["key"] == "NVIDIA_VISIBLE_DEVICES"), None)
    print(cluster.control_plane.kubectl("get", "pod", "demo-gpu-pod", "-o", "wide").stdout, flush=True)
    print(f"    scheduled on {node.name}, allocated NVIDIA_VISIBLE_DEVICES={visible}", flush=True)
    return 0
