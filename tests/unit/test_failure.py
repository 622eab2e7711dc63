"""
The one way a host fails (deploy/operations/failure.py): one line naming the problem, this host
only, nothing after it; in pyinfra's default mode (changes detected first) as with ``-y``.
"""

from __future__ import annotations

import logging

import pytest
from plan import run_plan
from pyinfra.api import Config, Inventory, State, deploy
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.operations import server

from deploy.operations import failure


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


@pytest.mark.parametrize("check_for_changes", [True, False], ids=["default mode", "-y"])
def test_only_the_failing_host_fails_the_others_go_on(check_for_changes, caplog):
    caplog.set_level(logging.ERROR, logger="pyinfra")
    quick = {"fake_delay": 0, "fake_delay_jitter": 0}
    inventory = Inventory(([("@fake/good", quick), ("@fake/bad", quick)], {}))
    state = State(inventory, Config(), check_for_changes=check_for_changes)
    state.set_stage(StateStage.Connect)
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_deploy(state, _refuse_on, "@fake/bad")
    state.set_stage(StateStage.Execute)
    run_ops(state)
    assert {host.name for host in state.failed_hosts} == {"@fake/bad"}
    assert inventory.get_host("@fake/good").connector.executed_commands[-1].endswith("touch /etc/changed")
    assert not inventory.get_host("@fake/bad").connector.executed_commands
    lines = [record.getMessage() for record in caplog.records if "gpu-node: " in record.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("[@fake/bad]")
    assert lines[0].endswith("gpu-node: @fake/bad cannot be changed")
