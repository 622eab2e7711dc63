"""
deploy/gpu_node.py and deploy/k8s_gpu.py against a REAL Kubernetes v1.28.7 cluster (tests/lab/,
the opt-in lab of docs/lab.md): a control plane on 127.0.0.1, two GPU node containers provisioned by
gpu_node.py with the REAL NVIDIA toolkit 1.20.0 and joined as kubelets, NVIDIA's mock NVML as their
driver root (tests/lab/nvml_mock.py, a100 profile: 8 GPUs per node, no real GPU). One cluster for
the module: every test reads or changes only what it names.

The GPU nodes keep runc as containerd's default runtime (``nvidia_runtime_default=false``): the
``nvidia`` handler is used only through the RuntimeClass, so the runtime's debug log tells a pod that
went through it from one that did not.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import toolkit_repo
import yaml
from harness import REPO, assert_no_change, wait_for
from lab import LabMissing, nvml_mock
from lab.cluster import MOCK_DRIVER_ROOT, LabCluster
from lab.control_plane import ADMIN_USER, WRITE_VERBS
from lab.kubelet import KUBELET_SYSCTLS, machine_kernel_settings
from lab_assets import needs_lab

pytestmark = needs_lab

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
def cluster(image, real_toolkit_repo):
    kernel_before = machine_kernel_settings()
    try:
        lab = LabCluster(image, toolkit_data=real_toolkit_repo.data(), node_data=NODE_DATA)
        lab.start()
    except LabMissing as missing:
        pytest.skip(str(missing))
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
    return {item["metadata"]["name"]: item["status"].get("allocatable", {}).get("nvidia.com/gpu") for item in nodes}


def resource_versions(cluster: LabCluster) -> dict[str, str]:
    kubectl = cluster.control_plane.kubectl
    versions = {}
    for kind, namespace in (
        ("daemonset", "nvidia-device-plugin"),
        ("configmap", "nvidia-device-plugin"),
        ("serviceaccount", "nvidia-device-plugin"),
        ("runtimeclass", ""),
        ("clusterrole", ""),
        ("clusterrolebinding", ""),
        ("namespace", ""),
    ):
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
        "get",
        "nodes",
        "-o",
        'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}',
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


def mock_accelerator_label(profile: str) -> str:
    """The accelerator label of the mock profile's product name: ``NVIDIA A100-SXM4-40GB`` ->
    ``nvidia-a100-sxm4-40gb`` (read from the profile the mock serves)."""
    product = nvml_mock.profile_document(profile)["device_defaults"]["name"]
    return product.lower().replace(" ", "-")


def node_labels(cluster: LabCluster) -> dict[str, dict[str, str]]:
    return {
        item["metadata"]["name"]: item["metadata"].get("labels", {})
        for item in cluster.control_plane.get_json("nodes")["items"]
    }


def api_writes(events: list[dict]) -> list[str]:
    """The writes among audit events (dry runs, which change nothing, left out): 'verb resource/name'."""
    return [
        f"{event['verb']} {event['objectRef'].get('resource')}/{event['objectRef'].get('name')} "
        f"by {event['user']['username']}"
        for event in events
        if event["verb"] in WRITE_VERBS and "dryRun=" not in event["requestURI"]
    ]


def tool_writes(cluster: LabCluster, since: int) -> tuple[list[str], int]:
    """(the admin's writes, the admin's dry runs) in the API server's audit log after event ``since``:
    during a pyinfra run the admin's kubeconfig is the tool's alone."""
    events = [
        event
        for event in cluster.control_plane.audit_events()[since:]
        if event["user"]["username"] == ADMIN_USER and event["stage"] == "ResponseComplete"
    ]
    dry_runs = sum(1 for event in events if "dryRun=" in event["requestURI"])
    return api_writes(events), dry_runs


def test_k8s_gpu_time_slicing_labels_the_real_nodes_from_nvml_advertises_count_times_replicas_and_reruns_make_no_write_call(
    cluster,
):
    """k8s_gpu.py from the control plane (@local, the lab's kubectl and admin kubeconfig), first in
    pyinfra's default mode. The GPU nodes have no nvidia-smi, on PATH or in the mock's driver root:
    their identity fact reads the mock's libnvidia-ml in the driver root through NVML, so the real
    Node objects get the tool's labels (nvidia.com/gpu.present, accelerator = the mock's product,
    the sharing config label), in one patch per node as the API server's audit log records it. The real device plugin v0.20.0 then runs on the
    two mock GPU nodes and each advertises 8 x 10 = 80 nvidia.com/gpu. A second run with -y, and a
    third in default mode, change nothing and make NO write call: the API server's audit log (every
    write by the tool's user, every Node update/patch by anyone) records none from the tool, only its
    server-side dry runs (kubectl diff), and every object keeps its resourceVersion."""
    accelerator = mock_accelerator_label(cluster.profile)
    assert all("accelerator" not in labels for labels in node_labels(cluster).values())
    mark = len(cluster.control_plane.audit_events())
    first = cluster.pyinfra("deploy/k8s_gpu.py", K8S_DATA, yes=False)
    assert first.returncode == 0, first.explain()
    assert "Detected changes" in first.output and changed_in_text_output(first.output) >= 1
    writes, _ = tool_writes(cluster, mark)
    assert sorted(w for w in writes if w.startswith(("patch nodes/", "update nodes/"))) == [
        f"patch nodes/{name} by {ADMIN_USER}" for name in ("lab-gpu-1", "lab-gpu-2")
    ], writes
    labels = node_labels(cluster)
    for name in ("lab-gpu-1", "lab-gpu-2"):
        assert labels[name]["nvidia.com/gpu.present"] == "true"
        assert labels[name]["accelerator"] == accelerator
        assert labels[name]["nvidia.com/device-plugin.config"] == f"time-slicing-{REPLICAS}"
        assert "nvidia.com/mps.capable" not in labels[name]
    print(
        f"labels on the real nodes: {json.dumps({n: {k: v for k, v in found.items() if 'nvidia' in k or k == 'accelerator'} for n, found in labels.items()})}"
    )
    print(f"first run: {len(writes)} write calls by the tool: {writes}")

    wanted = {"lab-gpu-1": str(cluster.gpu_count * REPLICAS), "lab-gpu-2": str(cluster.gpu_count * REPLICAS)}
    wait_for(
        lambda: gpu_capacity(cluster) == wanted,
        timeout=240,
        interval=2,
        what=f"nvidia.com/gpu allocatable {wanted} (now {gpu_capacity(cluster)})",
    )
    pods = cluster.control_plane.get_json("pods", "-n", "nvidia-device-plugin")["items"]
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["lab-gpu-1", "lab-gpu-2"]
    assert all(pod["spec"].get("runtimeClassName") == "nvidia" for pod in pods)

    before = resource_versions(cluster)
    mark = len(cluster.control_plane.audit_events())
    again = cluster.pyinfra("deploy/k8s_gpu.py", K8S_DATA)
    assert_no_change(again)
    writes, dry_runs = tool_writes(cluster, mark)
    assert writes == []
    print(f"re-run -y: 0 write calls, {dry_runs} dry runs")
    assert resource_versions(cluster) == before
    mark = len(cluster.control_plane.audit_events())
    quiet = cluster.pyinfra("deploy/k8s_gpu.py", K8S_DATA, yes=False)
    assert quiet.returncode == 0, quiet.explain()
    assert changed_in_text_output(quiet.output) == 0
    writes, dry_runs = tool_writes(cluster, mark)
    assert writes == []
    print(f"re-run default mode: 0 write calls, {dry_runs} dry runs")
    assert resource_versions(cluster) == before
    assert node_labels(cluster) == labels


def plugin_nodes(cluster: LabCluster) -> list[str]:
    """The nodes a device plugin pod (not being deleted) is bound to."""
    items = cluster.control_plane.get_json("pods", "-n", "nvidia-device-plugin")["items"]
    return sorted(pod["spec"]["nodeName"] for pod in items if not pod["metadata"].get("deletionTimestamp"))


def test_the_gitops_folder_applied_as_flux_applies_it_labels_the_real_nodes_and_runs_the_plugin(cluster, tmp_path):
    """deploy/render_cluster.py for the lab's two nodes (an inventory naming them, kube_node_names giving their
    Kubernetes names), then its manifests/ applied server-side under Flux's field manager, as a Flux
    Kustomization or an Argo CD directory source with ServerSideApply applies a folder (neither runs in the lab:
    kubectl apply --server-side stands in for them), to nodes stripped of gpu-node's labels first: the folder's
    Node objects label them, and the real device plugin runs on both and advertises the mock GPUs again, with no
    step between the render and the apply."""
    (tmp_path / "inventory.py").write_text("gpu_nodes = ['lab-gpu-1', 'lab-gpu-2']\n")
    data = {
        **K8S_DATA,
        "manifests_dir": "gitops",
        "manifests_inventory": "inventory.py",
        "kube_node_names": "lab-gpu-1=lab-gpu-1,lab-gpu-2=lab-gpu-2",
    }
    arguments = [part for key, value in data.items() for part in ("--data", f"{key}={value}")]
    render = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "@local", str(REPO / "deploy" / "render_cluster.py"), *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert render.returncode == 0, render.stderr[-3000:]
    wanted = {"lab-gpu-1": str(cluster.gpu_count * REPLICAS), "lab-gpu-2": str(cluster.gpu_count * REPLICAS)}

    cluster.control_plane.kubectl(
        "label", "node", "lab-gpu-1", "lab-gpu-2", "nvidia.com/gpu.present-", "nvidia.com/device-plugin.config-"
    )
    try:
        wait_for(
            lambda: plugin_nodes(cluster) == [],
            timeout=120,
            interval=1,
            what="no plugin pod on nodes without gpu-node's labels",
        )
    finally:
        cluster.control_plane.kubectl(
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "--force-conflicts",
            "-f",
            str(tmp_path / "gitops" / "manifests"),
        )
    labels = node_labels(cluster)
    for name in ("lab-gpu-1", "lab-gpu-2"):
        assert labels[name]["nvidia.com/gpu.present"] == "true"
        assert labels[name]["nvidia.com/device-plugin.config"] == f"time-slicing-{REPLICAS}"
    wait_for(
        lambda: plugin_nodes(cluster) == ["lab-gpu-1", "lab-gpu-2"],
        timeout=120,
        interval=1,
        what="the plugin pods back on both nodes",
    )
    wait_for(
        lambda: gpu_capacity(cluster) == wanted,
        timeout=180,
        interval=2,
        what=f"nvidia.com/gpu allocatable {wanted} again (now {gpu_capacity(cluster)})",
    )


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
    wait_for(
        lambda: set(gpu_capacity(cluster).values()) == {wanted},
        timeout=240,
        interval=2,
        what="the device plugin on both nodes (deployed by the previous test)",
    )
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
        assert toolkit_repo.real_runtime_created(kubelet.node, container_id), kubelet.node.read(
            "/var/log/nvidia-container-runtime.log"
        )[-3000:]
        devices = kubelet.sh(f"ls /proc/{info['pid']}/root/dev").stdout.split()
        assert any(name.startswith("nvidia") and name[6:].isdigit() for name in devices), devices

        plain_kubelet, plain_id = container_of(cluster, without_class)
        assert not toolkit_repo.real_runtime_created(plain_kubelet.node, plain_id)
    finally:
        cluster.control_plane.kubectl(
            "delete", "pod", "gpu-through-nvidia", "gpu-through-runc", "--wait=false", check=False
        )


@pytest.mark.parametrize("yes", [True, False], ids=["-y", "default-mode"])
def test_smoke_test_against_the_real_api_server_says_the_vector_add_image_is_missing_and_fails(cluster, yes):
    """The vector-add smoke pod runs against the real API server; the lab has no vector-add image (and
    no GPU): the run fails and says why, naming the pull error; the pod is deleted. In pyinfra's
    default mode too: the pod is a probe, run once, when the deploy executes."""
    result = cluster.pyinfra(
        "deploy/k8s_gpu.py", {**K8S_DATA, "smoke_test": "true", "smoke_test_timeout": "40"}, yes=yes
    )
    assert result.returncode != 0
    assert "smoke pod still Pending after the timeout" in result.output, result.explain()
    assert "ErrImagePull" in result.output or "ImagePullBackOff" in result.output, result.explain()
    assert "vectoradd" in result.output
    wait_for(
        lambda: cluster.control_plane.kubectl("get", "pod", "gpu-node-smoke-test", check=False).returncode != 0,
        timeout=60,
        what="the smoke pod deleted",
    )


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

    cluster.control_plane.kubectl("label", "node", "lab-gpu-2", "nvidia.com/gpu.present-")
    try:
        wait_for(
            lambda: plugin_nodes(cluster) == ["lab-gpu-1"],
            timeout=120,
            interval=1,
            what="the plugin pod gone from a node without nvidia.com/gpu.present",
        )
    finally:
        cluster.control_plane.kubectl("label", "node", "lab-gpu-2", "nvidia.com/gpu.present=true", "--overwrite")
    wait_for(
        lambda: plugin_nodes(cluster) == ["lab-gpu-1", "lab-gpu-2"],
        timeout=120,
        interval=1,
        what="the plugin pod back on lab-gpu-2",
    )
    # Allocatable counts healthy devices: back to 80 once the new plugin pod registered again.
    wait_for(
        lambda: gpu_capacity(cluster) == wanted,
        timeout=180,
        interval=2,
        what=f"nvidia.com/gpu allocatable {wanted} again (now {gpu_capacity(cluster)})",
    )


# MIG and MPS on the real plugin: after the time-slicing tests above (each changes the cluster's config).


def device_plugin_configs(cluster: LabCluster) -> dict[str, dict]:
    """The configs in the ConfigMap the plugin's config-manager reads, by name."""
    data = cluster.control_plane.get_json("configmap", "-n", "nvidia-device-plugin", "nvidia-device-plugin-configs")[
        "data"
    ]
    return {name: yaml.safe_load(text) for name, text in data.items()}


