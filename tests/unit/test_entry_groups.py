"""With both groups in one inventory, deploy/gpu_node.py acts on the GPU nodes only."""

from __future__ import annotations

import pytest
from plan import QUICK, Node, gpu_node, run_inventory
from pyinfra.api import Inventory

from deploy.operations.files import digest_read
from deploy.tasks.kernel import read_files


# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")


def test_control_plane_only_hosts_are_skipped_and_gpu_nodes_are_deployed():
    data = {**QUICK, "kernel_modules_load": False, "stages": "kernel"}
    inventory = Inventory(
        (["@fake/gpu1", "@fake/cp1"], {}),
        override_data=data,
        gpu_nodes=(["@fake/gpu1"], {}),
        control_plane=(["@fake/cp1"], {}),
    )
    # The kernel stage's files are not on the GPU node yet; the control plane states nothing: it is not read.
    gpu1 = gpu_node("debian-12", facts=[(digest_read(path), "absent") for path in read_files()])
    run = run_inventory(inventory, {"@fake/gpu1": gpu1, "@fake/cp1": Node()})
    assert run.error is None, run.error
    commands = {host.name: host.connector.executed_commands for host in inventory}
    assert commands["@fake/cp1"] == []
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands["@fake/gpu1"])


def test_a_host_in_a_misnamed_group_is_refused_in_one_line_and_others_go_on(caplog):
    data = {**QUICK, "kernel_modules_load": False, "stages": "kernel"}
    inventory = Inventory(
        (["@fake/gpu1", "@fake/gpu2"], {}),
        override_data=data,
        gpu_node=(["@fake/gpu1"], {}),
        gpu_nodes=(["@fake/gpu2"], {}),
    )
    gpu2 = gpu_node("debian-12", facts=[(digest_read(path), "absent") for path in read_files()])
    run = run_inventory(inventory, {"@fake/gpu1": Node(), "@fake/gpu2": gpu2})
    assert run.failures == ["in the inventory's groups gpu_node, not in gpu_nodes: gpu-node provisions the hosts of "
                            "gpu_nodes (is 'gpu_node' meant to be 'gpu_nodes'?); add it there"]
    commands = {host.name: host.connector.executed_commands for host in inventory}
    assert commands["@fake/gpu1"] == []  # not even read
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands["@fake/gpu2"])


def test_a_host_named_on_the_command_line_is_a_gpu_node():
    """In no group but its connector's (pyinfra's CLI puts `pyinfra @local ...` in "@local"): the target is meant."""
    from deploy.entry import outside_the_groups

    inventory = Inventory((["@fake/gpu1"], {}), **{"@fake": (["@fake/gpu1"], {})})
    (host,) = list(inventory)
    assert set(host.groups) == {"@fake"} and outside_the_groups(host) is None
