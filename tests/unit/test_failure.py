"""
The one way a host fails (deploy/operations/failure.py): one line naming the problem, this host
only, nothing after it; in pyinfra's default mode (changes detected first) as with ``-y``.
"""

from __future__ import annotations

import pytest
from plan import GPU_NODE, PCI_WITH_GPU, file_digests_lines, gpu_node, node_lines, run_plan, run_pyinfra
from pyinfra.api import Inventory, deploy
from pyinfra.api.deploy import add_deploy
from pyinfra.operations import server
from pyinfra_cli.util import load_deploy_file

from deploy.facts.files import FileDigests
from deploy.operations import failure
from deploy.operations.files import digest_read
from deploy.operations.packages import deb_states_read
from deploy.settings import parse_settings
from deploy.tasks import boot, health
from deploy.tasks.kernel import read_files
from deploy.tasks.toolkit import TOOLKIT_PACKAGES
from deploy.tasks.toolkit import reads as toolkit_reads


@deploy("Refuse, then change")
def _refuse_then_change(message: str):
    failure.fail(name="Refuse", message=message)
    server.shell(name="Change", commands=["touch /etc/changed"])


def test_fail_logs_one_line_fails_the_host_and_runs_nothing_after():
    plan = run_plan(_refuse_then_change, "it's broken: line 2")
    assert plan.failed
    assert plan.failures == ["it's broken: line 2"]
    assert not plan.ran("touch /etc/changed")


@deploy("Refuse on one host")
def _refuse_on(bad_host: str):
    from pyinfra import host

    if host.name == bad_host:
        failure.fail(name="Refuse", message=f"{host.name} cannot be changed")
    server.shell(name="Change", commands=["touch /etc/changed"])


@pytest.mark.usefixtures("both_modes")
def test_only_the_failing_host_fails_the_others_go_on():
    quick = {"fake_delay": 0, "fake_delay_jitter": 0}
    inventory = Inventory(([("@fake/good", quick), ("@fake/bad", quick)], {}))
    failures: list[str] = []
    state, error = run_pyinfra(inventory, lambda state: add_deploy(state, _refuse_on, "@fake/bad"), failures=failures)
    assert error is None, error
    assert {host.name for host in state.failed_hosts} == {"@fake/bad"}
    assert inventory.get_host("@fake/good").connector.executed_commands[-1].endswith("touch /etc/changed")
    assert not inventory.get_host("@fake/bad").connector.executed_commands
    assert failures == ["@fake/bad cannot be changed"]


@pytest.mark.usefixtures("both_modes")
def test_a_host_refused_in_preflight_fails_alone_before_any_change_and_the_fleet_goes_on():
    """gpu_node.py turns one host's preflight refusal (here require_gpu on a node without one) into
    that host's failure: pyinfra would otherwise stop every host while still planning."""
    common = {
        "fake_delay": 0,
        "fake_delay_jitter": 0,
        "kernel_modules_load": False,
        "reboot_allowed": False,
        "stages": "kernel",
    }
    data = {**common, "require_gpu": True}
    # The kernel stage's files are not there yet.
    kernel_files = [(digest_read(path), "absent") for path in read_files()]
    nodes = {
        "@fake/no-gpu": gpu_node("debian-12", node_survey=node_lines("6.1.0-18-amd64"), facts=kernel_files),
        "@fake/gpu": gpu_node(
            "debian-12", node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU), facts=kernel_files
        ),
    }
    inventory = Inventory(([("@fake/no-gpu", data), ("@fake/gpu", data)], {}))
    failures: list[str] = []
    state, error = run_pyinfra(
        inventory, lambda state: load_deploy_file(state, GPU_NODE), failures=failures, nodes=nodes
    )
    assert error is None, error
    assert {host.name for host in state.failed_hosts} == {"@fake/no-gpu"}
    assert failures == ["no NVIDIA GPU on the PCI bus (vendor 0x10de, display class): require_gpu=true"]
    changing = ("mkdir", "sh -c", "apt-get", "mv ", "sysctl", "modprobe")
    refused = inventory.get_host("@fake/no-gpu").connector.executed_commands
    assert not [command for command in refused if command.startswith(changing)], refused
    assert inventory.get_host("@fake/gpu").connector.executed_commands != refused
    assert any("modules-load.d" in command for command in inventory.get_host("@fake/gpu").connector.executed_commands)


@pytest.mark.usefixtures("both_modes")
def test_a_toolkit_pin_the_family_cannot_honour_is_refused_in_preflight_before_any_change():
    """Arch installs only its current toolkit: the pin is refused with the other preflight refusals, so the
    kernel stage, planned before the toolkit's, changes nothing on that host."""
    data = {
        "fake_delay": 0,
        "fake_delay_jitter": 0,
        "kernel_modules_load": False,
        "reboot_allowed": False,
        "stages": "kernel,toolkit",
        "nvidia_toolkit_version": "1.17.8-1",
    }
    node = gpu_node(
        "arch",
        node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"]),
        facts=[
            *[(digest_read(path), "absent") for path in read_files()],
            # the first-boot unit and the health check, which a run that installs the toolkit brings
            *[
                (digest_read(path), "absent")
                for task in (boot, health)
                for path in task.wanted_files(parse_settings({}))
            ],
            (boot.units_read(), []),
            (health.units_read(), []),
            # What preflight reads ahead for the toolkit's repository: no such files, and no dpkg-query to ask.
            *[
                (call, file_digests_lines(dict.fromkeys(call[1]["paths"], "absent")))
                for call in toolkit_reads(parse_settings({}))
                if call[0] is FileDigests
            ],
            (deb_states_read(TOOLKIT_PACKAGES), []),
        ],
    )
    inventory = Inventory(([("@fake/arch", data)], {}))
    failures: list[str] = []
    state, error = run_pyinfra(
        inventory, lambda state: load_deploy_file(state, GPU_NODE), failures=failures, nodes={"@fake/arch": node}
    )
    assert {host.name for host in state.failed_hosts} == {"@fake/arch"}, error
    assert failures == [
        "nvidia_toolkit_version='1.17.8-1' cannot be pinned on arch: pacman installs only the "
        "current version; unset it (or hold it by hand)"
    ]
    ran = inventory.get_host("@fake/arch").connector.executed_commands
    changing = ("mkdir", "sh -c", "pacman", "mv ", "sysctl", "modprobe", "sed -i")
    assert not [command for command in ran if command.startswith(changing)], ran
