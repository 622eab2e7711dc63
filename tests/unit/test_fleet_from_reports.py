"""The fleet view from a folder of node reports (deploy/fleet_from_reports.py): reports the
first-boot program and deploy/report.py wrote, and a file that is not one."""

from __future__ import annotations

import json

from test_first_boot import boot, node

from deploy import fleet_from_reports
from deploy.report import NodeRecord, Step, report_json


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
    controller = report_json([NodeRecord(host="gpu-c", gpus=["0x2331 at 0000:01:00.0"],
                                         steps=[Step("gpu_pci", "pass", "1 GPU")])])
    (folder / "gpu-c.json").write_text(json.dumps(controller))
    (folder / "junk.json").write_text("{not json")

    out_json = tmp_path / "fleet.json"
    assert fleet_from_reports.main([str(folder), str(out_json)]) == 1
    captured = capsys.readouterr()
    assert "--> Fleet report: 3 nodes: 2 converged, 0 changed, 1 failed" in captured.out
    assert "gpu-b failed in: report gpu-b.json: kernel module" in captured.out
    assert captured.err.count("\n") == 1 and "junk.json: not a gpu-node node report" in captured.err
    fleet = json.loads(out_json.read_text())
    assert [row["host"] for row in fleet["nodes"]] == ["gpu-a", "gpu-b", "gpu-c"] and fleet["ok"] is False
    assert (tmp_path / "fleet.html").is_file()
