"""
gpushare (``gpu_sharing=gpushare``) deployed by ``deploy/k8s_gpu.py`` on the lab cluster (tests/lab/):
a real v1.28.7 API server on 127.0.0.1, and two kubelet node containers that ``deploy/gpu_node.py``
provisioned (containerd wired to the REAL toolkit 1.20.0, nvidia the default runtime):

- ``lab-cp``, the control-plane host of the inventory: kubectl and /etc/kubernetes/admin.conf as
  kubeadm leaves them, and its kubelet runs kube-scheduler as a STATIC POD from a manifest in
  kubeadm's layout (tests/fixtures/gpushare), in the kube-scheduler image the Kubernetes server
  tarball ships. The control plane's own scheduler process is stopped: this static pod is the
  cluster's scheduler, so the tool's static-pod edit is what makes the extender take part;
- ``lab-gpu``, the GPU node, with NVIDIA's mock NVML (tests/lab/nvml_mock.py) as one T4 (16 GiB).

The extender and the gpushare device plugin are the lab's images, saved from their registries.
LAB CHANGES, made by the test after the tool applied its manifests and named so: both are
hostNetwork pods, which the lab's service forwarder (pod network only) does not serve, so they get
``KUBERNETES_SERVICE_HOST=127.0.0.1`` and the API server's port; and with no kube-proxy, the extender
listens on its NodePort (32766) itself, where the generated scheduler config calls it. The mock
NVML library finds its config beside itself in the driver root only; injected into the gpushare
plugin's container it is elsewhere, so the plugin is given ``MOCK_NVML_CONFIG`` and that config.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from cluster_hosts import assert_change_free, make_kubectl_host, pyinfra, write_inventory
from harness import Node, wait_for
from lab_assets import needs_lab

pytestmark = needs_lab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpushare"
# Facts the tool must meet, not its own constants: the static pod's path, and the extender's names
# and NodePort as upstream's config/gpushare-schd-extender.yaml (AliyunContainerService) has them.
SCHEDULER_MANIFEST = "/etc/kubernetes/manifests/kube-scheduler.yaml"
NAMESPACE = "kube-system"
EXTENDER_NAME = "gpushare-schd-extender"
EXTENDER_NODE_PORT = 32766
# The config for a 1.28 cluster, golden (the real kube-scheduler loads it: test_gpushare_scheduler_config_real.py).
SCHEDULER_CONFIG_128 = (FIXTURES / "scheduler-config-v1.28.yaml").read_text()
CP, GPU = "lab-cp", "lab-gpu"
SCHEDULER_CONFIG = "/etc/kubernetes/gpushare/scheduler-config.yaml"
INSPECT = "/usr/local/bin/kubectl-inspect-gpushare"
DEVICE_PLUGIN_DS = "gpushare-device-plugin-ds"


def static_scheduler_manifest(image: str) -> str:
    """The kube-scheduler static pod (tests/fixtures/gpushare), its image the lab's v1.28.7."""
    text = (FIXTURES / "kube-scheduler-static-pod.yaml").read_text()
    return text.replace("image: registry.k8s.io/kube-scheduler:v1.28.2", f"image: {image}")


def mirror_pod(control_plane) -> dict | None:
    result = control_plane.kubectl("-n", "kube-system", "get", "pod", f"kube-scheduler-{CP}", "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def pod_ready(pod: dict | None) -> bool:
    return bool(pod) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def lab_change_in_cluster_client(control_plane, kind: str, name: str, extra: dict[str, str] | None = None) -> None:
    """LAB CHANGE (see the module docstring): the API server on 127.0.0.1 for a hostNetwork pod."""
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.apiserver_port),
        **(extra or {}),
    }
    control_plane.kubectl("-n", NAMESPACE, "set", "env", f"{kind}/{name}", *(f"{k}={v}" for k, v in env.items()))


