"""
A run that asks for sudo on a node where sudo cannot run the read (not installed, or it wants a
password no one can type): one line naming the host and the fix, no fact dump, no traceback, and
the host alone fails before any change. Real pyinfra wrapping a real shell command in sudo, on
@local: PATH holds no sudo at all, or a stand-in sudo that wants a password, so nothing of the
deploy runs on this machine (the read never starts).
"""

from __future__ import annotations

import logging
from pathlib import Path

import click
import pytest
from plan import QUICK, run_pyinfra
from pyinfra.api import Inventory
from pyinfra.api.deploy import add_deploy

import deploy


def run_on_local_with(path: Path, function, tmp_path: Path, caplog) -> tuple[object, object, list[str]]:
    """``function(_sudo=True)`` on @local with only ``path`` on PATH: (its State, its error, every log line)."""
    inventory = Inventory(([("@local", QUICK)], {}))
    caplog.set_level(logging.INFO, logger="pyinfra")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(path))
        state, error = run_pyinfra(
            inventory,
            lambda state: add_deploy(state, function, _sudo=True, fleet_report_path=str(tmp_path / "fleet.json")),
        )
    return state, error, [click.unstyle(record.getMessage()) for record in caplog.records]


@pytest.mark.parametrize("function", [deploy.provision_gpu_node, deploy.verify_gpu_node, deploy.undo_gpu_node])
def test_sudo_not_installed_is_one_line_naming_the_host_and_the_fix(function, tmp_path, caplog):
    empty = tmp_path / "bin"
    empty.mkdir()
    state, error, lines = run_on_local_with(empty, function, tmp_path, caplog)
    assert error is None or "No hosts remaining" in str(error), error
    assert {host.name for host in state.failed_hosts} == {"@local"}
    said = [line for line in lines if "sudo" in line or "Traceback" in line or "could not load fact" in line]
    assert said == [
        "[@local] gpu-node: sudo is not installed on this node, and the run asks for it (_sudo=True or "
        "--sudo): install sudo, or connect as root and leave sudo out"
    ], lines
    assert not [line for line in lines if "CombinedOutput" in line or "calls=" in line]


@pytest.mark.parametrize("function", [deploy.provision_gpu_node, deploy.verify_gpu_node, deploy.undo_gpu_node])
def test_stand_in_sudo_wanting_a_password_without_a_terminal_is_one_line(function, tmp_path, caplog, monkeypatch):
    """sudo -n says a password is required; pyinfra asks for it, and with no terminal its prompt reads
    the end of the input (EOFError), as in cron or CI."""
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "sudo").write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    (stand_in / "sudo").chmod(0o755)

    def no_terminal(prompt: str = "") -> str:
        raise EOFError

    monkeypatch.setattr("pyinfra.connectors.util.getpass", no_terminal)
    state, error, lines = run_on_local_with(stand_in, function, tmp_path, caplog)
    assert {host.name for host in state.failed_hosts} == {"@local"}
    said = [line for line in lines if "gpu-node:" in line or "Traceback" in line or "could not load fact" in line]
    assert said == [
        "[@local] gpu-node: sudo wants a password for the login user and there is no terminal to type it "
        "into: allow the login user sudo without a password, or run pyinfra from a terminal"
    ], lines
