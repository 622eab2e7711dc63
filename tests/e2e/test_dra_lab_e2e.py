"""
gpu_allocator=dra against a REAL Kubernetes of 1.34 or newer (tests/lab/dra.py, the opt-in lab of
docs/lab.md): official server binaries on 127.0.0.1, one GPU node container on sid's REAL containerd
2.x provisioned by deploy/gpu_node.py with the REAL NVIDIA toolkit, NVIDIA's mock NVML as its driver
root (two GPUs of the a100 profile, no real GPU), NVIDIA's REAL DRA driver image. deploy/k8s_gpu.py
deploys the DRA objects; a pod asking for one GPU through a claim of its ResourceClaimTemplate runs,
its claim allocated by the driver on that node and the claimed device node put into its container
by containerd through CDI. Without GPU_NODE_LAB it skips in one line naming the setting.
"""

from __future__ import annotations

import json

import pytest
from harness import wait_for
from lab import LabMissing
from lab import dra as dra_lab
from lab.assets import IMAGES
from lab.nvml_mock import MOCK_DRIVER_ROOT
from lab_assets import needs_lab

from deploy.k8s import dra
from deploy.settings import parse_settings
from deploy.tasks.dra_cluster import SMOKE_NAMESPACE, render_smoke_pod

pytestmark = needs_lab

K8S_DATA = {"gpu_allocator": "dra", "nvidia_driver_root": MOCK_DRIVER_ROOT, "smoke_test": "false"}


@pytest.fixture(scope="module")
def lab(image, real_toolkit_repo):
    try:
        cluster = dra_lab.start(image, real_toolkit_repo.data())
    except LabMissing as missing:
        pytest.skip(str(missing))
    try:
        yield cluster
    finally:
        cluster.stop()  # by id and PID; raises if this machine's kernel settings changed
        print(f"DRA lab timings (s): {json.dumps({k: round(v, 1) for k, v in cluster.timings.items()})}")


def test_a_dra_claim_reaches_a_running_pod_on_a_real_cluster(lab):
    kubelet = lab.nodes[0]
    deployed = lab.pyinfra("deploy/k8s_gpu.py", K8S_DATA)
    assert deployed.returncode == 0, deployed.explain()
    labels = lab.control_plane.get_json("node", kubelet.name)["metadata"]["labels"]
    assert labels.get(dra.ALLOCATOR_LABEL) == "dra" and "nvidia.com/gpu.present" not in labels

    slices = wait_for(
        lambda: dra_lab.resource_slices(lab, kubelet.name),
        timeout=180,
        interval=2,
        what=f"the DRA driver's ResourceSlices for {kubelet.name}",
    )
    offered = sorted(device["name"] for item in slices for device in item["spec"].get("devices", []))
    assert len(offered) == lab.gpu_count, offered

    # The deploy's own smoke pod, with the lab's pause image (the mock runs no CUDA): it runs until deleted.
    pod = render_smoke_pod(parse_settings({"gpu_allocator": "dra", "smoke_test_image": IMAGES["pause"]}))
    lab.control_plane.apply(pod)
    try:
        wait_for(
            lambda: (
                lab.control_plane.get_json("pod", dra.SMOKE_POD, "-n", SMOKE_NAMESPACE)["status"].get("phase")
                == "Running"
            ),
            timeout=180,
            interval=2,
            what=f"pod {dra.SMOKE_POD} Running",
        )
        claims = [
            claim
            for claim in lab.control_plane.get_json("resourceclaims", "-n", SMOKE_NAMESPACE)["items"]
            if any(ref["name"] == dra.SMOKE_POD for ref in claim["metadata"].get("ownerReferences", []))
        ]
        [(driver, pool, device)] = dra_lab.claim_allocation(claims[0])
        assert (driver, pool) == (dra.DRIVER, kubelet.name) and device in offered
        inspected = dra_lab.inspect_container(kubelet, dra.SMOKE_POD, "cuda-vectoradd", SMOKE_NAMESPACE)
        devices = dra_lab.container_devices(inspected)
        assert any(path.startswith("/dev/nvidia") and path[len("/dev/nvidia") :].isdigit() for path in devices), devices
    finally:
        lab.control_plane.kubectl("delete", "pod", dra.SMOKE_POD, "-n", SMOKE_NAMESPACE, "--wait=false", check=False)

    again = lab.pyinfra("deploy/k8s_gpu.py", K8S_DATA)
    assert again.returncode == 0 and not again.changed_operations(), again.explain()
