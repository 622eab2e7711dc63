"""With both groups in one inventory, deploy/gpu_node.py acts on the GPU nodes only."""

from __future__ import annotations

import pytest
from fake_host import responses, run_deploy_file
from pyinfra.api import Inventory


# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/fake_host.py).
pytestmark = pytest.mark.usefixtures("both_modes")


def test_control_plane_only_hosts_are_skipped_and_gpu_nodes_are_deployed():
    data = {"fake_responses": responses("debian-12"), "fake_delay": 0, "fake_delay_jitter": 0,
            "kernel_modules_load": False, "stages": "kernel"}
    inventory = Inventory(
        (["@fake/gpu1", "@fake/cp1"], {}),
        override_data=data,
        gpu_nodes=(["@fake/gpu1"], {}),
        control_plane=(["@fake/cp1"], {}),
    )
    run = run_deploy_file(inventory)
    assert run.error is None, run.error
    commands = {host.name: host.connector.executed_commands for host in inventory}
    assert commands["@fake/cp1"] == []
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands["@fake/gpu1"])
