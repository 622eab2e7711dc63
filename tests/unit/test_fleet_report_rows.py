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