@pytest.fixture(scope="module")
def lab(image, real_toolkit_repo, tmp_path_factory):
    from lab import LabMissing, assets, nvml_mock
    from lab.cluster import LabCluster
    from lab.control_plane import ControlPlane
    from lab.kubelet import KubeletNode, machine_kernel_settings

    kernel = machine_kernel_settings()
    workdir = tmp_path_factory.mktemp("gpushare-lab")
    timings: dict[str, float] = {}
    try:  # every lab file first: a missing one skips before anything starts
        scheduler_archive, scheduler_image = assets.kubernetes_image("kube-scheduler")
        inspect_binary = assets.kubectl_inspect_gpushare()
        for key in ("pause", "gpushare-extender", "gpushare-plugin"):
            assets.image_archive(key)
        assets.crictl()
        assets.nvml_mock_library()
        nvml_mock.profile_file("t4")
    except LabMissing as missing:
        pytest.skip(str(missing))
    began = time.monotonic()
    control_plane = ControlPlane().start()
    nodes: list[Node] = []
    try:
        # This lab's scheduler is the static pod on lab-cp: the process one goes (by its PID).
        scheduler = control_plane.processes.pop("kube-scheduler")
        os.killpg(scheduler.pid, signal.SIGTERM)
        scheduler.wait(timeout=30)
        cp_node = Node(image=image, extra_run_args=["--hostname", CP])
        nodes.append(cp_node)
        cp_node.start()
        gpu_node = Node(image=image, extra_run_args=["--hostname", GPU])
        nodes.append(gpu_node)
        gpu_node.start()
        inventory = write_inventory(workdir / "inventory.py", {gpu_node.target: GPU}, cp_node.target)

        # gpu_node.py provisions both (containerd for the control-plane's kubelet too), in one run.
        data = {
            "container_runtimes": "containerd",
            "gpu_sharing": "gpushare",
            "stages": "toolkit,runtimes",
            "verify_report_path": str(workdir / "report.json"),
            **real_toolkit_repo.data(),
        }
        both = workdir / "both.py"
        both.write_text(f"gpu_nodes = [{gpu_node.target!r}, {cp_node.target!r}]\n")
        provisioned = pyinfra(str(both), "deploy/gpu_node.py", data, yes=True)
        assert provisioned.returncode == 0, provisioned.explain()
        timings["provision"] = time.monotonic() - began

        nvml_mock.install(gpu_node, "t4", gpus=1)
        LabCluster.point_runtime_at_mock(gpu_node)
        cp = KubeletNode(node=cp_node, name=CP, index=1).join(control_plane, images=("pause", "gpushare-extender"))
        gpu = KubeletNode(node=gpu_node, name=GPU, index=2).join(control_plane, images=("pause", "gpushare-plugin"))
        control_plane.kubectl("label", "node", CP, "node-role.kubernetes.io/control-plane=", "--overwrite")
        timings["join"] = time.monotonic() - began

        # kubeadm's control-plane files: admin.conf + kubectl, scheduler.conf, the static scheduler.
        make_kubectl_host(control_plane, cp_node)
        from lab.control_plane import kubeconfig_text

        pki = control_plane.pki.folder
        cp_node.write(
            "/etc/kubernetes/scheduler.conf",
            kubeconfig_text(
                control_plane.server,
                control_plane.pki.ca,
                pki / "scheduler.crt",
                pki / "scheduler.key",
                "system:kube-scheduler",
                embed=True,
            ),
            mode="600",
        )
        with scheduler_archive.open("rb") as stream:
            subprocess.run(
                ["docker", "exec", "-i", cp_node.id, "ctr", "-n", "k8s.io", "images", "import", "-"],
                stdin=stream,
                check=True,
                capture_output=True,
            )
        cp_node.write(SCHEDULER_MANIFEST, static_scheduler_manifest(scheduler_image), mode="600")
        wait_for(
            lambda: pod_ready(mirror_pod(control_plane)),
            timeout=180,
            interval=2,
            what="the static kube-scheduler pod Ready",
        )
        timings["lab_ready"] = time.monotonic() - began

        # As a user pins the release they downloaded.
        expected = hashlib.sha256(inspect_binary.read_bytes()).hexdigest()
        k8s_data = {
            "gpu_sharing": "gpushare",
            "smoke_test": "false",
            "gpushare_inspect_source": str(inspect_binary),
            "gpushare_inspect_sha256": expected,
            "gpushare_scheduler_ready_timeout": "180",
        }
        yield {
            "control_plane": control_plane,
            "cp": cp,
            "gpu": gpu,
            "inventory": inventory,
            "data": k8s_data,
            "timings": timings,
        }
    finally:
        for node in nodes:
            node.remove()
        control_plane.remove()
        assert machine_kernel_settings() == kernel, "the machine's kernel settings changed"


