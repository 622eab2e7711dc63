"""
Plan tests of deploy/k8s_gpu.py with pyinfra's @fake connector. No real cluster exists on the
test machines (no kube-apiserver, no GPU), so the control plane's kubectl answers come from
``FakeCluster``: a small in-memory API that stores what ``kubectl apply --server-side`` was
sent, answers ``get -f -``/``diff --server-side``/``get nodes`` from that store and applies
``kubectl label``. A second run therefore sees exactly what the first run applied.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pyinfra
import yaml
from plan import QUICK, Node, every, run_pyinfra
from pyinfra.api import Inventory, State
from pyinfra_cli.util import load_deploy_file

from deploy.facts.gpu_node_identity import GpuNodeIdentity

REPO = Path(__file__).resolve().parents[2]
ENTRY = str(REPO / "deploy" / "k8s_gpu.py")
FIXTURES = REPO / "tests" / "fixtures" / "k8s"


def object_key(document: dict) -> tuple[str, str, str]:
    metadata = document["metadata"]
    return (document["kind"], metadata.get("namespace", ""), metadata["name"])


def stdin_manifest(command: str) -> list[dict]:
    """The manifest a ``printf '%s\\n' MANIFEST | kubectl ... -f -`` command feeds kubectl."""
    words = shlex.split(command)
    index = words.index("printf")
    return [doc for doc in yaml.safe_load_all(words[index + 2]) if doc]


@dataclass
class FakeCluster:
    kubectl_installed: bool = True
    reachable: bool = True
    version: tuple[str, str] = ("1", "30")
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    objects: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    smoke_lines: list[str] = field(
        default_factory=lambda: [
            "created",
            "phase Succeeded",
            "scheduled True : ",
            "log [Vector addition of 50000 elements]",
            "log Test PASSED",
            "log Done",
            "deleted",
        ]
    )
    helm_lines: list[str] | None = None
    # The kubeconfig the control plane's kubectl finds where the setting is unset: a kubeadm control
    # plane's, run as root with neither KUBECONFIG nor ~/.kube/config (test_k8s_facts.py runs the rule)
    own_kubeconfig: str = "/etc/kubernetes/admin.conf"

    def kubeconfig_line(self, command: str) -> str:
        """What KubeCluster's ``kubeconfig_in_use`` prints here."""
        explicit = re.search(r"echo 'kubeconfig ([^']*)'", command)
        return f"kubeconfig {explicit.group(1) if explicit else self.own_kubeconfig}"

    def answer(self, command: str) -> tuple[bool, list[str]]:
        if "command -v kubectl" in command and "get --raw /version" in command:
            if not self.kubectl_installed:
                return True, ["kubectl-missing"]
            if not self.reachable:
                return True, [
                    self.kubeconfig_line(command),
                    "rc 1",
                    "err The connection to the server 127.0.0.1:6443 was refused - "
                    "did you specify the right host or port?",
                ]
            major, minor = self.version
            return True, [
                self.kubeconfig_line(command),
                "rc 0",
                "out " + json.dumps({"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.2"}),
            ]
        if "gpu-node-smoke-test" in command and " create -f - " in command:
            return True, self.smoke_lines
        if "command -v helm" in command:
            return True, self.helm_lines or ["helm-missing"]
        if " get nodes -o json" in command:
            items = [{"metadata": {"name": name, "labels": labels}} for name, labels in self.nodes.items()]
            return True, ["rc 0", "out " + json.dumps({"kind": "List", "items": items})]
        if " get -f - " in command:
            found = [
                self.objects[object_key(doc)] for doc in stdin_manifest(command) if object_key(doc) in self.objects
            ]
            return True, ["rc 0"] + (["out " + json.dumps({"kind": "List", "items": found})] if found else [])
        if " diff --server-side " in command:
            changed = any(self.objects.get(object_key(doc)) != doc for doc in stdin_manifest(command))
            return True, ["rc 1", "out (diff)"] if changed else ["rc 0"]
        if " apply --server-side " in command:
            for doc in stdin_manifest(command):
                self.objects[object_key(doc)] = doc
            return True, [
                f"{doc['kind'].lower()}/{doc['metadata']['name']} serverside-applied" for doc in stdin_manifest(command)
            ]
        if " label node " in command:
            words = shlex.split(command)
            index = words.index("node")
            node = words[index + 1]
            for item in words[index + 2 :]:
                if item == "--overwrite":
                    continue
                if item.endswith("-") and "=" not in item:
                    self.nodes[node].pop(item[:-1], None)
                else:
                    key, _, value = item.partition("=")
                    self.nodes[node][key] = value
            return True, [f"node/{node} labeled"]
        return True, []


