"""
Plan tests of drain_before_restart: deploy/gpu_node.py on two @fake hosts, a GPU node and a
control plane. No Kubernetes API server is reachable here: ``StandInCluster`` answers the
control plane's kubectl commands (node registered or not, cordoned or not, drain fails or not)
and keeps ``spec.unschedulable`` the way cordon / uncordon set it. One timeline records every
command of both hosts in the order they ran, so the tests read the sequence across hosts.
"""

from __future__ import annotations

import base64
import json
import logging
import shlex
from dataclasses import dataclass, field

import pyinfra
import pytest
from plan import (
    DEFAULT,
    GPU_NODE,
    PCI_WITH_GPU,
    QUICK,
    Node,
    gpu_node,
    node_lines,
    run_inventory,
    without_staging_names,
)
from pyinfra.api import Inventory, State
from pyinfra.facts.server import Hostname, Uptime

from deploy.facts.apt import AptSourceFiles
from deploy.facts.containerd import ContainerdInstallations, config_read
from deploy.facts.recovery import PendingRestarts
from deploy.operations.docker import state_read

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

GPU, CP = "@fake/gpu1", "@fake/cp1"
NODE = "gpu1"
UNWIRED = "version = 2\n"
WRITE_VERBS = ("cordon", "uncordon", "drain")


def kubectl_verb(command: str) -> tuple[str | None, list[str]]:
    """The verb of the kubectl call in ``command`` (``kubectl <kubeconfig option> --request-timeout=T VERB``)."""
    words = shlex.split(command) if "--request-timeout=" in command else []
    for index, word in enumerate(words[:-1]):
        if word.startswith("--request-timeout=") and "kubectl" in words[:index]:
            return words[index + 1], words
    return None, words


@dataclass
class StandInCluster:
    """What a kube-apiserver would answer kubectl, for the few calls a drain makes (a stand-in)."""

    nodes: dict[str, bool] = field(default_factory=lambda: {NODE: False})  # name -> unschedulable
    reachable: bool = True
    drain_fails: bool = False

    def answer(self, command: str) -> tuple[bool, list[str], list[str]]:
        verb, words = kubectl_verb(command)
        if verb is None:
            return True, [], []
        if not self.reachable:
            refused = (
                "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?"
            )
            if verb == "get":
                return True, ["rc 1", f"err {refused}"], []
            return False, [], [refused]
        name = words[words.index(verb) + (2 if verb == "get" else 1)]
        if verb == "get":
            if name not in self.nodes:
                return True, ["rc 1", f'err Error from server (NotFound): nodes "{name}" not found'], []
            node = {"kind": "Node", "metadata": {"name": name}, "spec": {"unschedulable": self.nodes[name]}}
            return True, ["rc 0", "out " + json.dumps(node)], []
        if verb == "drain" and self.drain_fails:
            return (
                False,
                [f"node/{name} cordoned"],
                ['error: unable to drain node "gpu1" due to error: global timeout reached: 10s, continuing...'],
            )
        if verb in ("cordon", "uncordon"):
            self.nodes[name] = verb == "cordon"
        return True, [f"node/{name} {verb}ed"], []


@dataclass
class Run:
    state: State
    timeline: list[tuple[str, str]]
    error: Exception | None

    def on(self, host_name: str) -> list[str]:
        return [command for name, command in self.timeline if name == host_name]

    def kubectl_verbs(self) -> list[str]:
        return [kubectl_verb(command)[0] for command in self.on(CP)]

    def index(self, host_name: str, fragment: str) -> int:
        return next(i for i, (name, command) in enumerate(self.timeline) if name == host_name and fragment in command)

    @property
    def failed(self) -> bool:
        return any(host.name == GPU for host in self.state.failed_hosts)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def gpu_host(config: str | None = UNWIRED, hostname: str = NODE, *facts, node_survey: list[str] | None = None) -> Node:
    """The GPU node: containerd installed with ``config`` (None: no file), named ``hostname``, then
    ``facts``; what it does not state (files, packages, units) reads as nothing there; ``node_survey``:
    NodeSurvey's output (tests/plan.py's gpu_node: no GPU unless given)."""
    uptimes = iter(["1000"])  # before server.reboot's reboot; after it, a fresh boot
    return gpu_node(
        "debian-12",
        node_survey=node_survey,
        facts=[
            # Debian's archive entry, whose components the driver stage extends
            (
                AptSourceFiles,
                "/etc/apt/sources.list.d/debian.sources "
                + b64("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n"),
            ),
            (
                config_read("/etc/containerd/config.toml", None, "containerd"),
                "binary_path /usr/bin/containerd" + (f"\nconfig {b64(config)}" if config is not None else ""),
            ),
            (ContainerdInstallations, ["binary /usr/bin/containerd"]),  # containerd is installed
            (Hostname, hostname),
            (Uptime, lambda: next(uptimes, "3")),
            *facts,
        ],
        unstated=DEFAULT,
    )


