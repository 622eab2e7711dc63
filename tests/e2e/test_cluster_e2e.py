"""
deploy/gpu_node.py and deploy/k8s_gpu.py against a REAL Kubernetes v1.28.7 cluster (tests/lab/):
a control plane on 127.0.0.1, two GPU node containers provisioned by gpu_node.py with the REAL
NVIDIA toolkit 1.20.0 and joined as kubelets, NVIDIA's mock NVML on them (a100 profile: 8 GPUs per
node, no real GPU). One cluster for the
module: every test reads or changes only what it names.

The GPU nodes keep runc as containerd's default runtime (``nvidia_runtime_default=false``): the
``nvidia`` handler is used only through the RuntimeClass, so the runtime's debug log tells a pod that
went through it from one that did not.
"""

from __future__ import annotations

import json

import pytest
import toolkit_repo

from harness import assert_no_change, wait_for
from lab import LabMissing
from lab.cluster import MOCK_DRIVER_ROOT, LabCluster
from lab.kubelet import KUBELET_SYSCTLS, machine_kernel_settings

REPLICAS = 10
NODE_DATA = {"nvidia_runtime_default": "false"}
K8S_DATA = {
    **NODE_DATA,
    "device_plugin_version": "v0.20.0",  # the lab's image of NVIDIA's device plugin
    "gpu_sharing": "time-slicing",
    "gpu_sharing_replicas": str(REPLICAS),
    "smoke_test": "false",
    # The mock's driver root: the plugin's NVML then reads the same mock config (GPU UUIDs) as the
    # nvidia runtime on the node; without it they disagree and a GPU pod fails in the runtime
    # ("failed to get device handle from UUID: ERROR_NOT_FOUND").
    "nvidia_driver_root": MOCK_DRIVER_ROOT,
}


@pytest.fixture(scope="module")
def cluster(image, toolkit_repo):
    kernel_before = machine_kernel_settings()
    try:
        lab = LabCluster(image, toolkit_data=toolkit_repo.data(), node_data=NODE_DATA)
        lab.start()
    except LabMissing as missing:
        pytest.skip(f"the lab cluster needs the test lab: {missing}")
    try:
        yield lab
    finally:
        lab.stop()  # raises if this machine's kernel settings changed
        assert machine_kernel_settings() == kernel_before
        print(f"lab cluster timings (s): {json.dumps({k: round(v, 1) for k, v in lab.timings.items()})}")


def changed_in_text_output(output: str) -> int:
    """The Success column of the "Grand total" row of pyinfra's results table (default mode, no --json)."""
    (total,) = [line.split()[2:] for line in output.splitlines() if line.strip().startswith("Grand total")]
    hosts, success, error, no_change = total[:4]
    assert error == "-", output[-3000:]
    return 0 if success == "-" else int(success)


def gpu_capacity(cluster: LabCluster) -> dict[str, str | None]:
    nodes = cluster.control_plane.get_json("nodes")["items"]
    return {item["metadata"]["name"]: item["status"].get("allocatable", {}).get("nvidia.com/gpu")
            for item in nodes}


def resource_versions(cluster: LabCluster) -> dict[str, str]:
    kubectl = cluster.control_plane.kubectl
    versions = {}
    for kind, namespace in (("daemonset", "nvidia-device-plugin"), ("configmap", "nvidia-device-plugin"),
                            ("serviceaccount", "nvidia-device-plugin"), ("runtimeclass", ""),
                            ("clusterrole", ""), ("clusterrolebinding", ""), ("namespace", "")):
        # A DaemonSet's status (pods ready) moves its resourceVersion; its spec moves its generation.
        field = "generation" if kind == "daemonset" else "resourceVersion"
        args = ["get", kind, "-o", f"jsonpath={{range .items[*]}}{{.metadata.name}}={{.metadata.{field}}} {{end}}"]
        if namespace:
            args[2:2] = ["-n", namespace]
        versions[kind] = kubectl(*args).stdout
    return versions


def wait_pod_phase(cluster: LabCluster, name: str, phase: str = "Running", timeout: float = 120) -> dict:
    def current():
        pod = cluster.control_plane.get_json("pod", name)
        return pod if pod["status"].get("phase") == phase else None
    try:
        return wait_for(current, timeout=timeout, interval=1, what=f"pod {name} {phase}")
    except AssertionError as error:
        status = cluster.control_plane.get_json("pod", name)["status"]
        raise AssertionError(f"{error}: {json.dumps(status.get('containerStatuses') or status)[:2000]}") from None