# A GPU node's one read, wherever its settings put the driver (nvidia_driver_root)
IDENTITY = every(GpuNodeIdentity)


def gpu_identity_lines(
    hostname: str, products: list[str], pci_gpus: int | None = None, nvidia_smi: str = "ok"
) -> list[str]:
    """What GpuNodeIdentity's command prints on a node (see tests/fixtures/k8s/identity-*.txt)."""
    lines = [
        f"hostname {hostname}",
        f"pci_gpus {len(products) if pci_gpus is None else pci_gpus}",
        f"nvidia_smi {nvidia_smi}",
    ]
    return lines + [f"product {name}" for name in products]


@dataclass
class PlanRun:
    state: State
    inventory: Inventory
    commands: dict[str, list[str]]

    def control_plane_commands(self) -> list[str]:
        return self.commands["@fake/cp1"]

    def applies(self) -> list[str]:
        return [c for c in self.control_plane_commands() if " apply --server-side " in c]

    def labels(self) -> list[str]:
        return [c for c in self.control_plane_commands() if " label node " in c]

    def diffs(self) -> list[str]:
        return [c for c in self.control_plane_commands() if " diff --server-side " in c]

    @property
    def failed(self) -> bool:
        return bool(self.state.failed_hosts)


def run_plan(
    monkeypatch,
    cluster: FakeCluster,
    gpu_hosts: dict[str, list[str]],
    data: dict | None = None,
    host_data: dict[str, dict] | None = None,
    more_control_planes: dict[str, FakeCluster] | None = None,
) -> PlanRun:
    """
    Run deploy/k8s_gpu.py like ``pyinfra -y inventory.py deploy/k8s_gpu.py`` on @fake hosts:
    @fake/cp1 answers every command from ``cluster``, each of ``more_control_planes`` from its own;
    each GPU node's identity read prints its ``gpu_hosts`` lines.
    """
    clusters = {"@fake/cp1": cluster, **(more_control_planes or {})}
    nodes = {name: Node(stand_in=control_plane.answer) for name, control_plane in clusters.items()}
    nodes.update({name: Node(facts=[(IDENTITY, lines)]) for name, lines in gpu_hosts.items()})
    host_data = host_data or {}
    cp = [(name, {**QUICK, **host_data.get(name, {})}) for name in clusters]
    gpus = [(name, {**QUICK, **host_data.get(name, {})}) for name in gpu_hosts]
    groups = {"control_plane": (list(clusters), {})}
    if gpus:
        groups["gpu_nodes"] = ([name for name, _ in gpus], {})
    inventory = Inventory((cp + gpus, {}), override_data=dict(data or {}), **groups)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    state, error = run_pyinfra(inventory, lambda state: load_deploy_file(state, ENTRY), nodes=nodes)
    if error is not None:
        raise error
    return PlanRun(state, inventory, {h.name: list(h.connector.executed_commands) for h in inventory})


# --- the tests -------------------------------------------------------------------------------

import pytest  # noqa: E402

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

from deploy.operations.kubectl import DIGEST_ANNOTATION, KubeUnavailableError  # noqa: E402
from deploy.settings import SettingsError  # noqa: E402

A100 = "NVIDIA A100-SXM4-40GB"


def two_gpu_node_cluster() -> FakeCluster:
    return FakeCluster(nodes={"gpu1": {"kubernetes.io/hostname": "gpu1"}, "cp1": {}})