def run_gpu_node(
    monkeypatch,
    cluster: StandInCluster,
    data: dict | None = None,
    *,
    groups: bool = True,
    gpu_answers: Node | None = None,
) -> Run:
    """deploy/gpu_node.py over a GPU node and a control plane, as ``pyinfra -y inventory.py ...``."""
    monkeypatch.setattr(pyinfra, "is_cli", True)
    shared = {
        "kernel_modules_load": False,
        "reboot_allowed": False,
        "stages": "runtimes",
        "drain_before_restart": True,
        **(data or {}),
    }
    if groups:
        inventory = Inventory(
            ([(GPU, QUICK), (CP, QUICK)], {}), override_data=shared, gpu_nodes=([GPU], {}), control_plane=([CP], {})
        )
    else:
        inventory = Inventory(([(GPU, QUICK)], {}), override_data=shared, gpu_nodes=([GPU], {}))
    # The control plane: every command (kubectl's reads included) answered by the stand-in cluster.
    nodes = {GPU: gpu_answers or gpu_host(), CP: Node(stand_in=cluster.answer)}
    plan = run_inventory(inventory, nodes, GPU_NODE)
    return Run(plan.state, plan.timeline, plan.error)


def restart_index(run: Run) -> int:
    return run.index(GPU, "systemctl restart")


def test_cordon_then_drain_with_the_flags_and_bound_then_restart_then_uncordon_no_real_cluster(monkeypatch, caplog):
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, data={"drain_timeout": 120})
    assert run.error is None and not run.failed, run.error
    # prepare: one read; execution: read again, cordon, drain, and after the restart uncordon
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain", "uncordon"]
    cp = run.on(CP)
    # kubeconfig unset: kubectl's own, else kubeadm's admin.conf (test_k8s_facts.py runs the rule for real)
    assert "|| echo --kubeconfig=/etc/kubernetes/admin.conf) " in cp[0] and "get node gpu1 -o json" in cp[0]
    assert cp[3].endswith("drain gpu1 --ignore-daemonsets --delete-emptydir-data --timeout=120s")
    assert "--request-timeout=20s" in cp[3]
    drain, uncordon = run.index(CP, " drain "), run.index(CP, " uncordon ")
    assert run.index(CP, " cordon ") < drain < restart_index(run) < uncordon
    # the candidate was checked by containerd itself before anything was drained, and nothing
    # stands beside the live file while the drain runs (a failed drain leaves no candidate)
    assert run.index(GPU, "config dump") < run.index(CP, " cordon ")
    assert drain < run.index(GPU, "config.toml.gpu-node-candidate")
    assert cluster.nodes[NODE] is False
    assert "stays cordoned" not in caplog.text


def test_operator_cordoned_node_is_drained_but_not_uncordoned_no_real_cluster(monkeypatch):
    cluster = StandInCluster(nodes={NODE: True})
    run = run_gpu_node(monkeypatch, cluster)
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "drain"]
    assert run.index(CP, " drain ") < restart_index(run)
    assert cluster.nodes[NODE] is True


def test_unregistered_node_restarts_without_drain_and_says_so_no_real_cluster(monkeypatch, caplog):
    cluster = StandInCluster(nodes={"other": False})
    run = run_gpu_node(monkeypatch, cluster)
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get"]
    assert restart_index(run)
    assert "no Kubernetes node named gpu1: nothing to drain before the restart" in caplog.text


def test_node_name_from_kube_node_names_mapping_reads_no_hostname_no_real_cluster(monkeypatch):
    cluster = StandInCluster(nodes={"gpu-a100-7": False})
    run = run_gpu_node(monkeypatch, cluster, data={"kube_node_names": {GPU: "gpu-a100-7"}})
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain", "uncordon"]
    assert all(" gpu-a100-7" in command for command in run.on(CP))
    assert not [command for command in run.on(GPU) if command == "uname -n"]


def failure_lines(caplog) -> list[str]:
    """The lines a host failed with (deploy/operations/failure.py)."""
    return [
        record.getMessage()
        for record in caplog.records
        if "gpu-node: " in record.getMessage() and record.levelno >= logging.ERROR
    ]


