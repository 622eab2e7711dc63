"""With both groups in one inventory, deploy/gpu_node.py acts on the GPU nodes only."""

from __future__ import annotations

from fixtures.nvidia.fake_host import GPU_NODE, responses
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operations import run_ops
from pyinfra.context import ctx_config, ctx_inventory, ctx_state
from pyinfra_cli.util import load_deploy_file


def test_control_plane_only_hosts_are_skipped_and_gpu_nodes_are_deployed():
    data = {"fake_responses": responses("debian-12"), "fake_delay": 0, "fake_delay_jitter": 0,
            "kernel_modules_load": False, "stages": "kernel"}
    inventory = Inventory(
        (["@fake/gpu1", "@fake/cp1"], {}),
        override_data=data,
        gpu_nodes=(["@fake/gpu1"], {}),
        control_plane=(["@fake/cp1"], {}),
    )
    state = State(check_for_changes=False)
    config = Config()
    ctx_state.set(state)
    ctx_config.set(config)
    ctx_inventory.set(inventory)
    state.init(inventory, config)
    connect_all(state)
    load_deploy_file(state, GPU_NODE)
    run_ops(state)
    commands = {host.name: host.connector.executed_commands for host in inventory}
    assert commands["@fake/cp1"] == []
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands["@fake/gpu1"])
