"""
drain_before_restart against the lab cluster (tests/lab/): a real Kubernetes v1.28.7 control plane
on 127.0.0.1 and a GPU node container that deploy/gpu_node.py provisioned (containerd wired to the
toolkit tests/toolkit_repo.py serves) and that then joined as a real kubelet, running real pods: a
Deployment's pod (evicted by the drain) and a DaemonSet's pod (left alone, --ignore-daemonsets).

The control_plane host of the inventory is a node container holding the lab's kubectl and an admin
kubeconfig (as kubeadm leaves /etc/kubernetes/admin.conf). The config change that makes containerd
restart is a real one: ``nvidia_runtime_default`` flipped. When things happened is read from the
test side: a ``kubectl get node --watch`` and a pod watch, each line stamped with CLOCK_MONOTONIC,
which every container of this machine shares with systemd's ActiveEnterTimestampMonotonic.

One cluster for the module: the tests run in order on the same node (each leaves it uncordoned,
with the workload running, or says otherwise).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
import yaml
from cluster_hosts import assert_change_free, make_kubectl_host, pyinfra, write_inventory
from harness import Node, wait_for
from lab_assets import needs_lab

from deploy.operations.safe_install import BACKUP_INFIX

CONFIG = "/etc/containerd/config.toml"
NODE_NAME = "gpu-drain-1"
WORKLOAD = "drain-workload"
DAEMON = "drain-daemon"


def workloads(node_name: str) -> str:
    pod = {
        "nodeSelector": {"kubernetes.io/hostname": node_name},
        "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9", "imagePullPolicy": "Never"}],
    }
    labels = lambda app: {"matchLabels": {"app": app}}  # noqa: E731
    template = lambda app: {"metadata": {"labels": {"app": app}}, "spec": pod}  # noqa: E731
    objects = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": WORKLOAD, "namespace": "default"},
            "spec": {"replicas": 1, "selector": labels(WORKLOAD), "template": template(WORKLOAD)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": DAEMON, "namespace": "default"},
            "spec": {"selector": labels(DAEMON), "template": template(DAEMON)},
        },
    ]
    return yaml.safe_dump_all(objects)


PDB = json.dumps(
    {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "drain-workload-blocks", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": WORKLOAD}}},
    }
)


class Watch:
    """A kubectl watch whose output lines are stamped with CLOCK_MONOTONIC (µs) as they arrive."""

    def __init__(self, control_plane, *args: str) -> None:
        self.lines: list[tuple[int, str]] = []
        self.process = subprocess.Popen(
            [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.monotonic_ns() // 1000, line.strip()))

    def stop(self) -> list[tuple[int, str]]:
        time.sleep(1)  # the last events reach the watch
        self.process.terminate()
        self.process.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.lines


def node_watch(control_plane) -> Watch:
    return Watch(control_plane, "get", "node", NODE_NAME, "--watch", "-o", 'jsonpath={.spec.unschedulable}{"\\n"}')


def pod_watch(control_plane) -> Watch:
    return Watch(
        control_plane,
        "get",
        "pods",
        "-l",
        f"app={WORKLOAD}",
        "--watch-only",
        "--output-watch-events",
        "-o",
        'jsonpath={.type} {.object.metadata.name}{"\\n"}',
    )


def transitions(lines) -> list[tuple[int, str]]:
    """Cordoned state changes: (time, "true"/"false"), the first line being the state at start."""
    changes, last = [], None
    for stamp, value in lines:
        value = value or "false"
        if value != last:
            changes.append((stamp, value))
            last = value
    return changes


def running_workload_pods(control_plane) -> list[str]:
    pods = control_plane.get_json("pods", "-l", f"app={WORKLOAD}")["items"]
    return [
        pod["metadata"]["name"]
        for pod in pods
        if pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
    ]


def unschedulable(control_plane) -> bool:
    return bool(control_plane.get_json("node", NODE_NAME)["spec"].get("unschedulable"))


@pytest.fixture(scope="module")
def lab(image, toolkit_repo, tmp_path_factory):
    from lab.control_plane import ControlPlane
    from lab.kubelet import KubeletNode, machine_kernel_settings

    kernel = machine_kernel_settings()
    workdir = tmp_path_factory.mktemp("drain-lab")
    control_plane = ControlPlane().start()
    nodes: list[Node] = []
    try:
        gpu = Node(image=image).start()
        nodes.append(gpu)
        kubectl_host = Node(image=image).start()
        nodes.append(kubectl_host)
        make_kubectl_host(control_plane, kubectl_host)
        base = {
            "container_runtimes": "containerd",
            "verify_report_path": str(workdir / "report.json"),
            "nvidia_runtime_default": "false",
            **toolkit_repo.data(),
        }
        # gpu_node.py provisions the node before it is a Kubernetes node (no drain yet).
        provisioned = gpu.deploy(data={**base, "stages": "toolkit,runtimes"})
        assert provisioned.returncode == 0, provisioned.explain()
        KubeletNode(node=gpu, name=NODE_NAME, index=1).join(control_plane)
        control_plane.apply(workloads(NODE_NAME))
        wait_for(lambda: len(running_workload_pods(control_plane)) == 1, timeout=120, what="the workload pod")
        inventory = write_inventory(workdir / "inventory.py", {gpu.target: NODE_NAME}, kubectl_host.target)
        data = {**base, "stages": "runtimes,verify", "drain_before_restart": "true"}
        yield {
            "control_plane": control_plane,
            "gpu": gpu,
            "kubectl_host": kubectl_host,
            "inventory": inventory,
            "data": data,
        }
    finally:
        for node in nodes:
            node.remove()
        control_plane.remove()
        assert machine_kernel_settings() == kernel, "the machine's kernel settings changed"


@needs_lab
@pytest.mark.parametrize("yes", [False, True], ids=["default-mode", "yes"])
def test_config_change_cordons_and_drains_before_the_restart_and_uncordons_after_verify(lab, yes):
    """Default mode first (changes shown, confirmed on stdin), then -y: each run flips
    nvidia_runtime_default, so each restarts containerd behind a real drain."""
    control_plane, gpu = lab["control_plane"], lab["gpu"]
    flip = "true" if not yes else "false"
    (evicted,) = running_workload_pods(control_plane)
    daemon_pods = control_plane.get_json("pods", "-l", f"app={DAEMON}")["items"]
    before = gpu.service("containerd")
    nodes, pods = node_watch(control_plane), pod_watch(control_plane)
    time.sleep(1)

    result = pyinfra(lab["inventory"], "deploy/gpu_node.py", {**lab["data"], "nvidia_runtime_default": flip}, yes=yes)
    node_lines, pod_lines = nodes.stop(), pods.stop()
    assert result.returncode == 0, result.explain()
    assert f'default_runtime_name = "{"nvidia" if flip == "true" else "runc"}"' in gpu.read(CONFIG)
    after = gpu.service("containerd")
    assert after["MainPID"] != before["MainPID"] and after["ActiveState"] == "active"
    restarted = int(after["ActiveEnterTimestampMonotonic"])

    states = transitions(node_lines)
    assert [value for _, value in states] == ["false", "true", "false"], node_lines
    (cordoned, _), (uncordoned, _) = states[1], states[2]
    deleted = [stamp for stamp, line in pod_lines if line == f"DELETED {evicted}"]
    assert deleted, pod_lines
    assert cordoned < deleted[0] < restarted < uncordoned, (cordoned, deleted, restarted, uncordoned)
    assert f"Kubernetes node {NODE_NAME} cordoned and drained before the restart" in result.output
    assert f"Kubernetes node {NODE_NAME} uncordoned" in result.output

    # The DaemonSet's pod was left where it was; the Deployment's replacement runs again.
    assert [pod["metadata"]["uid"] for pod in control_plane.get_json("pods", "-l", f"app={DAEMON}")["items"]] == [
        pod["metadata"]["uid"] for pod in daemon_pods
    ]
    wait_for(lambda: len(running_workload_pods(control_plane)) == 1, timeout=120, what="the replacement pod")
    assert running_workload_pods(control_plane) != [evicted]
    assert not unschedulable(control_plane)

    # The same run again: nothing to restart, so no cordon, no drain, no restart.
    nodes = node_watch(control_plane)
    rerun = pyinfra(lab["inventory"], "deploy/gpu_node.py", {**lab["data"], "nvidia_runtime_default": flip}, yes=yes)
    assert_change_free(rerun, yes)
    assert [value for _, value in transitions(nodes.stop())] == ["false"]
    assert gpu.service("containerd") == after


@needs_lab
def test_a_pdb_that_blocks_eviction_times_the_drain_out_leaving_containerd_and_the_node_cordoned(lab):
    control_plane, gpu = lab["control_plane"], lab["gpu"]
    control_plane.apply(PDB)
    wait_for(
        lambda: (
            control_plane.get_json("pdb", "drain-workload-blocks")["status"].get("disruptionsAllowed") == 0
            and control_plane.get_json("pdb", "drain-workload-blocks")["status"].get("currentHealthy") == 1
        ),
        timeout=60,
        what="the PDB to count the workload",
    )
    (protected,) = running_workload_pods(control_plane)
    before = {
        "service": gpu.service("containerd"),
        "config": gpu.stat(CONFIG),
        "backups": gpu.sh(f"ls {CONFIG}{BACKUP_INFIX}* 2>/dev/null || true").stdout,
    }
    data = {**lab["data"], "nvidia_runtime_default": "true", "drain_timeout": "10"}

    began = time.monotonic()
    failed = pyinfra(lab["inventory"], "deploy/gpu_node.py", data, yes=False)
    assert failed.returncode != 0, failed.explain()
    assert time.monotonic() - began >= 10
    assert {
        "service": gpu.service("containerd"),
        "config": gpu.stat(CONFIG),
        "backups": gpu.sh(f"ls {CONFIG}{BACKUP_INFIX}* 2>/dev/null || true").stdout,
    } == before
    assert not gpu.exists(CONFIG + ".gpu-node-candidate"), "a failed drain leaves nothing beside the config"
    assert unschedulable(control_plane), "left cordoned"
    assert running_workload_pods(control_plane) == [protected], "the PDB kept its pod"
    output = " ".join(failed.output.split())
    assert f"kubectl drain {NODE_NAME} failed (--timeout=10s):" in output, failed.explain()
    assert "global timeout reached: 10s" in output, failed.explain()
    assert "nothing was restarted" in output
    assert (
        f"Kubernetes node {NODE_NAME} stays cordoned (cordoned and drained before a restart): "
        f"uncordon it with `kubectl uncordon {NODE_NAME}` once fixed"
    ) in output

    # Once the budget allows it, the same run drains, restarts, and uncordons: the node it found
    # cordoned (by the failed run) stays cordoned, as the tool never uncordons what it did not cordon.
    control_plane.kubectl("delete", "pdb", "drain-workload-blocks")
    second = pyinfra(lab["inventory"], "deploy/gpu_node.py", data, yes=True)
    assert second.returncode == 0, second.explain()
    assert gpu.service("containerd")["MainPID"] != before["service"]["MainPID"]
    assert f"Kubernetes node {NODE_NAME} was already cordoned: draining it, it stays cordoned after" in second.output
    assert unschedulable(control_plane)
    control_plane.kubectl("uncordon", NODE_NAME)
    wait_for(lambda: len(running_workload_pods(control_plane)) == 1, timeout=120, what="the workload pod back")


def test_control_plane_without_kubectl_stops_the_gpu_node_before_any_change(start_node, tmp_path):
    """The control plane has no kubectl at all: the GPU node fails before its first change."""
    gpu, kubectl_host = start_node(), start_node()
    inventory = write_inventory(tmp_path / "inventory.py", {gpu.target: NODE_NAME}, kubectl_host.target)
    before = gpu.stat("/var/lib/dpkg/status")

    result = pyinfra(
        inventory,
        "deploy/gpu_node.py",
        {"stages": "runtimes", "container_runtimes": "containerd", "drain_before_restart": "true"},
        yes=True,
    )
    assert result.returncode != 0, result.explain()
    assert (
        f"{kubectl_host.target} cannot reach the Kubernetes API with the kubeconfig kubectl finds (KUBECONFIG, ~/.kube/config, else /etc/kubernetes/admin.conf): "
        "kubectl is not installed (not on PATH); nothing was changed; "
        "set drain_before_restart=false to restart without draining"
    ) in result.stderr
    # containerd was not installed: the run stopped before the runtimes stage
    assert gpu.sh("command -v containerd", check=False).returncode != 0
    assert gpu.stat("/var/lib/dpkg/status") == before
