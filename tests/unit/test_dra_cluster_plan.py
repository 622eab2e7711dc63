"""
deploy/k8s_gpu.py with DRA node groups, on @fake hosts answered by test_k8s_plan's FakeCluster (no
kube-apiserver here; the commands are the real ones): the DRA objects instead of, or beside, the
device plugin; the refusal of a cluster older than 1.34; and a node group moved from the device
plugin to DRA and back, node by node, each step in order.
"""

from __future__ import annotations

import re

import pytest
from test_k8s_plan import A100, FakeCluster, gpu_identity_lines, run_plan

pytestmark = pytest.mark.usefixtures("both_modes")

DRA = {"gpu_allocator": "dra"}
NO_SMOKE = {"smoke_test": "false"}
DEVICE_PLUGIN_LIVE = {"nvidia.com/gpu.present": "true", "nvidia.com/device-plugin.config": "no-sharing",
                      "accelerator": "nvidia-a100-sxm4-40gb"}
DRA_LIVE = {"gpu-node.io/gpu-allocator": "dra", "accelerator": "nvidia-a100-sxm4-40gb"}


def cluster(version="34", **nodes) -> FakeCluster:
    return FakeCluster(version=("1", version), nodes={"cp1": {}, **{name: dict(labels) for name, labels in nodes.items()}})


def gpus(*names):
    return {f"@fake/{name}": gpu_identity_lines(name, [A100]) for name in names}


def bundles(run) -> list[str]:
    return [re.search(r"gpu-node.io/bundle: ([\w-]+)", command).group(1) for command in run.applies()]


def test_a_dra_group_gets_the_dra_objects_and_no_device_plugin(monkeypatch):
    live = cluster(gpu1={})
    run = run_plan(monkeypatch, live, gpus("gpu1"), data=NO_SMOKE, host_data={"@fake/gpu1": DRA})
    assert not run.failed
    assert bundles(run) == ["runtimeclass", "nvidia-dra-driver-gpu", "dra-claims"]
    assert live.nodes["gpu1"] == DRA_LIVE
    kinds = {doc["kind"] for doc in live.objects.values()}
    assert {"DeviceClass", "ResourceClaimTemplate", "DaemonSet"} <= kinds


def test_beside_a_device_plugin_group_both_allocators_are_deployed(monkeypatch):
    live = cluster(gpu1={}, gpu2={})
    run = run_plan(monkeypatch, live, gpus("gpu1", "gpu2"), data=NO_SMOKE, host_data={"@fake/gpu2": DRA})
    assert bundles(run) == ["runtimeclass", "nvidia-device-plugin", "nvidia-dra-driver-gpu", "dra-claims"]
    assert live.nodes["gpu1"]["nvidia.com/gpu.present"] == "true" and "gpu-node.io/gpu-allocator" not in live.nodes["gpu1"]
    assert live.nodes["gpu2"] == DRA_LIVE


def test_a_cluster_older_than_1_34_is_refused_in_one_line(monkeypatch, caplog):
    live = cluster(version="33", gpu1={})
    run = run_plan(monkeypatch, live, gpus("gpu1"), data=NO_SMOKE, host_data={"@fake/gpu1": DRA})
    assert run.failed
    assert "nvidia-dra-driver-gpu" not in bundles(run) and "dra-claims" not in bundles(run)
    [line] = [record.getMessage() for record in caplog.records if "needs Kubernetes 1.34" in record.getMessage()]
    assert "the server is v1.33.2" in line and "\n" not in line


def move_commands(run) -> list[tuple[str, str]]:
    """(node, step) of each move command, in the order the control plane ran them."""
    found = []
    for command in run.control_plane_commands():
        for step, pattern in (("cordon", r" uncordon (\S+)$| cordon (\S+)$"), ("drain", r" drain (\S+) "),
                              ("relabel", r" label node (\S+) --overwrite .*gpu-allocator"),
                              ("wait", r"resourceslices .*spec.nodeName=(\w+)|get node (\S+) -o .*allocatable")):
            match = re.search(pattern, command)
            if match:
                node = next(group for group in match.groups() if group)
                kind = "uncordon" if step == "cordon" and " uncordon " in command else step
                if step == "wait":
                    kind = "wait-resourceslices" if "resourceslices" in command else "wait-allocatable"
                found.append((node, kind))
                break
    return found


def test_moving_a_group_to_dra_goes_node_by_node_in_order_and_moves_the_labels(monkeypatch):
    live = cluster(gpu1=DEVICE_PLUGIN_LIVE, gpu2=DEVICE_PLUGIN_LIVE)
    run = run_plan(monkeypatch, live, gpus("gpu1", "gpu2"), data={**NO_SMOKE, **DRA})
    assert not run.failed
    steps = ["cordon", "drain", "relabel", "wait-allocatable", "wait-resourceslices", "uncordon"]
    assert move_commands(run) == [("gpu1", step) for step in steps] + [("gpu2", step) for step in steps]
    # nothing of the device plugin's labels is left; the DRA plugin's selector is there
    assert live.nodes["gpu1"] == DRA_LIVE and live.nodes["gpu2"] == DRA_LIVE
    # the node returns only once the DRA driver offers its GPUs, and the device plugin no longer does
    waits = [command for command in run.control_plane_commands() if "until [" in command]
    assert "until [ -z " in waits[0] and "nvidia\\.com/gpu" in waits[0]
    assert "until [ -n " in waits[1] and "spec.driver=gpu.nvidia.com" in waits[1]


def test_moving_back_to_the_device_plugin_removes_the_dra_label(monkeypatch):
    live = cluster(gpu1=DRA_LIVE)
    run = run_plan(monkeypatch, live, gpus("gpu1"), data=NO_SMOKE)
    assert move_commands(run) == [("gpu1", step) for step in
                                  ["cordon", "drain", "relabel", "wait-resourceslices", "wait-allocatable", "uncordon"]]
    assert live.nodes["gpu1"] == DEVICE_PLUGIN_LIVE
    assert "nvidia-device-plugin" in bundles(run)


def test_a_moved_group_moves_nothing_on_the_next_run(monkeypatch):
    live = cluster(gpu1=DEVICE_PLUGIN_LIVE)
    run_plan(monkeypatch, live, gpus("gpu1"), data={**NO_SMOKE, **DRA})
    again = run_plan(monkeypatch, live, gpus("gpu1"), data={**NO_SMOKE, **DRA})
    assert move_commands(again) == [] and again.applies() == [] and again.labels() == []