def test_gpu_nodes_provisioned_by_the_tool_join_as_kubelets_without_touching_this_machine(cluster):
    """gpu_node.py (kernel, toolkit, runtimes, verify) provisioned both GPU nodes; they are Ready
    kubelets; a re-run of gpu_node.py in pyinfra's default mode, then with -y, changes nothing on the
    joined nodes (the lab's own config.toml keys stay merged in); /proc/sys stays
    read-only in every node, the kubelet's writes land on the node's own files, and this machine's
    values of those six settings are what they were."""
    assert cluster.provisioning.returncode == 0, cluster.provisioning.explain()
    ready = cluster.control_plane.kubectl(
        "get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}"
    ).stdout.split()
    assert sorted(ready) == ["lab-gpu-1=True", "lab-gpu-2=True"]

    # The re-runs leave verify out: its CRI step starts a sandbox with crictl behind the kubelet's back,
    # and a kubelet removes sandboxes it does not own, racing verify's own cleanup (see the report).
    rerun = {"stages": "kernel,toolkit,runtimes"}
    default_mode = cluster.run_gpu_node(rerun, yes=False)
    assert default_mode.returncode == 0, default_mode.explain()
    assert changed_in_text_output(default_mode.output) == 0, default_mode.output[-3000:]
    assert_no_change(cluster.run_gpu_node(rerun))

    for kubelet in cluster.nodes:
        assert kubelet.sh("grep ' /proc/sys ' /proc/mounts").stdout.split()[3].startswith("ro")
        for entry in KUBELET_SYSCTLS:
            assert kubelet.sh(f"findmnt -n /proc/sys/{entry}", check=False).returncode == 0, entry
        # The kubelet's values, in the node's own files (vm.overcommit_memory=1 is its default).
        assert kubelet.node.read("/proc/sys/vm/overcommit_memory").strip() == "1"
    assert machine_kernel_settings() == cluster.kernel_before


def test_k8s_gpu_time_slicing_default_mode_then_y_advertises_count_times_replicas_and_reruns_without_writes(cluster):
    """k8s_gpu.py from the control plane (@local, the lab's kubectl and admin kubeconfig), first in
    pyinfra's default mode: the real device plugin v0.20.0 runs on the two mock GPU nodes and each
    advertises 8 x 10 = 80 nvidia.com/gpu. A second run with -y, and a third in default mode, change
    nothing and write nothing (every object keeps its resourceVersion)."""
    first = cluster.pyinfra("deploy/k8s_gpu.py", K8S_DATA, yes=False)
    assert first.returncode == 0, first.explain()
    assert "Detected changes" in first.output and changed_in_text_output(first.output) >= 1

    wanted = {"lab-gpu-1": str(cluster.gpu_count * REPLICAS), "lab-gpu-2": str(cluster.gpu_count * REPLICAS)}
    wait_for(lambda: gpu_capacity(cluster) == wanted, timeout=240, interval=2,
             what=f"nvidia.com/gpu allocatable {wanted} (now {gpu_capacity(cluster)})")
    pods = cluster.control_plane.get_json("pods", "-n", "nvidia-device-plugin")["items"]
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["lab-gpu-1", "lab-gpu-2"]
    assert all(pod["spec"].get("runtimeClassName") == "nvidia" for pod in pods)

    before = resource_versions(cluster)
    again = cluster.pyinfra("deploy/k8s_gpu.py", K8S_DATA)
    assert_no_change(again)
    assert resource_versions(cluster) == before
    quiet = cluster.pyinfra("deploy/k8s_gpu.py", K8S_DATA, yes=False)
    assert quiet.returncode == 0, quiet.explain()
    assert changed_in_text_output(quiet.output) == 0
    assert resource_versions(cluster) == before


GPU_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
{runtime_class}  containers:
  - name: work
    image: registry.k8s.io/pause:3.9
    resources:
      limits:
        nvidia.com/gpu: 1
