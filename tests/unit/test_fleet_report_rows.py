"""The fleet report's table and JSON file from rows (the e2e test on real nodes: tests/e2e/test_fleet_report.py)."""

from __future__ import annotations

import json

from deploy.fleet_report import CHANGED, CONVERGED, FAILED, FleetRow, fleet_table, write_json
from deploy.report import FAIL, PASS, SKIP

ROWS = [
    FleetRow("node-a", CONVERGED, no_gpu=True, reboot_required=False,
             verify={PASS: 5, FAIL: 0, SKIP: 6, "failed_steps": []}),
    FleetRow("node-b", CHANGED, changed_operations=["containerd | Wire the nvidia runtime"], no_gpu=True,
             reboot_required=False, verify={PASS: 5, FAIL: 0, SKIP: 6, "failed_steps": []}),
    FleetRow("node-c", FAILED, failed_operations=["containerd | Wire the nvidia runtime"]),
]


def test_table_counts_each_result_and_names_where_a_node_failed():
    table = fleet_table(ROWS)
    assert table.splitlines()[0] == "--> Fleet report: 3 nodes: 1 converged, 1 changed, 1 failed"
    assert "node-c failed in: containerd | Wire the nvidia runtime" in table
    assert "5 pass, 0 fail, 6 skip" in table and "not run" in table


def test_json_file_is_written_whole_with_the_counts_and_a_row_per_node(tmp_path):
    path = write_json(tmp_path / "reports" / "fleet.json", ROWS)
    data = json.loads(path.read_text())
    assert data["ok"] is False
    assert data["counts"] == {"converged": 1, "changed": 1, "failed": 1}
    assert [node["host"] for node in data["nodes"]] == ["node-a", "node-b", "node-c"]
    assert data["nodes"][2]["failed_operations"] == ["containerd | Wire the nvidia runtime"]
    assert list(path.parent.iterdir()) == [path]  # no temporary file left beside it


def test_the_driver_table_lists_what_verify_found_on_each_node_it_ran_on(tmp_path):
    rows = [
        FleetRow("hgx-1", FAILED, verify={PASS: 9, FAIL: 2, SKIP: 5, "failed_steps": ["fabric_manager", "cuda"]},
                 module_flavour="open", persistence="nvidia-persistenced active, mode on 8/8 GPU(s)",
                 fabric_manager="not installed", cuda="error 802 CUDA_ERROR_SYSTEM_NOT_READY", cdi="on, spec current"),
        FleetRow("pcie-1", CONVERGED, verify={PASS: 12, FAIL: 0, SKIP: 4, "failed_steps": []},
                 module_flavour="proprietary", persistence="nvidia-persistenced active, mode on 2/2 GPU(s)",
                 fabric_manager="not needed", cuda="ok, 2 device(s), CUDA 12.2", cdi="off"),
        FleetRow("node-c", FAILED, failed_operations=["containerd | Wire the nvidia runtime"]),
    ]
    lines = fleet_table(rows).splitlines()
    start = lines.index("--> Driver (verify):")
    assert lines[start + 1].split() == ["node", "module", "persistence", "fabric", "manager", "CUDA", "CDI"]
    assert lines[start + 2].split() == ["hgx-1", "open", "nvidia-persistenced", "active,", "mode", "on", "8/8",
                                        "GPU(s)", "not", "installed", "error", "802", "CUDA_ERROR_SYSTEM_NOT_READY",
                                        "on,", "spec", "current"]
    assert lines[start + 3].split()[:2] == ["pcie-1", "proprietary"]
    assert lines[start + 3].endswith("not needed      ok, 2 device(s), CUDA 12.2             off")
    assert len(lines) == start + 4, "node-c was not verified: no driver row"
    nodes = json.loads(write_json(tmp_path / "fleet.json", rows).read_text())["nodes"]
    assert nodes[0]["fabric_manager"] == "not installed" and nodes[1]["cuda"] == "ok, 2 device(s), CUDA 12.2"
    assert (nodes[2]["module_flavour"], nodes[2]["persistence"], nodes[2]["fabric_manager"], nodes[2]["cuda"],
            nodes[2]["cdi"]) == (None, None, None, None, None)


def test_no_driver_table_when_verify_ran_nowhere():
    assert "--> Driver (verify):" not in fleet_table([ROWS[2]])