def diagnose(control_plane, kubelet) -> str:
    """What a failed wait shows: every pod, and the node's containers with their last log lines."""
    pods = control_plane.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    containers = kubelet.sh(
        'crictl ps -a 2>&1; for c in $(crictl ps -a -q); do echo "== $c"; crictl logs --tail 15 $c 2>&1; done',
        check=False,
    ).stdout
    return f"{pods}\n{containers[-6000:]}"


def allocatable(control_plane, node: str) -> dict:
    return control_plane.get_json("node", node)["status"].get("allocatable", {})


GPU_MEM_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gpu-mem-3", "namespace": "default"},
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.9",
                "imagePullPolicy": "Never",
                "resources": {"limits": {"aliyun.com/gpu-mem": 3}},
            }
        ],
    },
}


def test_gpushare_deployed_by_the_tool_binds_a_gpu_mem_pod_through_the_extender(lab, tmp_path):
    control_plane, cp = lab["control_plane"], lab["cp"]
    before = mirror_pod(control_plane)

    # pyinfra's default mode: the changes are shown, then confirmed on stdin.
    first = pyinfra(lab["inventory"], "deploy/k8s_gpu.py", lab["data"], yes=False)
    assert first.returncode == 0, first.explain()

    # The static pod was edited through the tool's own path and the kubelet restarted the scheduler.
    manifest = yaml.safe_load(cp.sh(f"cat {SCHEDULER_MANIFEST}").stdout)
    (container,) = manifest["spec"]["containers"]
    assert f"--config={SCHEDULER_CONFIG}" in container["command"]
    assert cp.sh(f"cat {SCHEDULER_CONFIG}").stdout == SCHEDULER_CONFIG_128
    after = mirror_pod(control_plane)
    assert pod_ready(after)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    assert cp.sh(f"stat -c %a {SCHEDULER_MANIFEST}").stdout.strip() == "600"

    # The 1.28 API server took the tool's manifests (apps/v1 DaemonSet, not v0.3.0's extensions/v1beta1).
    daemonset = control_plane.get_json("-n", NAMESPACE, "daemonset", DEVICE_PLUGIN_DS)
    assert daemonset["apiVersion"] == "apps/v1"
    assert control_plane.get_json("node", GPU)["metadata"]["labels"].get("gpushare") == "true"

    lab_change_in_cluster_client(control_plane, "deployment", EXTENDER_NAME, {"PORT": str(EXTENDER_NODE_PORT)})
    control_plane.kubectl(
        "-n",
        NAMESPACE,
        "patch",
        "deployment",
        EXTENDER_NAME,
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "replace",
                    "path": f"/spec/template/spec/containers/0/{probe}/httpGet/port",
                    "value": EXTENDER_NODE_PORT,
                }
                for probe in ("readinessProbe", "livenessProbe")
            ]
        ),
    )
    lab_change_in_cluster_client(
        control_plane, "daemonset", DEVICE_PLUGIN_DS, {"MOCK_NVML_CONFIG": "/etc/nvml-mock-config/config.yaml"}
    )
    # LAB CHANGE: the mock NVML library finds its config beside itself in the driver root; injected
    # into the plugin's container by the runtime it is elsewhere, so it is pointed at the config.
    control_plane.kubectl(
        "-n",
        NAMESPACE,
        "patch",
        "daemonset",
        DEVICE_PLUGIN_DS,
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "add",
                    "path": "/spec/template/spec/volumes/-",
                    "value": {"name": "nvml-mock-config", "hostPath": {"path": "/var/lib/nvml-mock/driver/config"}},
                },
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/volumeMounts/-",
                    "value": {"name": "nvml-mock-config", "mountPath": "/etc/nvml-mock-config", "readOnly": True},
                },
            ]
        ),
    )
    try:
        wait_for(
            lambda: allocatable(control_plane, GPU).get("aliyun.com/gpu-mem") == "16",
            timeout=180,
            interval=2,
            what="lab-gpu to advertise aliyun.com/gpu-mem 16 (one mock T4)",
        )
    except AssertionError as error:
        raise AssertionError(
            f"{error}: {allocatable(control_plane, GPU)}\n{diagnose(control_plane, lab['gpu'])}"
        ) from None
    assert allocatable(control_plane, GPU).get("aliyun.com/gpu-count") == "1"
    wait_for(
        lambda: (
            control_plane.get_json("-n", NAMESPACE, "deployment", EXTENDER_NAME)["status"].get("readyReplicas") == 1
        ),
        timeout=180,
        interval=2,
        what="the extender Ready",
    )

    control_plane.apply(json.dumps(GPU_MEM_POD))
    pod = wait_for(
        lambda: (lambda p: p if p["spec"].get("nodeName") else None)(control_plane.get_json("pod", "gpu-mem-3")),
        timeout=120,
        interval=2,
        what="the gpu-mem pod bound",
    )
    assert pod["spec"]["nodeName"] == GPU
    annotations = pod["metadata"].get("annotations", {})
    assert annotations.get("ALIYUN_COM_GPU_MEM_IDX") == "0", annotations
    assert annotations.get("ALIYUN_COM_GPU_MEM_POD") == "3", annotations
    assert annotations.get("ALIYUN_COM_GPU_MEM_DEV") == "16", annotations
    # The extender writes these annotations in its bind verb (the default binder writes none): the
    # scheduler, running with the tool's config, bound the pod through the extender.
    assert "ALIYUN_COM_GPU_MEM_ASSUME_TIME" in annotations, annotations

    wait_for(
        lambda: (
            control_plane.get_json("pod", "gpu-mem-3")["metadata"]["annotations"].get("ALIYUN_COM_GPU_MEM_ASSIGNED")
            == "true"
        ),
        timeout=120,
        interval=2,
        what="the device plugin's assignment",
    )

    # kubectl-inspect-gpushare, installed by the tool from the lab's file with its pinned SHA-256.
    assert cp.sh(f"sha256sum {INSPECT}").stdout.split()[0] == lab["data"]["gpushare_inspect_sha256"]
    inspect = cp.sh(f"KUBECONFIG=/etc/kubernetes/admin.conf {INSPECT}", check=False)
    assert "3/16" in inspect.stdout, inspect.stdout + inspect.stderr

    # Change-free re-runs, default mode and -y: nothing applied, the scheduler not restarted.
    for yes in (False, True):
        assert_change_free(pyinfra(lab["inventory"], "deploy/k8s_gpu.py", lab["data"], yes=yes), yes)
    assert mirror_pod(control_plane)["metadata"]["uid"] == after["metadata"]["uid"]
    print("gpushare lab timings (s):", {key: round(value) for key, value in lab["timings"].items()})


