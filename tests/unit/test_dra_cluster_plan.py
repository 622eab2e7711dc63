"""
deploy/k8s_gpu.py with DRA node groups, on @fake hosts answered by test_k8s_plan's FakeCluster (no
kube-apiserver here; the commands are the real ones): the DRA objects instead of, or beside, the
device plugin; the refusal of a cluster older than 1.34; and a node group moved from the device
plugin to DRA and back, node by node or in the batches allocator_move_batches names (as
deploy/fleet/rollout.py reads --batches, the first a canary), each step in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from test_k8s_plan import A100, FakeCluster, gpu_identity_lines, run_plan

from deploy.k8s.dra import move_plan
from deploy.settings import SettingsError, parse_settings

pytestmark = pytest.mark.usefixtures("both_modes")

DRA = {"gpu_allocator": "dra"}
NO_SMOKE = {"smoke_test": "false"}
DEVICE_PLUGIN_LIVE = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/device-plugin.config": "no-sharing",
    "accelerator": "nvidia-a100-sxm4-40gb",
}
DRA_LIVE = {"gpu-node.io/gpu-allocator": "dra", "accelerator": "nvidia-a100-sxm4-40gb"}


def cluster(version="34", **nodes) -> FakeCluster:
    return FakeCluster(
        version=("1", version), nodes={"cp1": {}, **{name: dict(labels) for name, labels in nodes.items()}}
    )


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
    assert (
        live.nodes["gpu1"]["nvidia.com/gpu.present"] == "true" and "gpu-node.io/gpu-allocator" not in live.nodes["gpu1"]
    )
    assert live.nodes["gpu2"] == DRA_LIVE


def test_a_cluster_older_than_1_34_is_refused_in_one_line(monkeypatch, caplog):
    live = cluster(version="33", gpu1={})
    run = run_plan(monkeypatch, live, gpus("gpu1"), data=NO_SMOKE, host_data={"@fake/gpu1": DRA})
    assert run.failed
    assert "nvidia-dra-driver-gpu" not in bundles(run) and "dra-claims" not in bundles(run)
    [line] = [record.getMessage() for record in caplog.records if "needs Kubernetes 1.34" in record.getMessage()]
    assert "the server is v1.33.2" in line and "\n" not in line
    names = [", ".join(run.state.op_meta[op_hash].names) for op_hash in run.state.get_op_order()]
    assert [name for name in names if name.endswith("Check the cluster serves DRA (resource.k8s.io/v1)")], names


def move_commands(run) -> list[tuple[str, str]]:
    """(node, step) of each move command, in the order the control plane ran them."""
    found = []
    for command in run.control_plane_commands():
        for step, pattern in (
            ("cordon", r" uncordon (\S+)$| cordon (\S+)$"),
            ("drain", r" drain (\S+) "),
            ("relabel", r" label node (\S+) --overwrite .*gpu-allocator"),
            ("wait", r"resourceslices .*spec.nodeName=(\w+)|get node (\S+) -o .*allocatable"),
        ):
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
    assert move_commands(run) == [
        ("gpu1", step) for step in ["cordon", "drain", "relabel", "wait-resourceslices", "wait-allocatable", "uncordon"]
    ]
    assert live.nodes["gpu1"] == DEVICE_PLUGIN_LIVE
    assert "nvidia-device-plugin" in bundles(run)


def test_a_moved_group_moves_nothing_on_the_next_run(monkeypatch):
    live = cluster(gpu1=DEVICE_PLUGIN_LIVE)
    run_plan(monkeypatch, live, gpus("gpu1"), data={**NO_SMOKE, **DRA})
    again = run_plan(monkeypatch, live, gpus("gpu1"), data={**NO_SMOKE, **DRA})
    assert move_commands(again) == [] and again.applies() == [] and again.labels() == []


# --- batch by batch, as deploy/fleet/rollout.py reads --batches ------------------------------------------

STEPS = ["cordon", "drain", "relabel", "wait-allocatable", "wait-resourceslices", "uncordon"]


def test_move_plan_takes_each_step_on_every_node_of_a_batch_before_the_next_and_batches_in_order():
    moves = [(f"gpu{index}", "device-plugin", "dra", {"gpu-node.io/gpu-allocator": "dra"}) for index in range(1, 6)]
    moves.insert(2, ("new", None, "dra", {}))  # not labelled yet: nothing to move, and no batch place taken
    plan = move_plan(moves, "1,2")
    kinds = ["cordon", "drain", "relabel", "wait-gone", "wait-ready", "uncordon"]
    assert [(step.batch, step.node, step.kind) for step in plan] == (
        [((1, 3), "gpu1", kind) for kind in kinds]
        + [((2, 3), node, kind) for kind in kinds for node in ("gpu2", "gpu3")]
        + [((3, 3), node, kind) for kind in kinds for node in ("gpu4", "gpu5")]
    )
    assert {step.labels for step in plan if step.kind == "relabel"} == {(("gpu-node.io/gpu-allocator", "dra"),)}


def test_move_plan_sizes_percentages_of_the_nodes_that_move():
    moves = [(f"gpu{index}", "dra", "device-plugin", {}) for index in range(10)]
    sizes = [len({step.node for step in move_plan(moves, "1,50%") if step.batch[0] == number}) for number in (1, 2, 3)]
    assert sizes == [1, 5, 4]


def test_the_default_moves_one_node_at_a_time():
    moves = [(f"gpu{index}", "dra", "device-plugin", {}) for index in range(3)]
    assert [step.batch for step in move_plan(moves) if step.kind == "cordon"] == [(1, 3), (2, 3), (3, 3)]


def test_a_group_moves_in_the_batches_the_control_plane_names_canary_first(monkeypatch):
    live = cluster(gpu1=DEVICE_PLUGIN_LIVE, gpu2=DEVICE_PLUGIN_LIVE, gpu3=DEVICE_PLUGIN_LIVE)
    run = run_plan(
        monkeypatch, live, gpus("gpu1", "gpu2", "gpu3"), data={**NO_SMOKE, **DRA, "allocator_move_batches": "1,100%"}
    )
    assert not run.failed
    assert move_commands(run) == (
        [("gpu1", step) for step in STEPS] + [(node, step) for step in STEPS for node in ("gpu2", "gpu3")]
    )
    assert all(live.nodes[node] == DRA_LIVE for node in ("gpu1", "gpu2", "gpu3"))
    names = run.state.op_meta
    assert any(
        "Move node gpu1 to the dra (batch 1 of 2, the canary): cordon" in name
        for meta in names.values()
        for name in meta.names
    )


@dataclass
class CanaryNeverReady(FakeCluster):
    """The DRA driver never offers the canary's GPUs."""

    def answer(self, command: str) -> tuple[bool, list[str]]:
        if "resourceslices" in command and "spec.nodeName=gpu1" in command and "until [ -n" in command:
            return False, ["gpu-node: the dra offers no GPU of node gpu1 after 300 s"]
        return super().answer(command)


def test_a_canary_that_fails_stops_the_move_before_the_next_batch_and_stays_cordoned(monkeypatch):
    live = CanaryNeverReady(
        version=("1", "34"), nodes={"cp1": {}, "gpu1": dict(DEVICE_PLUGIN_LIVE), "gpu2": dict(DEVICE_PLUGIN_LIVE)}
    )
    run = run_plan(
        monkeypatch, live, gpus("gpu1", "gpu2"), data={**NO_SMOKE, **DRA, "allocator_move_batches": "1,100%"}
    )
    assert run.failed
    assert move_commands(run) == [("gpu1", step) for step in STEPS[:5]]  # no uncordon, gpu2 untouched
    assert live.nodes["gpu2"] == DEVICE_PLUGIN_LIVE


@pytest.mark.parametrize("value", ["0", "1,0%", "x", "1,,2"])
def test_batch_sizes_that_are_none_are_refused_in_one_line(value):
    with pytest.raises(SettingsError) as refused:
        parse_settings({"allocator_move_batches": value})
    assert str(refused.value) == (
        f"invalid setting allocator_move_batches={value!r}: allowed: whole numbers from 1 "
        "or percentages above 0 up to 100%, comma-separated (e.g. 1,5,25%)"
    )
