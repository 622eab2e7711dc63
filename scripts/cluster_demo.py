"""
The cluster demo (``./scripts/demo --cluster``): a lab Kubernetes v1.28.7 cluster on this machine
(control plane on 127.0.0.1, two node containers), the real NVIDIA Container Toolkit 1.20.0 from a
local signed repository, NVIDIA's mock NVML on the nodes (8 mock A100s each; no real GPU), then the
project's two deploys through pyinfra's CLI: ``deploy/gpu_node.py`` on the GPU nodes and
``deploy/k8s_gpu.py`` with time-slicing from the control plane. Prints each node's GPU capacity and
a scheduled GPU pod, then removes everything (``--keep`` leaves it running).

The lab's real upstream software comes from env GPU_NODE_LAB (default ../shared/lab).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from harness import node_image, wait_for
from lab import LabMissing
from lab.cluster import MOCK_DRIVER_ROOT, LabCluster

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


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def main(keep: bool = False, extra_data: list[str] | None = None) -> int:
    import toolkit_repo

    data = {"device_plugin_version": "v0.20.0", "gpu_sharing": "time-slicing",
            "gpu_sharing_replicas": str(REPLICAS), "smoke_test": "false", **NODE_DATA,
            # The mock's driver root, so the plugin and the nvidia runtime see the same mock GPUs.
            "nvidia_driver_root": MOCK_DRIVER_ROOT}
    for item in extra_data or []:
        key, _, value = item.partition("=")
        data[key] = value
    say("Building (or reusing) the bookworm systemd node image")
    image = node_image()
    root = Path(tempfile.mkdtemp(prefix="gpu-node-cluster-demo-")) / "stable"
    try:
        toolkit_repo.build_repo(root)
    except LabMissing as missing:
        print(f"cluster demo: {missing}", flush=True)
        return 2
    with toolkit_repo.serve(root) as url:
        say(f"Serving the REAL nvidia-container-toolkit 1.20.0 (from the lab) in a signed repository at {url}")
        cluster = LabCluster(image, toolkit_data=toolkit_repo.deploy_data(url), node_data=NODE_DATA)
        say("Starting the lab cluster: control plane on 127.0.0.1, two node containers; "
            "deploy/gpu_node.py provisions them (kernel,toolkit,runtimes,verify), then they join as kubelets "
            "with nvml-mock (a100: 8 mock GPUs each)")
        try:
            cluster.start()
        except LabMissing as missing:
            print(f"cluster demo: {missing}", flush=True)
            return 2
        try:
            provisioning = cluster.provisioning.results()
            print(f"    gpu_node.py: {sum(1 for op in provisioning['operations'] if op['success'])} operations "
                  f"changed the nodes; timings (s): {json.dumps({k: round(v, 1) for k, v in cluster.timings.items()})}",
                  flush=True)
            say(f"pyinfra inventory.py deploy/k8s_gpu.py (CONTROL_PLANE=@local, GPU_NODES=the two nodes) "
                f"--data gpu_sharing=time-slicing --data gpu_sharing_replicas={REPLICAS} ...")
            result = cluster.pyinfra("deploy/k8s_gpu.py", data, json_output=False)
            print("\n".join(line for line in result.output.splitlines() if "Grand total" in line or "Operation " in line or " | " in line), flush=True)
            if result.returncode != 0:
                print(result.stderr[-3000:], flush=True)
                return 1
            wanted = str(cluster.gpu_count * REPLICAS)

            def capacities():
                items = cluster.control_plane.get_json("nodes")["items"]
                return {item["metadata"]["name"]: item["status"].get("allocatable", {}).get("nvidia.com/gpu")
                        for item in items}

            wait_for(lambda: all(value == wanted for value in capacities().values()), timeout=300, interval=2,
                     what=f"nvidia.com/gpu {wanted} on every node")
            say("GPU capacity per node (8 mock GPUs x 10 time-slicing replicas)")
            for name, value in sorted(capacities().items()):
                print(f"    {name}: nvidia.com/gpu = {value}", flush=True)
            say("A pod requesting nvidia.com/gpu: 1 (runtimeClassName: nvidia)")
            cluster.control_plane.apply(GPU_POD)
            pod = wait_for(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
                cluster.control_plane.get_json("pod", "demo-gpu-pod")), timeout=180, interval=1,
                what="the GPU pod Running")
            node = cluster.node(pod["spec"]["nodeName"])
            container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
            envs = json.loads(node.crictl("inspect", container_id).stdout)["info"]["config"]["envs"]
            visible = next((e["value"] for e in envs if e["key"] == "NVIDIA_VISIBLE_DEVICES"), None)
            print(cluster.control_plane.kubectl("get", "pod", "demo-gpu-pod", "-o", "wide").stdout, flush=True)
            print(f"    scheduled on {node.name}, allocated NVIDIA_VISIBLE_DEVICES={visible}", flush=True)
            return 0
        finally:
            if keep:
                ids = " ".join(k.node.id for k in cluster.nodes)
                print(f"==> Left running: nodes {ids}; control plane PIDs "
                      f"{[p.pid for p in cluster.control_plane.processes.values()]}; "
                      f"KUBECONFIG={cluster.control_plane.kubeconfig}", flush=True)
            else:
                began = time.monotonic()
                cluster.stop()
                say(f"Lab cluster removed ({time.monotonic() - began:.0f} s)")
