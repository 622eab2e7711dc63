"""
A run that executes nothing (``--dry``, or pyinfra's prompt without ``-y``) shows each host's refusal
with its reason, one line each, while planning, before anything would run; its fleet report says
"would be refused" and its exit status is a failure's (deploy/reports/exit_status.py). Node, undo and
verify runs alike; in -y runs the line is still said once.
"""

from __future__ import annotations

import pytest
from plan import DEFAULT, QUICK, REPO, Node, gpu_node, host_access, os_release, run_deploy, run_inventory
from pyinfra.api import Inventory
from pyinfra.api.connect import disconnect_all
from pyinfra.facts.server import Arch, LinuxDistribution

from deploy.facts.access import HostAccess
from deploy.reports import exit_status
from deploy.reports.fleet_report import NOT_RUN, WOULD_BE_REFUSED, run_status, unexecuted_rows
from deploy.tasks.undo import records_read

pytestmark = pytest.mark.usefixtures("both_modes")

UNDO = str(REPO / "deploy" / "undo.py")
VERIFY = str(REPO / "deploy" / "verify.py")
NO_SYSTEMD = (
    "systemd is not running as PID 1 (PID 1 is bash): gpu-node enables and restarts services through "
    "systemd; run it on a host booted with systemd"
)


def no_systemd_node() -> Node:
    """A Debian host whose PID 1 is not systemd (a plain container): preflight and undo refuse it."""
    return gpu_node("debian-12", facts=[(HostAccess, host_access("debian-12", systemd=False))], unstated=DEFAULT)


def no_systemd_undo_node() -> Node:
    return Node(
        facts=[
            (HostAccess, host_access("debian-12", systemd=False)),
            (LinuxDistribution, os_release("debian-12")),
            (Arch, "x86_64"),
            (records_read(), []),
        ],
        unstated=DEFAULT,
    )


@pytest.mark.parametrize(
    "deploy_file, node", [(None, no_systemd_node), (UNDO, no_systemd_undo_node)], ids=["gpu_node.py", "undo.py"]
)
def test_a_run_that_executes_nothing_prints_the_refusal_with_its_reason_and_changes_nothing(deploy_file, node):
    plan = run_deploy(node(), execute=False, **({"deploy_file": deploy_file} if deploy_file else {}))
    assert plan.error is None, plan.error
    assert plan.failures == [NO_SYSTEMD]
    # the one read, nothing else
    assert len(plan.commands) == 1 and "@@gpu-node-fact" in plan.commands[0]


@pytest.mark.parametrize("deploy_file", [None, UNDO, VERIFY], ids=["gpu_node.py", "undo.py", "verify.py"])
def test_a_host_outside_the_groups_is_refused_with_its_reason_while_planning(deploy_file):
    inventory = Inventory((["@fake/gpu1"], {}), override_data=QUICK, gpu_node=(["@fake/gpu1"], {}))
    plan = run_inventory(
        inventory, {"@fake/gpu1": Node()}, **({"deploy_file": deploy_file} if deploy_file else {}), execute=False
    )
    assert plan.failures == [
        "in the inventory's groups gpu_node, not in gpu_nodes: gpu-node provisions the hosts of "
        "gpu_nodes (is 'gpu_node' meant to be 'gpu_nodes'?); add it there, or name the GPU "
        "nodes' group with gpu_nodes_group"
    ]
    assert plan.commands == []


def test_the_fleet_report_of_a_run_that_executed_nothing_says_would_be_refused_and_the_status_is_a_failure(
    tmp_path, capsys
):
    nodes = {"@fake/bad": no_systemd_node(), "@fake/good": gpu_node("debian-12", unstated=DEFAULT)}
    inventory = Inventory(
        (list(nodes), {}),
        override_data={
            **QUICK,
            "stages": "kernel",
            "kernel_modules_load": False,
            "fleet_report_path": str(tmp_path / "fleet.json"),
        },
    )
    plan = run_inventory(inventory, nodes, execute=False)
    capsys.readouterr()
    disconnect_all(plan.state)  # pyinfra's CLI disconnects after --dry too: the report is made then
    report = capsys.readouterr().err
    assert report.strip().splitlines() == [
        "--> Fleet report, nothing executed (--dry, or the prompt declined): 2 nodes: 1 would be refused, 1 not run",
        f"    @fake/bad would be refused: {NO_SYSTEMD}",
    ]
    rows = unexecuted_rows(plan.state)
    assert [(row.host, row.status) for row in rows] == [("@fake/bad", WOULD_BE_REFUSED), ("@fake/good", NOT_RUN)]
    assert run_status(rows) == exit_status.FAILED
    assert not (tmp_path / "fleet.json").exists()  # the last executed run's report stays


def test_a_run_that_executes_says_each_refusal_once():
    plan = run_deploy(no_systemd_node())
    assert plan.failed and plan.failures == [NO_SYSTEMD]