def test_first_run_applies_runtime_class_and_device_plugin_labels_node_and_passes_smoke_pod_no_real_cluster(
    monkeypatch,
):
    """No kube-apiserver here: FakeCluster stands in for it; the commands are the real ones."""
    cluster = two_gpu_node_cluster()
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100, A100])},
        data={"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "10"},
    )
    assert not run.failed
    commands = run.control_plane_commands()
    # kubeconfig unset: kubectl's own, else kubeadm's admin.conf (test_k8s_facts.py runs the rule for real)
    assert "get --raw /version" in commands[0] and "|| echo --kubeconfig=/etc/kubernetes/admin.conf) " in commands[0]
    assert len(run.applies()) == 2
    assert "kind: RuntimeClass" in run.applies()[0]
    assert "kind: DaemonSet" in run.applies()[1] and "replicas: 10" in run.applies()[1]
    assert all("--field-manager=gpu-node --force-conflicts -f -" in c for c in run.applies())
    assert cluster.nodes["gpu1"]["nvidia.com/gpu.present"] == "true"
    assert cluster.nodes["gpu1"]["accelerator"] == "nvidia-a100-sxm4-40gb"
    assert cluster.nodes["gpu1"]["nvidia.com/device-plugin.config"] == "time-slicing-10"
    assert "nvidia.com/mps.capable" not in cluster.nodes["gpu1"]
    assert sum("gpu-node-smoke-test" in c for c in commands) == 1
    # only the control plane acts; the GPU node is only read (one identity command)
    assert len(run.commands["@fake/gpu1"]) == 1 and "nvidia-smi --query-gpu=name" in run.commands["@fake/gpu1"][0]


def passes(yes: bool) -> int:
    """How often an operation's own reads run: once with -y; in the default mode its change
    detection runs them once more before the execution."""
    return 1 if yes else 2


def test_second_run_with_unchanged_inputs_applies_and_labels_nothing_no_real_cluster(monkeypatch, both_modes):
    cluster = two_gpu_node_cluster()
    gpu = {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}
    data = {"gpu_sharing": "mps", "gpu_sharing_replicas": "4", "smoke_test": "false"}
    first = run_plan(monkeypatch, cluster, gpu, data=data)
    assert len(first.applies()) == 2 and len(first.labels()) == 1
    second = run_plan(monkeypatch, cluster, gpu, data=data)
    assert not second.failed
    assert second.applies() == [] and second.labels() == [] and second.diffs() == []
    # what it did run: version, nodes (facts), one `get -f -` per bundle, the labels check
    assert len(second.control_plane_commands()) == 2 + 3 * passes(both_modes)