def test_unreachable_api_stops_the_host_before_any_change_no_real_cluster(monkeypatch, caplog):
    run = run_gpu_node(monkeypatch, StandInCluster(reachable=False))
    assert run.failed
    assert run.kubectl_verbs() == ["get"]
    failure = failure_lines(caplog)
    assert len(failure) == 1 and failure[0].startswith(f"[{GPU}] gpu-node: ")
    assert (
        "@fake/cp1 cannot reach the Kubernetes API with the kubeconfig kubectl finds (KUBECONFIG, ~/.kube/config, else /etc/kubernetes/admin.conf)"
        in failure[0]
    )
    assert "connection to the server 127.0.0.1:6443 was refused" in failure[0]
    assert "set drain_before_restart=false to restart without draining" in failure[0]
    # nothing after the facts: no upload, no check, no restart
    assert not [
        command
        for command in run.on(GPU)
        if "gpu-node-candidate" in command or "systemctl restart" in command or "upload " in command
    ]


def test_no_control_plane_group_stops_the_host_before_any_change(monkeypatch, caplog):
    run = run_gpu_node(monkeypatch, StandInCluster(), groups=False)
    assert run.failed
    failure = failure_lines(caplog)
    assert failure and "no control_plane host to run kubectl on" in failure[0]
    assert not [command for command in run.on(GPU) if "systemctl restart" in command]


def test_failed_drain_stops_before_the_restart_and_says_the_node_stays_cordoned_no_real_cluster(monkeypatch, caplog):
    cluster = StandInCluster(drain_fails=True)
    run = run_gpu_node(monkeypatch, cluster)
    assert run.failed
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain"]
    assert not [command for command in run.on(GPU) if "systemctl restart" in command]
    assert cluster.nodes[NODE] is True
    assert "kubectl drain gpu1 failed (--timeout=300s): error: unable to drain node" in caplog.text
    assert (
        "Kubernetes node gpu1 stays cordoned (cordoned and drained before a restart): "
        "uncordon it with `kubectl uncordon gpu1` once fixed"
    ) in caplog.text


def test_failed_verify_leaves_the_node_cordoned_and_says_so_no_real_cluster(monkeypatch, caplog):
    """Verify on a fake node without the toolkit fails: the host stops before the uncordon."""
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, data={"stages": "runtimes,verify"})
    assert run.failed
    assert "verification failed" in caplog.text
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain"]
    assert cluster.nodes[NODE] is True
    assert "Kubernetes node gpu1 stays cordoned" in caplog.text


def test_nothing_to_restart_runs_no_drain_and_no_uncordon(monkeypatch):
    from pathlib import Path

    wired = (
        Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "merge" / "already-wired" / "expected.toml"
    ).read_text()
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, gpu_answers=gpu_host(config=wired))
    assert run.error is None and not run.failed, run.error
    # the prepare-time check only: no write verb, and no operation changed anything
    assert run.kubectl_verbs() == ["get"]
    assert not any(verb in WRITE_VERBS for verb in run.kubectl_verbs())
    meta = run.state.get_meta_for_host(run.state.inventory.get_host(GPU))
    results = run.state.get_results_for_host(run.state.inventory.get_host(GPU))
    assert results.success_ops == meta.ops and results.error_ops == 0
    uncordon_ops = [
        op_hash
        for op_hash in run.state.get_op_order()
        if any("Uncordon" in name for name in run.state.op_meta[op_hash].names)
    ]
    assert len(uncordon_ops) == 1
    op_data = run.state.get_op_data_for_host(run.state.inventory.get_host(GPU), uncordon_ops[0])
    assert op_data.operation_meta.did_change() is False


@pytest.mark.parametrize("config", [UNWIRED, None])
def test_setting_off_runs_no_kubectl_and_no_extra_fact(monkeypatch, config):
    on = run_gpu_node(monkeypatch, StandInCluster(), gpu_answers=gpu_host(config=config))
    off = run_gpu_node(
        monkeypatch, StandInCluster(), data={"drain_before_restart": False}, gpu_answers=gpu_host(config=config)
    )
    assert off.error is None and not off.failed, off.error
    assert off.on(CP) == []
    # the GPU node runs nothing the drain would add: no hostname read
    assert not [command for command in off.on(GPU) if command == "uname -n"]
    assert set(without_staging_names(off.on(GPU))) <= set(without_staging_names(on.on(GPU)))
    if config is not None:
        assert restart_index(off)