def scheduler_logs(cp) -> str:
    """Every kube-scheduler container's log on lab-cp, the exited ones too (crictl on the node)."""
    ids = cp.crictl(
        "ps", "-a", "-q", "--label", f"io.kubernetes.pod.name=kube-scheduler-{CP}", check=False
    ).stdout.split()
    return "\n".join(cp.sh(f"crictl logs {container} 2>&1", check=False).stdout for container in ids)


def test_scheduler_edit_with_a_config_the_real_scheduler_refuses_is_rolled_back_and_the_scheduler_comes_back(
    lab, tmp_path
):
    """The static-pod edit's rollback on the REAL kubelet and kube-scheduler v1.28.7 of lab-cp: the
    tool's own edit path (config file, staged manifest, swap, bounded wait) given a config in the
    v1beta2 API the gpushare guides show. The real scheduler refuses it (the guides' error, in its
    container's log), its pod never becomes Ready, the tool restores the manifest and fails in one
    line; the scheduler then runs again, Ready, with the config it had."""
    control_plane, cp = lab["control_plane"], lab["cp"]
    wait_for(lambda: pod_ready(mirror_pod(control_plane)), timeout=180, interval=2, what="the scheduler Ready")
    manifest, config = cp.sh(f"cat {SCHEDULER_MANIFEST}").stdout, cp.sh(f"cat {SCHEDULER_CONFIG}").stdout
    v1beta2 = tmp_path / "scheduler-config-v1beta2.yaml"
    v1beta2.write_text(config.replace("kubescheduler.config.k8s.io/v1\n", "kubescheduler.config.k8s.io/v1beta2\n"))
    assert v1beta2.read_text() != config

    # klog quotes the error: the quotes come escaped, as in test_gpushare_scheduler_config_real.py.
    refusal = (
        'no kind \\"KubeSchedulerConfiguration\\" is registered for version \\"kubescheduler.config.k8s.io/v1beta2\\"'
    )
    with ThreadPoolExecutor(max_workers=1) as pool:
        run_ = pool.submit(
            pyinfra,
            cp.node.target,
            "tests/fixtures/gpushare/scheduler_manifest_deploy.py",
            {"test_scheduler_config_file": str(v1beta2), "gpushare_scheduler_ready_timeout": "45"},
            yes=True,
        )
        # The kubelet removes a restarted pod's old containers: read the refusal while it happens.
        refused = False
        while not run_.done():
            refused = refused or refusal in scheduler_logs(cp)
            time.sleep(2)
        failed = run_.result()
    assert failed.returncode != 0
    assert "was not Ready with the new manifest within 45s: restored" in failed.output, failed.explain()
    assert "Traceback" not in failed.output
    assert cp.sh(f"cat {SCHEDULER_MANIFEST}").stdout == manifest
    # The restored manifest loads the config file again: it must be the one it ran with.
    assert cp.sh(f"cat {SCHEDULER_CONFIG}").stdout == config
    wait_for(
        lambda: pod_ready(mirror_pod(control_plane)), timeout=180, interval=2, what="the restored scheduler Ready again"
    )
    assert refused, "the real scheduler's refusal of the v1beta2 config was not seen in its container's log"


def test_gpushare_with_nvidia_not_the_default_runtime_is_refused_before_any_change(lab):
    """One line, no traceback, on every host of the run; the cluster and the files untouched."""
    cp = lab["cp"]
    manifest = cp.sh(f"sha256sum {SCHEDULER_MANIFEST}").stdout
    result = pyinfra(
        lab["inventory"], "deploy/k8s_gpu.py", {**lab["data"], "nvidia_runtime_default": "false"}, yes=True
    )
    assert result.returncode != 0
    line = (
        "invalid setting nvidia_runtime_default=false: allowed only true with gpu_sharing=gpushare "
        "(the gpushare device plugin drops a pod's runtimeClassName, so its pods need nvidia as the "
        "default runtime)"
    )
    assert line in result.stderr, result.explain()
    assert "Traceback" not in result.output
    assert cp.sh(f"sha256sum {SCHEDULER_MANIFEST}").stdout == manifest
