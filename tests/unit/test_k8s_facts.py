"""
Kubernetes facts: their commands run for real in a local shell where that is honest (kubectl
missing, kubeconfig unreadable, API server unreachable: a closed port on 127.0.0.1, and this
machine's own GPU identity: it has none), and their parsers on kubectl output fixtures.
No kube-apiserver exists on the test machines.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import StringCommand

from deploy.facts.k8s import (
    GpuNodeIdentity,
    HelmRelease,
    KubeCluster,
    KubeLiveObjects,
    KubeNodes,
    KubeServerSideDiff,
    accelerator_label,
    captured,
    kube_node_name,
    parse_captured,
)
from deploy.operations.kubectl import labels_to_change, stamp_manifest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: closed-port
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: closed-port
  context: {cluster: closed-port, user: nobody}
current-context: closed-port
users:
- name: nobody
  user: {token: not-a-token}
"""


def run(command, env=None) -> list[str]:
    text = command.get_raw_value() if isinstance(command, StringCommand) else command
    result = subprocess.run(["/bin/sh", "-c", text], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr  # facts always exit 0
    return result.stdout.splitlines()


def fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_captured_reports_exit_code_stdout_and_stderr_of_a_real_command():
    lines = run(captured(StringCommand("sh -c 'echo one; echo two; echo oops >&2; exit 3'")))
    assert parse_captured(lines) == (3, "one\ntwo", "oops")


def test_kube_cluster_kubectl_missing_real_shell():
    lines = run(KubeCluster().command("/etc/kubernetes/admin.conf"), env={"PATH": "/nonexistent"})
    assert KubeCluster().process(lines)["error"] == "kubectl is not installed (not on PATH)"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_kube_cluster_kubeconfig_missing_real_kubectl(tmp_path):
    state = KubeCluster().process(run(KubeCluster().command(str(tmp_path / "absent.conf"))))
    assert state["kubectl"] and not state["reachable"]
    assert state["error"] == "the kubeconfig does not exist or is not readable"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_kube_cluster_api_server_unreachable_real_kubectl_no_cluster(tmp_path):
    """No kube-apiserver here: a kubeconfig pointing at a closed port on 127.0.0.1."""
    kubeconfig = tmp_path / "closed-port.conf"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    state = KubeCluster().process(run(KubeCluster().command(str(kubeconfig))))
    assert not state["reachable"]
    assert state["error"].startswith("the API server did not answer: The connection to the server 127.0.0.1:1 was refused")


def test_kube_cluster_version_parsed():
    lines = ["rc 0", 'out {"major": "1", "minor": "31+", "gitVersion": "v1.31.4+k3s1", "platform": "linux/amd64"}']
    state = KubeCluster().process(lines)
    assert state == {"kubectl": True, "kubeconfig_readable": True, "reachable": True, "version": "1.31",
                     "git_version": "v1.31.4+k3s1", "error": None}


def test_gpu_node_identity_of_this_machine_real_shell_no_gpu():
    """This machine has no GPU and no nvidia-smi: zero GPUs, nothing to label with a product."""
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command()))
    assert state["hostname"] == subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert state["products"] == []
    assert state["nvidia_smi"] in ("missing",) or state["nvidia_smi"].startswith("exit ")


def test_gpu_node_identity_parsed_from_fixtures():
    assert GpuNodeIdentity().process(fixture("identity-a100x2.txt")) == {
        "hostname": "GPU-Node-1", "pci_gpus": 2, "nvidia_smi": "ok",
        "products": ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"]}
    assert GpuNodeIdentity().process(fixture("identity-driver-down.txt"))["products"] == []


def test_nodes_and_labels_parsed():
    state = KubeNodes().process(fixture("nodes.txt"))
    assert state["error"] is None
    assert state["nodes"]["gpu1"]["nvidia.com/gpu.present"] == "true"
    assert set(state["nodes"]) == {"gpu1", "cp1"}
    assert KubeNodes().process(["rc 1", "err error: You must be logged in to the server (Unauthorized)"]) == {
        "nodes": None, "error": "error: You must be logged in to the server (Unauthorized)"}


def test_live_objects_parsed_from_a_kubectl_list():
    objects = KubeLiveObjects().process(fixture("live-objects-list.txt"))["objects"]
    assert objects[("RuntimeClass", "", "nvidia")]["gpu-node.io/digest"] == "0123456789abcdef0123"
    assert objects[("ConfigMap", "nvidia-device-plugin", "nvidia-device-plugin-configs")] == {}
    assert KubeLiveObjects().process(["rc 0"]) == {"objects": {}, "error": None}


def test_server_side_diff_exit_codes():
    assert KubeServerSideDiff().process(["rc 0"])["changed"] is False
    assert KubeServerSideDiff().process(["rc 1", "out -  replicas: 4", "out +  replicas: 8"])["changed"] is True
    failed = KubeServerSideDiff().process(["rc 2", "err error: unable to recognize \"STDIN\": no matches for kind"])
    assert failed["changed"] is None and failed["error"].startswith("error: unable to recognize")


def test_helm_release_parsed():
    assert HelmRelease().process(["helm-missing"])["error"] == "helm is not installed (not on PATH)"
    state = HelmRelease().process([
        "list-rc 0", 'list-out [{"name":"nvdp","namespace":"nvidia-device-plugin","revision":"2",'
        '"status":"deployed","chart":"nvidia-device-plugin-0.17.0","app_version":"0.17.0"}]',
        "values-rc 0", 'values-out {"config":{"default":"no-sharing"}}'])
    assert (state["exists"], state["chart"], state["status"]) == (True, "nvidia-device-plugin-0.17.0", "deployed")
    assert state["values"] == {"config": {"default": "no-sharing"}}


@pytest.mark.parametrize("product, label", [
    ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
    ("Tesla P100-PCIE-16GB", "nvidia-tesla-p100-pcie-16gb"),
    ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090"),
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
    ("", None),
    (None, None),
])
def test_accelerator_label_normalised(product, label):
    assert accelerator_label(product) == label


def test_accelerator_label_fits_a_label_value():
    value = accelerator_label("NVIDIA " + "X" * 100)
    assert len(value) <= 63 and value[-1].isalnum()


def test_kube_node_name_mapping_then_hostname_then_inventory_name():
    assert kube_node_name({"10.0.0.5": "gpu-a"}, "10.0.0.5", "whatever") == "gpu-a"
    assert kube_node_name({}, "10.0.0.6", "GPU-Node-1") == "gpu-node-1"
    assert kube_node_name({}, "gpu3", None) == "gpu3"


def test_labels_to_change_only_differences_and_removals():
    current = {"nvidia.com/gpu.present": "true", "accelerator": "nvidia-t4", "nvidia.com/mps.capable": "true"}
    wanted = {"nvidia.com/gpu.present": "true", "accelerator": "nvidia-a100", "nvidia.com/mps.capable": None,
              "nvidia.com/device-plugin.config": None}
    assert labels_to_change(current, wanted) == {"accelerator": "nvidia-a100", "nvidia.com/mps.capable": None}


def test_stamp_digest_depends_on_content_only():
    first, digest = stamp_manifest("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n", "ns")
    again, same = stamp_manifest("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n", "ns")
    _, other = stamp_manifest("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n", "ns")
    assert digest == same != other and first == again
    assert f"gpu-node.io/digest: {digest}" in first