def test_reboot_after_a_driver_change_drains_first_and_a_later_runtime_restart_does_not_drain_again(
    monkeypatch, caplog
):
    import deploy.tasks.driver

    monkeypatch.setattr(deploy.tasks.driver, "REBOOT_DELAY", 0)  # the fake host "reboots" at once
    caplog.set_level(logging.INFO)
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, data={"stages": "driver,runtimes", "reboot_allowed": True})
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain", "uncordon"]
    assert run.index(GPU, "nvidia-driver") < run.index(CP, " drain ") < run.index(GPU, "reboot )")
    assert run.index(GPU, "reboot )") < restart_index(run) < run.index(CP, " uncordon ")
    assert "Kubernetes node gpu1 was drained earlier in this run" in caplog.text
    assert cluster.nodes[NODE] is False
    names = [", ".join(run.state.op_meta[op_hash].names) for op_hash in run.state.get_op_order()]
    assert "NVIDIA driver | Drain Kubernetes node gpu1 before the reboot" in names, names


def test_a_node_whose_driver_awaits_its_reboot_stays_cordoned_after_a_runtime_restart_no_real_cluster(
    monkeypatch, caplog
):
    """The driver changed, reboot_allowed=false, and containerd's restart drained the node: verify does
    not fail a GPU node awaiting its reboot (exit 3), so the uncordon must hold pods off it instead."""
    cluster = StandInCluster()
    awaiting = node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, reboot_packages=("nvidia-driver",))
    run = run_gpu_node(
        monkeypatch,
        cluster,
        data={"stages": "driver,runtimes", "reboot_allowed": False},
        gpu_answers=gpu_host(node_survey=awaiting),
    )
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain"]
    assert cluster.nodes[NODE] is True
    assert "Kubernetes node gpu1 left cordoned: its NVIDIA driver awaits the node's reboot" in caplog.text


def test_reboot_without_reboot_allowed_drains_nothing(monkeypatch):
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, data={"stages": "driver", "reboot_allowed": False})
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get"]
    assert not [command for command in run.on(GPU) if "reboot )" in command]


def test_restart_left_pending_by_an_interrupted_run_is_drained_for_too_no_real_cluster(monkeypatch):
    """The config is already wired but an interrupted run never restarted containerd."""
    from pathlib import Path

    wired = (
        Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "merge" / "already-wired" / "expected.toml"
    ).read_text()
    answers = gpu_host(wired, NODE, (PendingRestarts, ["containerd /etc/containerd/config.toml"]))
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, gpu_answers=answers)
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain", "uncordon"]
    assert run.index(CP, " drain ") < restart_index(run) < run.index(CP, " uncordon ")
    assert "an interrupted run had installed it without a restart" in run.timeline[restart_index(run)][1]


def test_docker_restart_is_drained_for_like_containerd_no_real_cluster(monkeypatch):
    answers = gpu_host(
        UNWIRED,
        NODE,
        (
            state_read("/etc/docker/daemon.json"),
            "dockerd /usr/sbin/dockerd\nversion Docker version 26.1.5, build x\nvalidate",
        ),
    )
    cluster = StandInCluster()
    run = run_gpu_node(monkeypatch, cluster, data={"container_runtimes": "docker"}, gpu_answers=answers)
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain", "uncordon"]
    assert run.index(GPU, "dockerd --validate") < run.index(CP, " cordon ")
    assert run.index(CP, " drain ") < restart_index(run) < run.index(CP, " uncordon ")
    assert "unit=docker" in run.timeline[restart_index(run)][1]


@pytest.mark.parametrize(
    "lines, expected",
    [
        (["kubectl-missing"], {"reachable": False, "error": "kubectl is not installed (not on PATH)"}),
        (["kubeconfig-unreadable"], {"reachable": False, "error": "the kubeconfig does not exist or is not readable"}),
        (
            ["rc 1", "err Unable to connect to the server: dial tcp 10.0.0.1:6443: i/o timeout"],
            {
                "reachable": False,
                "error": "the API server did not answer: Unable to connect to the server: "
                "dial tcp 10.0.0.1:6443: i/o timeout",
            },
        ),
        (
            ["rc 1", 'err Error from server (NotFound): nodes "gpu1" not found'],
            {"reachable": True, "registered": False, "error": None},
        ),
        (
            ["rc 0", 'out {"kind": "Node", "spec": {"unschedulable": true, "podCIDR": "10.244.1.0/24"}}'],
            {"reachable": True, "registered": True, "unschedulable": True},
        ),
        (
            ["rc 0", 'out {"kind": "Node", "spec": {"podCIDR": "10.244.1.0/24"}}'],
            {"reachable": True, "registered": True, "unschedulable": False},
        ),
    ],
)
def test_node_schedule_fact_reads_kubectls_answers(lines, expected):
    from deploy.facts.drain import KubeNodeSchedule

    state = KubeNodeSchedule().process(lines)
    assert {key: state[key] for key in expected} == expected