def test_changed_sharing_reapplies_only_the_device_plugin_and_relabels_no_real_cluster(monkeypatch, both_modes):
    cluster = two_gpu_node_cluster()
    gpu = {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}
    run_plan(monkeypatch, cluster, gpu, data={"gpu_sharing": "time-slicing", "smoke_test": "false"})
    run = run_plan(
        monkeypatch,
        cluster,
        gpu,
        data={"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "8", "smoke_test": "false"},
    )
    assert len(run.applies()) == 1 and "kind: DaemonSet" in run.applies()[0]
    assert len(run.diffs()) == passes(both_modes)
    assert run.labels() and "nvidia.com/device-plugin.config=time-slicing-8" in run.labels()[0]
    digests = {
        obj["metadata"]["annotations"][DIGEST_ANNOTATION]
        for key, obj in cluster.objects.items()
        if key[0] != "RuntimeClass"
    }
    assert len(digests) == 1


def test_per_node_sharing_config_from_the_nodes_own_settings_no_real_cluster(monkeypatch):
    cluster = FakeCluster(nodes={"gpu1": {}, "gpu2": {}})
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100]), "@fake/gpu2": gpu_identity_lines("GPU2", ["Tesla T4"])},
        data={"smoke_test": "false"},
        host_data={"@fake/gpu2": {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": 10}},
    )
    assert not run.failed
    assert cluster.nodes["gpu1"]["nvidia.com/device-plugin.config"] == "no-sharing"
    assert cluster.nodes["gpu2"]["nvidia.com/device-plugin.config"] == "time-slicing-10"
    assert cluster.nodes["gpu2"]["accelerator"] == "nvidia-tesla-t4"
    configmap = cluster.objects[("ConfigMap", "nvidia-device-plugin", "nvidia-device-plugin-configs")]
    assert sorted(configmap["data"]) == ["no-sharing", "time-slicing-10"]


def test_node_without_gpu_is_not_labelled_and_gpu_without_driver_gets_no_accelerator(monkeypatch, caplog):
    """No GPU on these machines: the identity lines are what such nodes print (fixtures)."""
    cluster = FakeCluster(nodes={"plain": {}, "nodriver": {}})
    run = run_plan(
        monkeypatch,
        cluster,
        {
            "@fake/plain": gpu_identity_lines("plain", [], nvidia_smi="missing"),
            "@fake/nodriver": gpu_identity_lines("nodriver", [], pci_gpus=1, nvidia_smi="exit 9"),
        },
        data={"smoke_test": "false"},
    )
    assert not run.failed
    assert cluster.nodes["plain"] == {}
    assert cluster.nodes["nodriver"] == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/device-plugin.config": "no-sharing",
    }
    text = caplog.text
    assert "no NVIDIA GPU on its PCI bus" in text and "plain" in text
    assert "no product name (nvidia-smi: exit 9)" in text


def test_node_missing_from_cluster_is_reported_and_mapping_names_it(monkeypatch, caplog):
    cluster = FakeCluster(nodes={"k8s-gpu-a": {}})
    gpu = {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}
    run = run_plan(monkeypatch, cluster, gpu, data={"smoke_test": "false"})
    assert run.labels() == [] and "no Kubernetes node named 'gpu1'" in caplog.text
    run = run_plan(monkeypatch, cluster, gpu, data={"smoke_test": "false", "kube_node_names": "@fake/gpu1=k8s-gpu-a"})
    assert len(run.labels()) == 1 and cluster.nodes["k8s-gpu-a"]["accelerator"] == "nvidia-a100-sxm4-40gb"


