"""
The package's public deploys (deploy/__init__.py; ``gpu_node`` once installed), called as a site's own
deploy file calls them through pyinfra's API, on @fake hosts (tests/plan.py): settings as keyword
arguments winning over host data, pyinfra's global arguments passed through to every operation, an
unknown keyword stopping the run before any command, the fleet report written.
"""

from __future__ import annotations

import json

import pytest
from plan import QUICK, gpu_node, run_pyinfra
from pyinfra.api import Inventory
from pyinfra.api.connect import disconnect_all
from pyinfra.api.deploy import add_deploy

import deploy
from deploy.operations.files import digest_read
from deploy.settings import SettingsError
from deploy.tasks.kernel import read_files

KERNEL_ONLY = {"stages": "kernel", "kernel_modules_load": False}


def node():
    return gpu_node("debian-12", facts=[(digest_read(path), "absent") for path in read_files()])


def call(function, tmp_path, *, host_data: dict | None = None, **kwargs):
    """``function(**kwargs)`` on @fake/gpu1 (in gpu_nodes) as ``add_deploy`` runs a site's deploy: (state, error, commands)."""
    inventory = Inventory(([("@fake/gpu1", {**QUICK, **(host_data or {})})], {}), gpu_nodes=(["@fake/gpu1"], {}))
    kwargs.setdefault("fleet_report_path", str(tmp_path / "fleet.json"))
    state, error = run_pyinfra(
        inventory, lambda state: add_deploy(state, function, **kwargs), nodes={"@fake/gpu1": node()}
    )
    (host,) = list(inventory)
    return state, error, list(host.connector.executed_commands)


def test_the_deploys_are_the_package_attributes_and_load_on_first_use():
    assert set(deploy.__all__) == {
        "provision_gpu_node",
        "verify_gpu_node",
        "undo_gpu_node",
        "configure_cluster",
        "render_cluster_files",
    }
    assert all(callable(getattr(deploy, name)) and getattr(deploy, name)._inner for name in deploy.__all__)
    with pytest.raises(AttributeError):
        deploy.provision  # noqa: B018


def test_keyword_settings_win_over_host_data_and_the_run_reports_as_the_entry_file_does(tmp_path):
    state, error, commands = call(deploy.provision_gpu_node, tmp_path, host_data={"stages": "verify"}, **KERNEL_ONLY)
    assert error is None, error
    # the kernel stage ran (stages=kernel given), not verify (the host data's)
    assert any("/etc/sysctl.d/99-gpu-node-kubernetes.conf" in command for command in commands)
    assert not [name for name in (", ".join(meta.names) for meta in state.op_meta.values()) if "Verify" in name]
    # the operations run inside the deploy, named under it
    assert all(", ".join(meta.names).startswith("GPU node | ") for meta in state.op_meta.values())
    # the fleet report, written when the last host disconnects, as after the CLI's run
    disconnect_all(state)
    report = json.loads((tmp_path / "fleet.json").read_text())
    assert [(row["host"], row["status"]) for row in report["nodes"]] == [("@fake/gpu1", "changed")]


def test_pyinfra_global_arguments_pass_through_to_every_operation(tmp_path):
    state, error, _ = call(deploy.provision_gpu_node, tmp_path, _sudo=True, _sudo_user="admin", **KERNEL_ONLY)
    assert error is None, error
    arguments = [state.ops[host][op_hash].global_arguments for host in state.ops for op_hash in state.ops[host]]
    assert arguments and all(each["_sudo"] and each["_sudo_user"] == "admin" for each in arguments)


@pytest.mark.parametrize(
    "function, name",
    [
        ("provision_gpu_node", "provision_gpu_node"),
        ("verify_gpu_node", "verify_gpu_node"),
        ("undo_gpu_node", "undo_gpu_node"),
        ("configure_cluster", "configure_cluster"),
        ("render_cluster_files", "render_cluster_files"),
    ],
)
def test_an_unknown_keyword_stops_the_run_in_one_line_before_any_command(tmp_path, function, name):
    _, error, commands = call(getattr(deploy, function), tmp_path, driver_branch="550")
    assert isinstance(error, SettingsError)
    assert str(error) == f"unknown setting 'driver_branch' given to {name}: did you mean 'nvidia_driver_branch'?"
    assert commands == []


def test_an_invalid_keyword_value_names_where_it_came_from(tmp_path):
    _, error, commands = call(deploy.provision_gpu_node, tmp_path, nvidia_driver_branch="55", **KERNEL_ONLY)
    assert isinstance(error, SettingsError) and commands == []
    assert str(error).endswith("(host @fake/gpu1, from the deploy call's keyword arguments)")
