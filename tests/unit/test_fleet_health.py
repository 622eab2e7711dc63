"""
The fleet view shows the nodes' health (deploy/fleet/from_reports.py, deploy/reports/health_table.py):
each node's own health report (deploy/health/check.py's health.json) per node and per GPU in the
table, the JSON and the page, in the folder mode and over SSH; a node whose last report is older
than health_silent_after is silent; health does not change a row's result nor the exit status. A
health report is untrusted input as a node report is (tests/hostile_reports.py).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pytest
from hostile_reports import (
    HEALTH_WRONG_TYPES,
    RAW_CONTROL,
    XID_79,
    case_id,
    evil_health_report,
    health_report,
    passing_report,
    with_value,
)
from plan import Node, run_inventory
from pyinfra.api import Inventory
from pyinfra.api.connect import disconnect_all
from standin_health_node import PCIE, stand_in_node, xid_message
from test_fleet_from_reports import REPO, reports_folder_output

from deploy.facts.reports import MAX_NODE_REPORTS, NodeReports
from deploy.fleet import from_reports as fleet_from_reports
from deploy.health import check
from deploy.reports.formats import HealthReportFormat

NOW = datetime.now(timezone.utc).replace(microsecond=0)
FLEET_SCHEMA = json.loads((REPO / "deploy" / "schemas" / "fleet-report.schema.json").read_text())
HEALTH_SCHEMA = json.loads((REPO / "deploy" / "schemas" / "health-report.schema.json").read_text())


def ago(minutes: int) -> str:
    return (NOW - timedelta(minutes=minutes)).isoformat(timespec="seconds")


def fleet_folder(tmp_path: Path) -> Path:
    """gpu-a healthy, gpu-b unhealthy (Xid 79), gpu-c's last report an hour old, gpu-d a health report
    alone, gpu-e a node report alone."""
    folder = tmp_path / "reports"
    folder.mkdir()
    for host in ("gpu-a", "gpu-b", "gpu-c", "gpu-e"):
        (folder / f"{host}.json").write_text(json.dumps(passing_report(host)))
    for name, report in (
        ("gpu-a-health", health_report("gpu-a", checked_at=ago(1))),
        ("gpu-b-health", health_report("gpu-b", "unhealthy", (XID_79,), gpus=PCIE, checked_at=ago(2))),
        ("gpu-c-health", health_report("gpu-c", checked_at=ago(60))),
        ("gpu-d-health", health_report("gpu-d", checked_at=ago(1))),
    ):
        (folder / f"{name}.json").write_text(json.dumps(report))
    return folder


def folder_mode(folder: Path, tmp_path: Path, capsys, *args: str) -> tuple[int, str, str, dict]:
    out_json = tmp_path / "fleet.json"
    status = fleet_from_reports.main([*args, str(folder), str(out_json)])
    out, err = capsys.readouterr()
    fleet = json.loads(out_json.read_text())
    assert not list(jsonschema.Draft202012Validator(FLEET_SCHEMA).iter_errors(fleet))
    for text in (out, err, out_json.with_suffix(".html").read_text()):
        assert not RAW_CONTROL.search(text)
    return status, out, err, {row["host"]: row for row in fleet["nodes"]}


def test_folder_mode_shows_each_nodes_health_per_node_and_per_gpu_and_a_silent_one(tmp_path, capsys):
    status, out, err, rows = folder_mode(fleet_folder(tmp_path), tmp_path, capsys)
    # health is what the nodes saw since: the run's result is the node reports' (gpu-d keeps none)
    assert (status, err) == (1, "") and "--> Fleet report: 5 nodes: 4 converged, 0 changed, 1 failed" in out
    assert "gpu-d failed in: read its report: no node report in the folder, only its health report" in out
    assert "--> Health (the nodes' own checks): 2 healthy, 1 unhealthy, 1 silent, 1 no report" in out
    health = {row["host"]: row["health"] and row["health"]["status"] for row in rows.values()}
    assert health == {"gpu-a": "healthy", "gpu-b": "unhealthy", "gpu-c": "silent", "gpu-d": "healthy", "gpu-e": None}
    assert rows["gpu-b"]["status"] == "converged"
    lines = [line.strip() for line in out.splitlines()]
    assert next(line for line in lines if line.startswith("gpu-b ") and "unhealthy" in line).endswith(
        "Xid 79 on 0000:17:00.0: GPU fallen off the bus"
    )
    # per GPU: gpu-b's two, the Xid beside the GPU it names
    gpu_lines = [line for line in lines if line.startswith("gpu-b ") and "0000:" in line.split()[1]]
    assert [line.split()[1] for line in gpu_lines] == list(PCIE)
    assert gpu_lines[0].endswith("Xid 79 on 0000:17:00.0: GPU fallen off the bus") and gpu_lines[1].endswith("-")
    page = (tmp_path / "fleet.html").read_text()
    health_section = page[page.index("<h2>Health") :]
    assert (
        health_section.index('data-host="gpu-b"')
        < health_section.index('data-host="gpu-c"')
        < health_section.index('data-host="gpu-a"')
    )  # unhealthy, silent, then healthy
    assert 'id="health-gpus"' in health_section and "Xid 79 on 0000:17:00.0" in health_section


def test_silent_after_is_the_settings_time_span(tmp_path, capsys):
    _, _, _, rows = folder_mode(fleet_folder(tmp_path), tmp_path, capsys, "--silent-after", "2h")
    assert rows["gpu-c"]["health"]["status"] == "healthy"
    with pytest.raises(SystemExit) as exited:
        fleet_from_reports.main(["--silent-after", "soon", str(tmp_path)])
    assert exited.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            "argument --silent-after: 'soon': allowed: a systemd time span such as 1min, 90s or 1h 30min (units s, min, h, "
            "d, w) (see --help)"
        )
    )


def test_a_host_two_health_files_report_is_named_and_neither_is_read(tmp_path, capsys):
    folder = fleet_folder(tmp_path)
    (folder / "forged.json").write_text(json.dumps(health_report("gpu-b", checked_at=ago(0))))
    _, _, err, rows = folder_mode(folder, tmp_path, capsys)
    assert rows["gpu-b"]["health"] is None
    assert err.splitlines() == [
        f"gpu-node: gpu-b is reported by 2 health report files ({folder}/forged.json, "
        f"{folder}/gpu-b-health.json): one node, one file: none of them read"
    ]


@pytest.mark.parametrize(
    ("where", "value"), [pytest.param(where, value, id=case_id(where, value)) for where, value in HEALTH_WRONG_TYPES]
)
def test_a_hostile_health_report_is_one_line_naming_its_file_and_the_schema_refuses_it_too(
    tmp_path, capsys, where, value
):
    folder = fleet_folder(tmp_path)
    hostile = with_value(health_report("gpu-bad"), where, value)
    (folder / "gpu-bad.json").write_text(json.dumps(hostile))
    _, out, err, rows = folder_mode(folder, tmp_path, capsys)
    (line,) = err.splitlines()
    assert line.startswith(f"gpu-node: {folder}/gpu-bad.json: not a gpu-node report: ")
    assert "gpu-bad" not in rows and rows["gpu-b"]["health"]["status"] == "unhealthy"
    assert not jsonschema.Draft202012Validator(HEALTH_SCHEMA).is_valid(hostile)
    assert jsonschema.Draft202012Validator(HEALTH_SCHEMA).is_valid(health_report("gpu-bad"))
    with pytest.raises(ValueError):
        HealthReportFormat.model_validate(hostile)


def test_control_characters_of_a_health_report_are_escaped_in_the_table_the_json_and_the_page(tmp_path, capsys):
    folder = fleet_folder(tmp_path)
    (folder / "evil.json").write_text(json.dumps(evil_health_report()))
    _, out, _, _ = folder_mode(folder, tmp_path, capsys)  # folder_mode asserts no raw control character
    assert r"Xid 79\x1b[2K\rall fine\x1b]0;owned\x07" in out and r"H100\x9b2K\x1b[1A" in out


def test_over_ssh_the_health_json_the_check_wrote_is_read_with_the_nodes_reports_standin_node(tmp_path, capsys):
    """Two stand-in nodes whose health check ran for real (tests/standin_health_node.py), one with an
    Xid 79 in its kernel log; their folders read by the NodeReports fact's own command: their rows
    carry their health, the check's state file is no report, and the folder stays within the fact's
    bound with every report gpu-node writes there."""
    answers = {}
    for name, xid in (("gpu-a", False), ("gpu-b", True)):
        node = stand_in_node(tmp_path / name)
        folder = Path(node.settings.state_path).parent
        if xid:
            node.log_kernel(xid_message(PCIE[1], 79, "GPU has fallen off the bus."))
        state = check.State()
        check.write_json_durably(
            node.settings.report_path, check.health_report(check.read_node(node.settings, node.host, state), state)
        )
        check.write_json_durably(node.settings.state_path, state.as_json())
        for report in ("boot-report.json", "report.json"):
            (folder / report).write_text(json.dumps(passing_report("@local")))
        answers[name] = reports_folder_output(folder)
    assert len(answers["gpu-a"]) == 3 <= MAX_NODE_REPORTS - 2  # with a pull run's fleet-report.json: 4 of 8
    inventory = Inventory(
        ([f"@fake/{name}" for name in answers], {}), override_data={"fleet_report_path": str(tmp_path / "view.json")}
    )
    plan = run_inventory(
        inventory,
        {f"@fake/{name}": Node(facts=[(NodeReports, answer)]) for name, answer in answers.items()},
        str(REPO / "deploy" / "fleet_view.py"),
    )
    assert plan.error is None and not plan.state.failed_hosts
    disconnect_all(plan.state)
    out = capsys.readouterr().out
    assert "--> Health (the nodes' own checks): 1 healthy, 1 unhealthy" in out
    rows = {row["host"]: row for row in json.loads((tmp_path / "view.json").read_text())["nodes"]}
    assert rows["@fake/gpu-b"]["health"]["problems"][0]["line"] == "Xid 79 on 0000:ca:00.0: GPU fallen off the bus"
    assert [gpu["pci"] for gpu in rows["@fake/gpu-a"]["health"]["gpus"]] == list(PCIE)


def test_over_ssh_a_node_whose_health_report_is_older_than_the_setting_is_silent(tmp_path, capsys):
    folder = tmp_path / "gpu-a"
    folder.mkdir()
    (folder / "boot-report.json").write_text(json.dumps(passing_report("gpu-a")))
    (folder / "health.json").write_text(json.dumps(health_report("gpu-a", checked_at=ago(20))))
    answers = reports_folder_output(folder)
    for data, status in (({}, "silent"), ({"health_silent_after": "30min"}, "healthy")):
        inventory = Inventory(
            (["@fake/gpu-a"], {}), override_data={"fleet_report_path": str(tmp_path / "view.json"), **data}
        )
        plan = run_inventory(
            inventory, {"@fake/gpu-a": Node(facts=[(NodeReports, answers)])}, str(REPO / "deploy" / "fleet_view.py")
        )
        disconnect_all(plan.state)
        capsys.readouterr()
        (row,) = json.loads((tmp_path / "view.json").read_text())["nodes"]
        assert row["health"]["status"] == status