def test_runtime_class_used_by_device_plugin_when_nvidia_is_not_the_default_runtime(monkeypatch):
    cluster = two_gpu_node_cluster()
    run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
        data={"smoke_test": "false"},
        host_data={"@fake/gpu1": {"nvidia_runtime_default": False}},
    )
    daemonset = cluster.objects[("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin")]
    assert daemonset["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    runtime_class = cluster.objects[("RuntimeClass", "", "nvidia")]
    assert runtime_class["handler"] == "nvidia"
    assert runtime_class["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize(
    "cluster, expected",
    [
        (FakeCluster(kubectl_installed=False), "kubectl is not installed"),
        (FakeCluster(reachable=False), "the API server did not answer: The connection to the server 127.0.0.1:6443"),
    ],
)
def test_kubectl_missing_or_api_unreachable_names_host_and_kubeconfig_before_any_change(monkeypatch, cluster, expected):
    with pytest.raises(KubeUnavailableError) as error:
        run_plan(monkeypatch, cluster, {}, data={"kubeconfig": "/etc/rancher/k3s/k3s.yaml"})
    message = str(error.value)
    assert message.startswith("@fake/cp1: cannot use the cluster with kubeconfig /etc/rancher/k3s/k3s.yaml")
    assert expected in message
    assert cluster.objects == {}


@pytest.mark.parametrize(
    "data, key",
    [
        ({"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "1"}, "gpu_sharing_replicas"),
        (
            {"gpu_sharing": "mps", "time_slicing_fail_requests_greater_than_one": "true"},
            "time_slicing_fail_requests_greater_than_one",
        ),
        ({"mig_strategy": "sometimes"}, "mig_strategy"),
    ],
)
def test_invalid_settings_stop_the_run_naming_the_key_before_any_kubectl(monkeypatch, data, key):
    cluster = two_gpu_node_cluster()
    with pytest.raises(SettingsError, match=f"invalid setting {key}="):
        run_plan(monkeypatch, cluster, {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}, data=data)
    assert cluster.objects == {}


def test_smoke_pod_pending_fails_with_the_schedulers_reason_no_gpu_here(monkeypatch, caplog):
    """No GPU on these machines: the pending pod is what a cluster without GPUs reports."""
    cluster = two_gpu_node_cluster()
    cluster.smoke_lines = [
        "created",
        "phase Pending",
        "scheduled False Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
        "deleted",
    ]
    run = run_plan(
        monkeypatch, cluster, {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}, data={"smoke_test_timeout": "10"}
    )
    assert run.failed
    assert (
        "[@fake/cp1]  gpu-node: smoke pod still Pending after the timeout: False Unschedulable: 0/2 nodes are available: "
        "2 Insufficient nvidia.com/gpu."
    ) in caplog.text
    # the device plugin was applied before the smoke pod ran
    assert ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin") in cluster.objects


def test_smoke_pod_requests_the_renamed_shared_resource(monkeypatch):
    cluster = two_gpu_node_cluster()
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
        data={"gpu_sharing": "time-slicing", "time_slicing_rename_by_default": "true"},
    )
    assert not run.failed
    smoke = [c for c in run.control_plane_commands() if "gpu-node-smoke-test" in c][0]
    assert "nvidia.com/gpu.shared: 1" in smoke


def test_gpushare_nodes_go_to_the_gpushare_hook_instead_of_the_device_plugin(monkeypatch):
    """The hook's contract: gpushare(settings, [GpuNode of gpushare nodes]); module imported only then."""
    import sys
    import types

    calls = []
    module = types.ModuleType("deploy.tasks.gpushare")
    module.gpushare = lambda settings, nodes: calls.append((settings.gpu_sharing, [n.node_name for n in nodes]))
    monkeypatch.setitem(sys.modules, "deploy.tasks.gpushare", module)
    cluster = two_gpu_node_cluster()
    run = run_plan(
        monkeypatch, cluster, {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}, data={"gpu_sharing": "gpushare"}
    )
    assert not run.failed
    assert calls == [("gpushare", ["gpu1"])]
    assert len(run.applies()) == 1 and "kind: RuntimeClass" in run.applies()[0]
    assert "nvidia.com/device-plugin.config" not in cluster.nodes["gpu1"]


def test_helm_path_plan_only_no_helm_binary_reachable_here_installs_the_pinned_chart_once(monkeypatch):
    """Plan-tested only: no helm binary (and no chart repository) is reachable on these machines, so
    the lab cluster cannot run this path; helm's answers here are a stand-in written in helm's formats."""
    cluster = two_gpu_node_cluster()
    cluster.helm_lines = ["list-rc 0", "list-out []", "values-rc 1", "values-err Error: release: not found"]
    data = {"device_plugin_install_method": "helm", "smoke_test": "false"}
    gpu = {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}
    run = run_plan(monkeypatch, cluster, gpu, data=data)
    helm = [c for c in run.control_plane_commands() if " upgrade --install nvdp " in c]
    assert len(helm) == 1
    assert (
        "upgrade --install nvdp nvidia-device-plugin --repo https://nvidia.github.io/k8s-device-plugin "
        "--version 0.17.0 --namespace nvidia-device-plugin" in helm[0]
    )
    values = yaml.safe_load(shlex.split(helm[0])[2])
    assert values["config"]["default"] == "no-sharing" and values["gfd"] == {"enabled": False}
    cluster.helm_lines = [
        "list-rc 0",
        "list-out " + json.dumps([{"name": "nvdp", "chart": "nvidia-device-plugin-0.17.0", "status": "deployed"}]),
        "values-rc 0",
        "values-out " + json.dumps(values),
    ]
    again = run_plan(monkeypatch, cluster, gpu, data=data)
    assert not again.failed
    assert not [c for c in again.control_plane_commands() if " upgrade " in c]


def test_helm_path_plan_only_no_helm_binary_reachable_here_names_host_and_kubeconfig(monkeypatch, caplog):
    cluster = two_gpu_node_cluster()
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
        data={"device_plugin_install_method": "helm", "smoke_test": "false"},
    )
    assert run.failed
    assert (
        "[@fake/cp1]  gpu-node: cannot use the cluster with the kubeconfig kubectl finds (KUBECONFIG, ~/.kube/config, else /etc/kubernetes/admin.conf): "
        "helm: helm is not installed (not on PATH)"
    ) in caplog.text


class ForbiddenCluster(FakeCluster):
    """A cluster whose API answers /version but forbids this kubeconfig to read objects (RBAC)."""

    def answer(self, command: str):
        if " get -f - " in command:
            return True, [
                "rc 1",
                'err Error from server (Forbidden): runtimeclasses.node.k8s.io "nvidia" is '
                'forbidden: User "viewer" cannot get resource "runtimeclasses"',
            ]
        return super().answer(command)


def test_a_kubectl_failure_on_one_control_plane_fails_that_host_only(monkeypatch, caplog):
    """Two control-plane hosts in one run: cp2's kubectl is refused; cp1 still applies and labels."""
    cluster, forbidden = two_gpu_node_cluster(), ForbiddenCluster(nodes={"gpu1": {}})
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
        data={"smoke_test": "false"},
        more_control_planes={"@fake/cp2": forbidden},
    )
    assert {host.name for host in run.state.failed_hosts} == {"@fake/cp2"}
    failures = [record.getMessage() for record in caplog.records if "gpu-node: " in record.getMessage()]
    assert failures == [  # pyinfra pads the host prefix to the longest name
        "[@fake/cp2]  gpu-node: cannot use the cluster with the kubeconfig kubectl finds (KUBECONFIG, ~/.kube/config, else /etc/kubernetes/admin.conf): Error from server "
        '(Forbidden): runtimeclasses.node.k8s.io "nvidia" is forbidden: User "viewer" cannot get resource '
        '"runtimeclasses"'
    ]
    # cp1 went on to the end: RuntimeClass, labels and device plugin
    assert ("RuntimeClass", "", "nvidia") in cluster.objects
    assert ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin") in cluster.objects
    assert cluster.nodes["gpu1"]["nvidia.com/gpu.present"] == "true"
    assert forbidden.objects == {} and forbidden.nodes["gpu1"] == {}


