"""The fleet view from a folder of node reports (deploy/fleet/from_reports.py): reports the
first-boot program and deploy/reports/node_report.py wrote, and a file that is not one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_first_boot import boot, node

from deploy.fleet import from_reports as fleet_from_reports
from deploy.reports.fleet_report import FAILED, FleetRow, write_json
from deploy.reports.node_report import NodeRecord, Step, report_json

REPO = Path(__file__).resolve().parents[2]


def test_a_folder_of_node_reports_becomes_the_fleet_table_json_and_page(tmp_path, capsys):
    folder = tmp_path / "reports"
    folder.mkdir()
    host, _ = node(tmp_path / "good", "pcie-only")
    good = boot(host)[1].report()
    good["nodes"][0]["host"] = "gpu-a"
    (folder / "gpu-a.json").write_text(json.dumps(good))
    host, _ = node(tmp_path / "bad", "pcie-only", module=False)
    bad = boot(host)[1].report()
    bad["nodes"][0]["host"] = "gpu-b"
    (folder / "gpu-b.json").write_text(json.dumps(bad))
    controller = report_json(
        [NodeRecord(host="gpu-c", gpus=["0x2331 at 0000:01:00.0"], steps=[Step("gpu_pci", "pass", "1 GPU")])]
    )
    (folder / "gpu-c.json").write_text(json.dumps(controller))
    (folder / "junk.json").write_text("{not json")

    out_json = tmp_path / "fleet.json"
    assert fleet_from_reports.main([str(folder), str(out_json)]) == 1
    captured = capsys.readouterr()
    assert "--> Fleet report: 3 nodes: 2 converged, 0 changed, 1 failed" in captured.out
    assert "gpu-b failed in: report gpu-b.json: kernel module" in captured.out
    assert captured.err.count("\n") == 1 and "junk.json: not a gpu-node report: not JSON" in captured.err
    fleet = json.loads(out_json.read_text())
    assert [row["host"] for row in fleet["nodes"]] == ["gpu-a", "gpu-b", "gpu-c"] and fleet["ok"] is False
    assert (tmp_path / "fleet.html").is_file()


def reports_folder_output(folder) -> list[str]:
    """What the NodeReports fact's own command prints for ``folder`` (run here, by this machine's sh)."""
    from deploy.facts.reports import NodeReports

    ran = subprocess.run(
        ["sh", "-c", NodeReports().command(folder=str(folder))], capture_output=True, text=True, check=True
    )
    return ran.stdout.splitlines()


def test_the_nodes_own_reports_read_over_ssh_one_command_each_become_the_fleet_table(tmp_path, capsys):
    """deploy/fleet_view.py on three @fake nodes whose NodeReports answer is what the fact's command
    prints over real folders: a node whose newest report passed (its pull run's fleet report beside it
    passed over), one whose boot failed, one that keeps no report; one command per node, the table,
    the JSON and the page; the two nodes that did not pass fail, in one line each, the run goes on."""
    from plan import Node, run_inventory
    from pyinfra.api import Inventory
    from pyinfra.api.connect import disconnect_all

    from deploy.facts.reports import NodeReports

    folders = {}
    for name, module in (("gpu-a", True), ("gpu-b", False)):
        host, _ = node(tmp_path / name, "pcie-only", module=module)
        folder = folders[name] = tmp_path / name / "var-lib-gpu-node"
        folder.mkdir()
        (folder / "boot-report.json").write_text(json.dumps(boot(host)[1].report()))
    # gpu-a: a pull run after the boot, its node report newer, and its fleet report of itself
    newer = report_json(
        [NodeRecord(host="@local", gpus=["0x2331 at 0000:01:00.0"], steps=[Step("gpu_pci", "pass", "1 GPU")])]
    )
    (folders["gpu-a"] / "report.json").write_text(json.dumps(newer))
    os.utime(folders["gpu-a"] / "boot-report.json", (1_000_000, 1_000_000))
    write_json(folders["gpu-a"] / "fleet-report.json", [FleetRow(host="@local", status=FAILED)])
    (folders["gpu-a"] / "records").mkdir()  # not a report: not read
    empty = tmp_path / "gpu-c"
    empty.mkdir()
    answers = {
        "gpu-a": reports_folder_output(folders["gpu-a"]),
        "gpu-b": reports_folder_output(folders["gpu-b"]),
        "gpu-c": reports_folder_output(empty),
    }
    assert [line.split(" ")[0] for line in answers["gpu-a"]] == ["report"] * 3 and answers["gpu-c"] == []

    out_json = tmp_path / "view.json"
    inventory = Inventory(
        ([f"@fake/{name}" for name in answers], {}), override_data={"fleet_report_path": str(out_json)}
    )
    nodes = {f"@fake/{name}": Node(facts=[(NodeReports, answer)]) for name, answer in answers.items()}
    plan = run_inventory(inventory, nodes, str(REPO / "deploy" / "fleet_view.py"))
    assert plan.error is None and sorted(host.name for host in plan.state.failed_hosts) == [
        "@fake/gpu-b",
        "@fake/gpu-c",
    ]
    assert sorted(plan.failures) == [
        "read the node's reports: no node report in /var/lib/gpu-node (neither a first boot nor a pull run wrote one)",
        "report boot-report.json: kernel module",
    ]
    assert sorted(host for host, _ in plan.timeline) == sorted(nodes)  # one command per node, nothing else
    disconnect_all(plan.state)
    out = capsys.readouterr().out
    assert "--> Fleet report: 3 nodes: 1 converged, 0 changed, 2 failed" in out, out
    assert "@fake/gpu-b failed in: report boot-report.json: kernel module" in out
    assert "@fake/gpu-c failed in: read the node's reports: no node report in /var/lib/gpu-node" in out
    fleet = json.loads(out_json.read_text())
    rows = {row["host"]: row for row in fleet["nodes"]}
    assert rows["@fake/gpu-a"]["status"] == "converged" and rows["@fake/gpu-a"]["verify"]["pass"] == 1  # report.json's
    assert (tmp_path / "view.html").is_file()


def test_help_prints_the_usage_and_reads_or_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        fleet_from_reports.main(["--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        out.startswith("usage: ") and "FOLDER [FLEET.json]" in out and "Exit status 0 when every node converged" in out
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--all", "{folder}"], "unrecognized arguments: --all"),
        (["{folder}/missing"], "argument FOLDER: {folder}/missing: no such folder"),
        (["{folder}/gpu-a.json"], "argument FOLDER: {folder}/gpu-a.json: no such folder"),
        ([], "the following arguments are required: FOLDER"),
        (["{folder}", "fleet.json", "more"], "unrecognized arguments: more"),
    ],
    ids=["unknown option", "missing folder", "a file for the folder", "no folder", "one argument too many"],
)
def test_an_unknown_argument_or_a_missing_folder_is_one_line_exit_2(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "gpu-a.json").write_text(json.dumps(report_json([NodeRecord(host="gpu-a")])))
    with pytest.raises(SystemExit) as exited:
        fleet_from_reports.main([arg.format(folder=folder) for arg in argv])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says.format(folder=folder) in err, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["reports"]