"""


def container_of(cluster: LabCluster, pod: dict):
    kubelet = cluster.node(pod["spec"]["nodeName"])
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    return kubelet, container_id


def test_gpu_pod_through_the_nvidia_runtimeclass_is_allocated_a_mock_gpu_by_the_real_runtime(cluster):
    """A pod requesting nvidia.com/gpu: 1 with runtimeClassName: nvidia is scheduled onto a GPU node,
    allocated one device by the real plugin (NVIDIA_VISIBLE_DEVICES=GPU-<uuid>) and run by containerd's
    nvidia handler: the real nvidia-container-runtime's debug log records its create, and the mock's
    device node is injected. A pod without the RuntimeClass runs through runc: no such record."""
    wanted = str(cluster.gpu_count * REPLICAS)
    wait_for(lambda: set(gpu_capacity(cluster).values()) == {wanted}, timeout=240, interval=2,
             what="the device plugin on both nodes (deployed by the previous test)")
    cluster.control_plane.apply(GPU_POD.format(name="gpu-through-nvidia", runtime_class="  runtimeClassName: nvidia\n"))
    cluster.control_plane.apply(GPU_POD.format(name="gpu-through-runc", runtime_class=""))
    try:
        with_class = wait_pod_phase(cluster, "gpu-through-nvidia")
        without_class = wait_pod_phase(cluster, "gpu-through-runc")
        assert with_class["spec"]["nodeName"] in ("lab-gpu-1", "lab-gpu-2")

        kubelet, container_id = container_of(cluster, with_class)
        info = json.loads(kubelet.crictl("inspect", container_id).stdout)["info"]
        env = {item["key"]: item["value"] for item in info["config"]["envs"]}
        assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-"), env
        sandbox = json.loads(kubelet.crictl("inspectp", info["sandboxID"]).stdout)
        assert sandbox["status"]["runtimeHandler"] == "nvidia"
        assert toolkit_repo.runtime_created(kubelet.node, container_id), kubelet.node.read(
            "/var/log/nvidia-container-runtime.log")[-3000:]
        devices = kubelet.sh(f"ls /proc/{info['pid']}/root/dev").stdout.split()
        assert any(name.startswith("nvidia") and name[6:].isdigit() for name in devices), devices

        plain_kubelet, plain_id = container_of(cluster, without_class)
        assert not toolkit_repo.runtime_created(plain_kubelet.node, plain_id)
    finally:
        cluster.control_plane.kubectl("delete", "pod", "gpu-through-nvidia", "gpu-through-runc",
                                      "--wait=false", check=False)


@pytest.mark.parametrize("yes", [True, False], ids=["-y", "default-mode"])
def test_smoke_test_against_the_real_api_server_says_the_vector_add_image_is_missing_and_fails(cluster, yes):
    """The vector-add smoke pod runs against the real API server; the lab has no vector-add image (and
    no GPU): the run fails and says why, naming the pull error; the pod is deleted. In pyinfra's
    default mode too: the pod is a probe, run once, when the deploy executes."""
    result = cluster.pyinfra("deploy/k8s_gpu.py", {**K8S_DATA, "smoke_test": "true", "smoke_test_timeout": "40"},
                             yes=yes)
    assert result.returncode != 0
    assert "smoke pod still Pending after the timeout" in result.output, result.explain()
    assert "ErrImagePull" in result.output or "ImagePullBackOff" in result.output, result.explain()
    assert "vectoradd" in result.output
    wait_for(lambda: cluster.control_plane.kubectl("get", "pod", "gpu-node-smoke-test", check=False).returncode != 0,
             timeout=60, what="the smoke pod deleted")


def test_a_device_plugin_config_the_real_plugin_rejects_is_refused_before_anything_is_applied(cluster):
    """MPS with the mixed MIG strategy is a config the NVIDIA device plugin refuses at start; the tool
    refuses it first, in one line naming the setting, and the cluster's objects stay as they were."""
    before = resource_versions(cluster)
    result = cluster.pyinfra("deploy/k8s_gpu.py", {**K8S_DATA, "gpu_sharing": "mps", "mig_strategy": "mixed"})
    assert result.returncode != 0
    assert "invalid setting mig_strategy='mixed'" in result.output, result.explain()
    assert "Traceback" not in result.output
    assert resource_versions(cluster) == before


def test_a_node_that_stops_being_a_gpu_node_loses_its_device_plugin_pod(cluster):
    """The device plugin runs only on GPU nodes: without the nvidia.com/gpu.present label a node loses
    its plugin pod; labelled again, it gets it back. (Last in the module: a re-registered plugin was
    seen leaving the kubelet with "no healthy devices" for a while.)"""
    wanted = {"lab-gpu-1": str(cluster.gpu_count * REPLICAS), "lab-gpu-2": str(cluster.gpu_count * REPLICAS)}

    def plugin_nodes():
        items = cluster.control_plane.get_json("pods", "-n", "nvidia-device-plugin")["items"]
        return sorted(pod["spec"]["nodeName"] for pod in items if not pod["metadata"].get("deletionTimestamp"))

    cluster.control_plane.kubectl("label", "node", "lab-gpu-2", "nvidia.com/gpu.present-")
    try:
        wait_for(lambda: plugin_nodes() == ["lab-gpu-1"], timeout=120, interval=1,
                 what="the plugin pod gone from a node without nvidia.com/gpu.present")
    finally:
        cluster.control_plane.kubectl("label", "node", "lab-gpu-2", "nvidia.com/gpu.present=true", "--overwrite")
    wait_for(lambda: plugin_nodes() == ["lab-gpu-1", "lab-gpu-2"], timeout=120, interval=1,
             what="the plugin pod back on lab-gpu-2")
    # Allocatable counts healthy devices: back to 80 once the new plugin pod registered again.
    wait_for(lambda: gpu_capacity(cluster) == wanted, timeout=180, interval=2,
             what=f"nvidia.com/gpu allocatable {wanted} again (now {gpu_capacity(cluster)})")