class ClusterWithoutDigests(FakeCluster):
    """A cluster whose objects match but carry no digest (applied by hand or an older gpu-node)."""

    def answer(self, command: str):
        if " get -f - " in command:
            found = [
                {
                    "kind": doc["kind"],
                    "metadata": {"name": doc["metadata"]["name"], "namespace": doc["metadata"].get("namespace")},
                }
                for doc in stdin_manifest(command)
            ]
            return True, ["rc 0", "out " + json.dumps({"kind": "List", "items": found})]
        if " diff --server-side " in command:
            return True, ["rc 0"]
        return super().answer(command)


def test_no_server_side_difference_means_no_apply_and_no_change(monkeypatch, both_modes):
    cluster = ClusterWithoutDigests(nodes={"gpu1": {}})
    run = run_plan(
        monkeypatch, cluster, {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}, data={"smoke_test": "false"}
    )
    assert not run.failed
    assert len(run.diffs()) == 2 * passes(both_modes) and run.applies() == []


def test_missing_objects_apply_without_a_server_side_diff(monkeypatch):
    """A real API server cannot dry-run objects in a namespace the same manifest creates
    ("namespaces ... not found", seen on the lab cluster): a missing object is a change, no diff."""
    cluster = FakeCluster(nodes={"gpu1": {}})
    run = run_plan(
        monkeypatch, cluster, {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}, data={"smoke_test": "false"}
    )
    assert not run.failed
    assert run.diffs() == [] and len(run.applies()) == 2


