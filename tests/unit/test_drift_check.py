"""deploy/fleet/drift.py (gpu-node-drift): its command line, and its exit status kept apart from drift's.
What it reports on a real node: tests/e2e/test_drift.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from deploy.fleet import drift


@pytest.fixture
def no_pyinfra(monkeypatch):
    monkeypatch.setattr(drift.subprocess, "run", lambda *args, **kwargs: pytest.fail("pyinfra ran"))


def test_help_names_the_console_script_and_runs_nothing(capsys, no_pyinfra):
    with pytest.raises(SystemExit) as exit_info:
        drift.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpu-node-drift ") and "INVENTORY DEPLOY" in out


def test_a_missing_deploy_file_is_one_line_naming_it_and_not_the_drift_status(capsys, no_pyinfra):
    assert drift.main(["@local", "no_such_deploy.py", "--data", "stages=kernel"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "gpu-node-drift: error: deploy file no_such_deploy.py: no such file\n"
    assert captured.out == ""


def test_bad_arguments_exit_1_as_a_failed_check_not_2_which_is_drift(capsys, no_pyinfra):
    with pytest.raises(SystemExit) as exit_info:
        drift.main(["inventory.py"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == "gpu-node-drift: the following arguments are required: DEPLOY, ... (see --help)\n"


def test_pyinfra_runs_dry_in_the_working_directory_with_the_options_after_deploy(monkeypatch, tmp_path, capsys):
    (tmp_path / "site.py").write_text("")
    monkeypatch.chdir(tmp_path)
    calls = []

    def pyinfra(command, **kwargs):
        calls.append((command, kwargs))
        plan = [{"name": "Kernel prerequisites | Persist the Kubernetes sysctls", "hosts_with_change": ["gpu1"]}]
        return subprocess.CompletedProcess(command, 0, json.dumps({"plan": plan}))

    monkeypatch.setattr(drift.subprocess, "run", pyinfra)
    assert drift.main(["@local", "site.py", "--data", "stages=kernel"]) == 2
    ((command, kwargs),) = calls
    assert command[1:] == ["-m", "pyinfra", "--dry", "--json", "@local", "site.py", "--data", "stages=kernel"]
    assert "cwd" not in kwargs  # the caller's folder: an installed gpu-node has no checkout to run in
    assert "gpu1: Kernel prerequisites | Persist the Kubernetes sysctls" in capsys.readouterr().out