def pods_by_node(cluster: LabCluster, app: str) -> dict[str, dict]:
    items = cluster.control_plane.get_json("pods", "-n", "nvidia-device-plugin", "-l", f"app.kubernetes.io/name={app}")[
        "items"
    ]
    return {pod["spec"].get("nodeName"): pod for pod in items if not pod["metadata"].get("deletionTimestamp")}


def latest_config_log(cluster: LabCluster, node: str, app: str, container: str) -> str:
    """The container's log from its last "Running with config" on (the config-manager sidecar signals a
    restart when the node's config changes), read with crictl on the node; '' before the pod runs."""
    pod = pods_by_node(cluster, app).get(node)
    if not pod:
        return ""
    log = cluster.node(node).container_logs(pod["metadata"]["name"], container, namespace="nvidia-device-plugin")
    index = log.rfind("Running with config:")
    return log[index:] if index >= 0 else ""


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_mig_strategy_runs_the_real_plugin_on_whole_mock_gpus_mig_devices_not_shown_the_mock_enumerates_none(
    cluster, strategy
):
    """mig_strategy single / mixed with the real plugin v0.20.0 on the mock GPUs. The mock NVML v0.3.0
    answers nvmlDeviceGetMigMode (disabled in every profile) but enumerates no MIG devices, so MIG
    devices (nvidia.com/mig-* or MIG slices as nvidia.com/gpu) cannot be shown here. What is asserted
    for real: the ConfigMap holds the strategy under the node's config name, the node carries that
    config label, the running plugin's log shows it loaded that strategy, and each node advertises the
    mock's 8 GPUs whole (GPUs without MIG mode are whole GPUs under either strategy)."""
    data = {**K8S_DATA, "gpu_sharing": "none", "mig_strategy": strategy}
    del data["gpu_sharing_replicas"]
    result = cluster.pyinfra("deploy/k8s_gpu.py", data)
    assert result.returncode == 0, result.explain()

    name = f"no-sharing-mig-{strategy}"
    assert device_plugin_configs(cluster)[name]["flags"]["migStrategy"] == strategy
    labels = node_labels(cluster)
    for node in ("lab-gpu-1", "lab-gpu-2"):
        assert labels[node]["nvidia.com/device-plugin.config"] == name

        def running(node: str = node) -> bool:
            return f'"migStrategy": "{strategy}"' in latest_config_log(
                cluster, node, "nvidia-device-plugin", "nvidia-device-plugin-ctr"
            )

        wait_for(running, timeout=240, interval=3, what=f"the plugin on {node} running with migStrategy {strategy}")
    wanted = {"lab-gpu-1": str(cluster.gpu_count), "lab-gpu-2": str(cluster.gpu_count)}
    wait_for(
        lambda: gpu_capacity(cluster) == wanted,
        timeout=240,
        interval=2,
        what=f"nvidia.com/gpu allocatable {wanted} (now {gpu_capacity(cluster)})",
    )
    print(f"mig_strategy={strategy}: allocatable {gpu_capacity(cluster)}")