# --- which kubeconfig kubectl and helm read --------------------------------------------------------


def kubeconfig_options(command: str) -> list[list[str]]:
    """The two words after each kubectl or helm the command runs (``command -v kubectl`` is no run)."""
    words = shlex.split(command)
    return [
        words[index + 1 : index + 3]
        for index, word in enumerate(words)
        if word in ("kubectl", "helm") and words[index - 1] != "-v"
    ]


HELM_NOT_YET = ["list-rc 0", "list-out []", "values-rc 1", "values-err Error: release: not found"]


def test_kubeconfig_unset_every_kubectl_and_helm_finds_its_own_kubeconfig_no_real_cluster(monkeypatch, caplog):
    """Unset (the default): no --kubeconfig while the host's kubectl has KUBECONFIG or ~/.kube/config, else
    kubeadm's admin.conf; the rule itself runs for real in test_k8s_facts.py."""
    caplog.set_level("INFO", logger="pyinfra")
    cluster = two_gpu_node_cluster()
    cluster.helm_lines = HELM_NOT_YET
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
        data={"device_plugin_install_method": "helm", "smoke_test": "false"},
    )
    assert not run.failed
    options = [option for command in run.control_plane_commands() for option in kubeconfig_options(command)]
    runs = {
        word for command in run.control_plane_commands() for word in shlex.split(command) if word in ("kubectl", "helm")
    }
    assert runs == {"kubectl", "helm"} and len(options) >= 6
    assert all(option == ["$([", "-n"] for option in options), options
    assert "Kubernetes v1.30.2 via kubeconfig /etc/kubernetes/admin.conf" in caplog.text


def test_a_set_kubeconfig_is_given_to_every_kubectl_and_helm_no_real_cluster(monkeypatch, caplog):
    caplog.set_level("INFO", logger="pyinfra")
    cluster = two_gpu_node_cluster()
    cluster.helm_lines = HELM_NOT_YET
    run = run_plan(
        monkeypatch,
        cluster,
        {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
        data={"device_plugin_install_method": "helm", "smoke_test": "false", "kubeconfig": "/etc/rancher/k3s/k3s.yaml"},
    )
    assert not run.failed
    options = [option for command in run.control_plane_commands() for option in kubeconfig_options(command)]
    assert len(options) >= 6 and all(option == ["--kubeconfig", "/etc/rancher/k3s/k3s.yaml"] for option in options)
    assert not [command for command in run.control_plane_commands() if "KUBECONFIG" in command]
    assert "Kubernetes v1.30.2 via kubeconfig /etc/rancher/k3s/k3s.yaml" in caplog.text


def test_the_health_monitor_is_applied_with_gpu_health_monitor_npd_alone_once_no_real_cluster(monkeypatch, both_modes):
    """gpu_health_monitor=npd: node-problem-detector's bundle (its DaemonSet, config, account and binding)
    applied as one more bundle; a second run applies nothing; off (the default): never sent."""
    gpu = {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}
    without = run_plan(monkeypatch, two_gpu_node_cluster(), gpu, data={"smoke_test": "false"})
    assert not [command for command in without.control_plane_commands() if "node-problem-detector" in command]

    cluster = two_gpu_node_cluster()
    data = {"smoke_test": "false", "gpu_health_monitor": "npd"}
    first = run_plan(monkeypatch, cluster, gpu, data=data)
    assert not first.failed and len(first.applies()) == 3
    (applied,) = [command for command in first.applies() if "node-problem-detector" in command]
    assert {(document["kind"], document["metadata"]["name"]) for document in stdin_manifest(applied)} == {
        ("Namespace", "gpu-node-health"),
        ("ServiceAccount", "gpu-node-health-monitor"),
        ("ClusterRoleBinding", "gpu-node-health-monitor"),
        ("ConfigMap", "gpu-node-health-monitor"),
        ("DaemonSet", "gpu-node-health-monitor"),
    }
    second = run_plan(monkeypatch, cluster, gpu, data=data)
    assert second.applies() == [] and second.diffs() == []
