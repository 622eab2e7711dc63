"""
Which hosts the deploys act on: the GPU nodes' group and the control plane's (settings, gpu_nodes and
control_plane unless a site names others), hosts named on the command line, and pyinfra's own groups,
which no message names.
"""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from plan import QUICK, REPO, Node, gpu_node, run_inventory, run_pyinfra
from pyinfra.api import Inventory

from deploy.operations.files import digest_read
from deploy.settings import parse_settings
from deploy.tasks.kernel import read_files

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
both_modes = pytest.mark.usefixtures("both_modes")


@both_modes
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


@both_modes
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
    assert run.failures == [
        "in the inventory's groups gpu_node, not in gpu_nodes: gpu-node provisions the hosts of "
        "gpu_nodes (is 'gpu_node' meant to be 'gpu_nodes'?); add it there, or name the GPU nodes' "
        "group with gpu_nodes_group"
    ]
    # the operation that fails it says why in pyinfra's own output (the hosts' first operations share a place)
    assert "Refuse this host (not in gpu_nodes)" in ", ".join(run.op_names()).split(", ")
    commands = {host.name: host.connector.executed_commands for host in inventory}
    assert commands["@fake/gpu1"] == []  # not even read
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands["@fake/gpu2"])


def test_a_host_named_on_the_command_line_is_a_gpu_node():
    """In no group but its connector's (pyinfra's CLI puts `pyinfra @local ...` in "@local"): the target is meant."""
    from deploy.entry import outside_the_groups

    inventory = Inventory((["@fake/gpu1"], {}), **{"@fake": (["@fake/gpu1"], {})})
    (host,) = list(inventory)
    assert set(host.groups) == {"@fake"} and outside_the_groups(host, parse_settings({})) is None


@both_modes
def test_the_group_settings_name_the_groups_the_deploys_act_on():
    """gpu_nodes_group and control_plane_group: an inventory of its own names (k8s_workers, masters)."""
    data = {
        **QUICK,
        "kernel_modules_load": False,
        "stages": "kernel",
        "gpu_nodes_group": "k8s_workers",
        "control_plane_group": "masters",
    }
    inventory = Inventory(
        (["@fake/gpu1", "@fake/cp1"], {}),
        override_data=data,
        k8s_workers=(["@fake/gpu1"], {}),
        masters=(["@fake/cp1"], {}),
    )
    gpu1 = gpu_node("debian-12", facts=[(digest_read(path), "absent") for path in read_files()])
    run = run_inventory(inventory, {"@fake/gpu1": gpu1, "@fake/cp1": Node()})
    assert run.error is None and run.failures == [], (run.error, run.failures)
    commands = {host.name: host.connector.executed_commands for host in inventory}
    assert commands["@fake/cp1"] == []
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands["@fake/gpu1"])


def pyinfra_cli(args: list[str], cwd) -> tuple[int, list[str]]:
    """pyinfra's CLI (--dry: nothing executes) run from ``cwd``: its exit status and output lines."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPU_NODES", None)
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "--dry", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return result.returncode, [click.unstyle(line).strip() for line in (result.stdout + result.stderr).splitlines()]


def test_pyinfra_s_own_groups_never_appear_in_the_refusal_and_the_dry_run_fails(tmp_path):
    """An inventory file inv2.py puts its hosts in pyinfra's group "inv2" too, and @local in "@local":
    neither is the site's, so neither is named. Refused while planning: nothing runs on @local."""
    (tmp_path / "inv2.py").write_text('k8s_workers = ["@local"]\n')
    code, lines = pyinfra_cli(["inv2.py", str(REPO / "deploy" / "gpu_node.py")], cwd=tmp_path)
    refusal = (
        "in the inventory's groups k8s_workers, not in gpu_nodes: gpu-node provisions the hosts of gpu_nodes; "
        "add it there, or name the GPU nodes' group with gpu_nodes_group"
    )
    assert code == 1 and f"[@local] gpu-node: {refusal}" in lines, lines
    assert f"@local would be refused: {refusal}" in lines
    assert not [line for line in lines if "groups" in line and ("inv2" in line or "@local," in line)]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["inv2.py"]  # no report file from a dry run


@both_modes
@pytest.mark.parametrize("how", ["entry file", "deploy call"])
def test_the_cluster_deploy_with_no_control_plane_host_stops_in_one_line(how, tmp_path):
    """Before, each host was skipped: an empty run, exit 0, as if the cluster were configured."""
    from pyinfra.api.deploy import add_deploy

    import deploy
    from deploy.settings import SettingsError

    inventory = Inventory((["@fake/gpu1"], {}), override_data=QUICK, gpu_nodes=(["@fake/gpu1"], {}))
    if how == "entry file":
        run = run_inventory(inventory, {"@fake/gpu1": Node()}, str(REPO / "deploy" / "k8s_gpu.py"))
        error = run.error
    else:
        _, error = run_pyinfra(inventory, lambda state: add_deploy(state, deploy.configure_cluster))
    assert isinstance(error, SettingsError)
    assert str(error) == (
        "no host of this run is in control_plane (control_plane_group): the cluster deploy runs "
        "kubectl there; put the host kubectl runs on in control_plane (or name its group with "
        "control_plane_group) and include it in the run"
    )
    assert inventory.get_host("@fake/gpu1").connector.executed_commands == []


def test_the_cluster_entry_file_with_no_control_plane_host_exits_non_zero_in_one_line(tmp_path):
    code, lines = pyinfra_cli(["@local", str(REPO / "deploy" / "k8s_gpu.py")], cwd=tmp_path)
    assert code == 1
    assert [line for line in lines if "error" in line] == [
        "--> pyinfra error: no host of this run is in control_plane (control_plane_group): the cluster deploy runs "
        "kubectl there; put the host kubectl runs on in control_plane (or name its group with control_plane_group) "
        "and include it in the run"
    ], lines