def test_mps_applies_its_config_labels_and_control_daemon_but_mps_is_not_shown_the_mock_has_no_nvidia_cuda_mps_control(
    cluster,
):
    """gpu_sharing=mps with the real plugin v0.20.0 on the mock GPUs. MPS itself cannot run here: the
    MPS control daemon needs the driver's nvidia-cuda-mps-control and nvidia-smi (the mock NVML v0.3.0
    ships neither) and real /dev/shm IPC with the GPUs. What is asserted for real: the ConfigMap's
    MPS config (10 replicas), the node labels (config, nvidia.com/mps.capable=true), the MPS control
    daemon DaemonSet scheduled on both nodes by that label, and the plugin's own log: it loaded the MPS
    config, then refused to serve because the MPS daemon is not healthy, naming the missing binary;
    so the nodes advertise no nvidia.com/gpu."""
    result = cluster.pyinfra("deploy/k8s_gpu.py", {**K8S_DATA, "gpu_sharing": "mps"})
    assert result.returncode == 0, result.explain()

    name = f"mps-{REPLICAS}"
    assert device_plugin_configs(cluster)[name]["sharing"] == {
        "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": REPLICAS}]}
    }
    labels = node_labels(cluster)
    for node in ("lab-gpu-1", "lab-gpu-2"):
        assert labels[node]["nvidia.com/device-plugin.config"] == name
        assert labels[node]["nvidia.com/mps.capable"] == "true"
    wait_for(
        lambda: sorted(pods_by_node(cluster, "nvidia-device-plugin-mps-control-daemon")) == ["lab-gpu-1", "lab-gpu-2"],
        timeout=120,
        interval=2,
        what="the MPS control daemon scheduled on both mps.capable nodes",
    )
    for node in ("lab-gpu-1", "lab-gpu-2"):

        def refused() -> str | None:
            log = latest_config_log(cluster, node, "nvidia-device-plugin", "nvidia-device-plugin-ctr")  # noqa: B023 - waited for here
            return log if '"mps"' in log and "error waiting for MPS daemon" in log else None

        log = wait_for(refused, timeout=240, interval=3, what=f"the plugin on {node} loading MPS and refusing")
        assert "nvidia-cuda-mps-control" in log, log[-2000:]
    # A plugin that serves nothing: the kubelet counts no healthy nvidia.com/gpu on either node.
    wanted = {"lab-gpu-1": "0", "lab-gpu-2": "0"}
    wait_for(
        lambda: gpu_capacity(cluster) == wanted,
        timeout=180,
        interval=2,
        what=f"nvidia.com/gpu allocatable {wanted} (now {gpu_capacity(cluster)})",
    )
    print(f"mps: allocatable {gpu_capacity(cluster)}")
