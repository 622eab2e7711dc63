"""
Probes (deploy/operations/probes.py): the calling convention on pyinfra's @fake connector, driven through
pyinfra's own API in both of its modes (``both_modes``: ``-y``, execution only; the default mode,
change detection while preparing, then execution), and the smoke pod probe's parser on kubectl
output fixtures.
"""

from __future__ import annotations

import logging
from pathlib import Path

from plan import QUICK, Node, run_pyinfra
from pyinfra.api import Inventory, deploy
from pyinfra.api.deploy import add_deploy

from deploy.operations import probes
from deploy.operations.kubectl import run_smoke_test, smoke_test_report
from deploy.operations.probes import SmokeTestRun

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
CREATE = "create -f -"


def fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


@deploy("Smoke pod")
def smoke():
    run_smoke_test(
        name="Run the smoke pod",
        kubeconfig="/etc/kubernetes/admin.conf",
        manifest="kind: Pod",
        namespace="default",
        pod="gpu-node-smoke-test",
        timeout=30,
    )


def run_smoke(responses: dict):
    """
    Prepare then execute the smoke pod operation on one @fake host answering ``responses`` (commands,
    not fact reads), in the mode ``both_modes`` names (tests/plan.py). Returns the commands run while preparing, all commands, the state
    and why the run failed (None when it did not).
    """
    inventory = Inventory(([("@fake/node", QUICK)], {}))
    host = inventory.get_host("@fake/node")
    prepared: list[str] = []

    def prepare(state):
        add_deploy(state, smoke)
        prepared.extend(host.connector.executed_commands)

    state, error = run_pyinfra(inventory, prepare, nodes={"@fake/node": Node(commands=responses)})
    failure = None if error is None else str(error)
    return prepared, list(host.connector.executed_commands), state, failure


def test_the_smoke_pod_runs_once_per_run_when_executing_and_a_pass_is_no_change(both_modes):
    prepared, commands, state, failure = run_smoke({CREATE: fixture("smoke-passed.txt")})
    assert [command for command in prepared if CREATE in command] == []  # nothing created while preparing
    assert len([command for command in commands if CREATE in command]) == 1
    assert failure is None
    host = state.inventory.get_host("@fake/node")
    (op_hash,) = state.get_op_order()
    assert state.ops[host][op_hash].operation_meta.did_change() is False


def test_a_failing_smoke_pod_runs_once_and_fails_with_the_reason(both_modes, caplog):
    with caplog.at_level(logging.WARNING):
        _, commands, _, failure = run_smoke({CREATE: fixture("smoke-image-pull.txt")})
    assert len([command for command in commands if CREATE in command]) == 1
    assert failure is not None
    assert "smoke pod still Pending after the timeout: ErrImagePull" in failure + caplog.text


def test_a_probe_called_while_pyinfra_prepares_is_refused():
    inventory = Inventory(([("@fake/node", QUICK)], {}))
    host = inventory.get_host("@fake/node")
    seen = []

    def prepare(state):
        seen.append(probes.executing(host))
        probes.run(host, SmokeTestRun, kubeconfig="k", manifest="m", namespace="n", pod="p", timeout=1)

    _, error = run_pyinfra(inventory, prepare, execute=False)
    assert seen == [False]
    assert isinstance(error, probes.ProbeOutsideExecution)
    assert "probe SmokeTestRun called while pyinfra prepares" in str(error)
    assert host.connector.executed_commands == []


def test_a_probe_whose_command_cannot_run_gives_its_failing_default_and_one_warning(caplog):
    responses = {CREATE: {"success": False, "stderr": ["Connection to node closed."]}}
    with caplog.at_level(logging.WARNING):
        _, _, _, failure = run_smoke(responses)
    assert "probe SmokeTestRun could not run: Connection to node closed." in caplog.text
    assert failure is not None and "smoke pod not created: no output" in failure + caplog.text


def test_smoke_test_outcomes_and_their_report_lines():
    passed = SmokeTestRun().process(fixture("smoke-passed.txt"))
    assert passed["passed"] and passed["deleted"] and passed["waiting"] == []
    assert smoke_test_report(passed) == "smoke test passed: the vector-add pod logged 'Test PASSED'"
    pulling = SmokeTestRun().process(fixture("smoke-image-pull.txt"))
    assert not pulling["passed"]
    assert smoke_test_report(pulling).startswith(
        "smoke pod still Pending after the timeout: ErrImagePull: failed to pull and unpack image"
    )
    refused = SmokeTestRun().process(fixture("smoke-create-failed.txt"))
    assert smoke_test_report(refused) == (
        'smoke pod not created: Error from server (Forbidden): error when creating "STDIN": pods '
        '"gpu-node-smoke-test" is forbidden: exceeded quota: compute-resources'
    )
    failed = SmokeTestRun().process(["created", "phase Failed", "log CUDA error: no CUDA-capable device", "deleted"])
    assert (
        smoke_test_report(failed)
        == "smoke pod Failed without 'Test PASSED' in its log: CUDA error: no CUDA-capable device"
    )


def test_smoke_command_has_a_bounded_wait_and_deletes_the_pod():
    command = SmokeTestRun().command("/etc/kubernetes/admin.conf", "kind: Pod", "default", "gpu-node-smoke-test", 120)
    text = command.get_raw_value()
    assert "+ 120 ))" in text and "sleep 2" in text
    assert text.count("delete pod gpu-node-smoke-test --ignore-not-found") == 2
