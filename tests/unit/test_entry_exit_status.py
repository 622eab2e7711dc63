"""
The run's exit status (deploy/reports/exit_status.py): 3 when every host is done but a GPU node awaits the
reboot its driver change needs, distinct from 1 (a host failed) and 0; the fleet report says it. A
GPU node before that reboot cannot pass verify's GPU steps: they are reported, and the host does
not fail for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from plan import REPO
from pyinfra.api.state import StateStage
from test_verify_steps import containerd_dump, node_lines, run_verify

from deploy.reports import exit_status
from deploy.reports.fleet_report import CHANGED, CONVERGED, FAILED, FleetRow, fleet_json, fleet_table, run_status
from deploy.reports.node_report import FAIL


def row(status: str = CHANGED, *, no_gpu: bool | None = False, reboot_required: bool | None = True) -> FleetRow:
    return FleetRow(host=f"gpu-{status}", status=status, no_gpu=no_gpu, reboot_required=reboot_required)


@pytest.mark.parametrize(
    "rows, status",
    [
        ([row(), row(CONVERGED, reboot_required=False)], exit_status.REBOOT_REQUIRED),
        ([row(no_gpu=True)], exit_status.DONE),  # no GPU: a reboot loads no module
        ([row(no_gpu=None, reboot_required=None)], exit_status.DONE),  # not known (verify alone)
        ([row(), row(FAILED, no_gpu=None, reboot_required=None)], exit_status.FAILED),  # a failure comes first
    ],
)
def test_the_run_status_from_the_fleet_rows(rows, status):
    assert run_status(rows) == status
    assert fleet_json(rows)["exit_status"] == status


def test_the_fleet_report_says_which_nodes_await_a_reboot():
    rows = [row(), row(CONVERGED, reboot_required=False)]
    assert fleet_table(rows).splitlines()[0] == (
        "--> Fleet report: 2 nodes: 1 converged, 1 changed, 0 failed, 1 awaiting a reboot (exit 3)"
    )
    assert fleet_json(rows)["awaiting_reboot"] == ["gpu-changed"]


@pytest.mark.parametrize(
    "failed_hosts, stage, raises",
    [
        (set(), StateStage.Disconnect, True),  # an executed run that reached its end: pyinfra's exit 0 replaced
        (set(), StateStage.Prepare, True),  # --dry, or a declined prompt
        ({"gpu1"}, StateStage.Disconnect, False),  # pyinfra exits 1 itself, with its own line
        (set(), StateStage.Execute, False),  # run_ops raised (--fail-percent): its message and 1 stand
    ],
)
def test_the_status_replaces_pyinfras_only_where_pyinfra_would_exit_0(monkeypatch, failed_hosts, stage, raises):
    monkeypatch.setattr(exit_status.pyinfra, "is_cli", True)
    state = SimpleNamespace(failed_hosts=failed_hosts, current_stage=stage)
    if raises:
        with pytest.raises(SystemExit) as exited:
            exit_status.exit_with(state, exit_status.REBOOT_REQUIRED)
        assert exited.value.code == exit_status.REBOOT_REQUIRED
    else:
        exit_status.exit_with(state, exit_status.REBOOT_REQUIRED)
    exit_status.exit_with(state, exit_status.DONE)  # 0: pyinfra's own, never raised


# A stand-in for the driver stage's report: the note a GPU node's run leaves when its new driver
# awaits the reboot (deploy/operations/driver.py), on a run with no operation.
STAND_IN_DRIVER_REPORT = """\
import os
from pyinfra import host
from deploy.reports.fleet_report import fleet_report_for
from deploy.reports.node_report import DriverNote, DriverNotes
from deploy.foundations.run_state import per_run
fleet_report_for(host.state, os.environ["FLEET_REPORT"])
per_run(host.state, DriverNotes)[host.name] = DriverNote(no_gpu=os.environ["NO_GPU"] == "1", reboot_required=True)
"""


@pytest.mark.parametrize("no_gpu, status", [("0", 3), ("1", 0)], ids=["gpu", "no-gpu"])
def test_pyinfra_s_cli_exits_3_when_a_gpu_node_awaits_its_reboot_stand_in_driver_report(tmp_path, no_gpu, status):
    deploy_file = tmp_path / "driver_report.py"
    deploy_file.write_text(STAND_IN_DRIVER_REPORT)
    fleet = tmp_path / "fleet.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLEET_REPORT": str(fleet), "NO_GPU": no_gpu}
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "@local", str(deploy_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == status, result.stderr
    assert json.loads(fleet.read_text())["exit_status"] == status
    assert ("awaiting a reboot (exit 3)" in result.stderr) == (status == 3)


# Verify's read on a GPU node whose new driver is installed but not loaded (the run did not reboot),
# the package system's marker naming the driver package.
AWAITING = [*node_lines(gpus=1, dump=containerd_dump()), "reboot_required", "reboot_package nvidia-driver"]


def test_verify_on_a_gpu_node_awaiting_its_reboot_reports_the_failed_steps_without_failing_the_host(tmp_path, caplog):
    _, record, steps, failed = run_verify(tmp_path, AWAITING, driver_packages=("nvidia-driver", "nvidia-smi"))
    assert steps["kernel_module"]["status"] == FAIL and record["ok"] is False  # the report still says it
    assert not failed
    assert "verification failed: kernel_module" in caplog.text and "awaits the node's reboot" in caplog.text


@pytest.mark.parametrize(
    "lines, packages",
    [
        (node_lines(gpus=1, dump=containerd_dump()), ("nvidia-driver",)),  # no reboot pending
        (
            [*node_lines(gpus=1, dump=containerd_dump()), "reboot_required", "reboot_package linux-image-amd64"],
            ("nvidia-driver",),
        ),  # a reboot for another package
        (AWAITING, ()),  # verify alone
    ],
    ids=["no-reboot", "other-package", "no-driver-stage"],
)
def test_verify_fails_the_host_when_no_driver_change_awaits_the_reboot(tmp_path, lines, packages):
    _, _, _, failed = run_verify(tmp_path, lines, driver_packages=packages)
    assert failed


def test_the_verify_step_is_given_the_packages_of_this_run_s_driver_plan(monkeypatch):
    from deploy import stages

    given = []
    monkeypatch.setattr(stages.verification, "verify", lambda settings, packages: given.append(packages))
    (step,) = [step for step in stages.STEPS if step.name == "verify"]
    plan = SimpleNamespace(packages={"nvidia-driver": "535.216.03-1", "nvidia-smi": None})
    step.apply(None, SimpleNamespace(plans={"driver": plan}), None)
    step.apply(None, None, None)  # deploy/verify.py: no driver stage
    assert given == [frozenset({"nvidia-driver", "nvidia-smi"}), frozenset()]
