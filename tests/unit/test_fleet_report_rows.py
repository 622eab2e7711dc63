"""The fleet report's table, JSON file and page from rows, and the line each failed operation failed with (the
e2e test on real nodes: tests/e2e/test_fleet_report.py; the page in a browser: test_fleet_report_page.py)."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

from html_dom import DomTree
from plan import Node, Output, run_pyinfra
from pyinfra.api import Inventory, deploy
from pyinfra.api.deploy import add_deploy
from pyinfra.operations import server

from deploy.operations import failure
from deploy.reports.fleet_report import (
    CHANGED,
    CONVERGED,
    FAILED,
    FleetReport,
    FleetRow,
    fleet_html,
    fleet_rows,
    fleet_table,
    html_path,
    write_json,
)
from deploy.reports.node_report import FAIL, PASS, SKIP, NodeRecord, Step, verify_report_store

ROWS = [
    FleetRow(
        "node-a", CONVERGED, no_gpu=True, reboot_required=False, verify={PASS: 5, FAIL: 0, SKIP: 6, "failed_steps": []}
    ),
    FleetRow(
        "node-b",
        CHANGED,
        changed_operations=["containerd | Wire the nvidia runtime"],
        no_gpu=True,
        reboot_required=False,
        verify={PASS: 5, FAIL: 0, SKIP: 6, "failed_steps": []},
    ),
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
        FleetRow(
            "hgx-1",
            FAILED,
            verify={PASS: 9, FAIL: 2, SKIP: 5, "failed_steps": ["fabric_manager", "cuda"]},
            kernel_module_type="open",
            persistence="nvidia-persistenced active, mode on 8/8 GPU(s)",
            fabric_manager="not installed",
            cuda="error 802 CUDA_ERROR_SYSTEM_NOT_READY",
            cdi="on, spec current",
        ),
        FleetRow(
            "pcie-1",
            CONVERGED,
            verify={PASS: 12, FAIL: 0, SKIP: 4, "failed_steps": []},
            kernel_module_type="proprietary",
            persistence="nvidia-persistenced active, mode on 2/2 GPU(s)",
            fabric_manager="not needed",
            cuda="ok, 2 device(s), CUDA 12.2",
            cdi="off",
        ),
        FleetRow("node-c", FAILED, failed_operations=["containerd | Wire the nvidia runtime"]),
    ]
    lines = fleet_table(rows).splitlines()
    start = lines.index("--> Driver (verify):")
    assert lines[start + 1].split() == ["node", "module", "persistence", "fabric", "manager", "CUDA", "CDI"]
    assert lines[start + 2].split() == [
        "hgx-1",
        "open",
        "nvidia-persistenced",
        "active,",
        "mode",
        "on",
        "8/8",
        "GPU(s)",
        "not",
        "installed",
        "error",
        "802",
        "CUDA_ERROR_SYSTEM_NOT_READY",
        "on,",
        "spec",
        "current",
    ]
    assert lines[start + 3].split()[:2] == ["pcie-1", "proprietary"]
    assert lines[start + 3].endswith("not needed      ok, 2 device(s), CUDA 12.2             off")
    assert len(lines) == start + 4, "node-c was not verified: no driver row"
    nodes = json.loads(write_json(tmp_path / "fleet.json", rows).read_text())["nodes"]
    assert nodes[0]["fabric_manager"] == "not installed" and nodes[1]["cuda"] == "ok, 2 device(s), CUDA 12.2"
    assert (
        nodes[2]["kernel_module_type"],
        nodes[2]["persistence"],
        nodes[2]["fabric_manager"],
        nodes[2]["cuda"],
        nodes[2]["cdi"],
    ) == (None, None, None, None, None)


def test_no_driver_table_when_verify_ran_nowhere():
    assert "--> Driver (verify):" not in fleet_table([ROWS[2]])


# A host's failure line is text from the host: markup and quotes in it must reach the page as text.
HOSTILE_LINE = """config.toml line 3: "</span><script>document.title='ran'</script>' & <b>bold</b>"""


@deploy("Fail one way or another")
def _fail_by_host():
    from pyinfra import host

    # The same operations on every host (pyinfra's API orders them by their place on each host)
    if host.name == "@fake/refused":
        failure.fail(name="Check the config", message=HOSTILE_LINE)
    else:
        server.shell(name="Check the config", commands=["check-config"])
    server.shell(name="Install the packages", commands=["apt-get install -y some-package"])


def test_each_failed_operation_carries_the_line_its_host_failed_with(tmp_path):
    """The project's refusal (failure.fail) and a shell command's own error output: both reach the
    row, the table, the JSON and the page."""
    quick = {"fake_delay": 0, "fake_delay_jitter": 0}
    inventory = Inventory(([("@fake/refused", quick), ("@fake/apt-broken", quick), ("@fake/fine", quick)], {}))
    apt_error = Output(
        stdout=["Reading package lists..."], stderr=["E: Unable to locate package some-package", "  "], success=False
    )
    nodes = {
        "@fake/refused": Node(),
        "@fake/apt-broken": Node(commands={"apt-get install": apt_error}),
        "@fake/fine": Node(commands={"apt-get install": "ok"}),
    }
    state, error = run_pyinfra(inventory, lambda state: add_deploy(state, _fail_by_host), nodes=nodes)
    assert error is None, error

    rows = {row.host: row for row in fleet_rows(state)}
    assert rows["@fake/refused"].failures() == [("Fail one way or another | Check the config", HOSTILE_LINE)]
    assert rows["@fake/apt-broken"].failures() == [
        ("Fail one way or another | Install the packages", "E: Unable to locate package some-package")
    ]
    assert rows["@fake/fine"].status == CHANGED and rows["@fake/fine"].failures() == []

    table = fleet_table(list(rows.values()))
    assert (
        "@fake/apt-broken failed in: Fail one way or another | Install the packages: "
        "E: Unable to locate package some-package"
    ) in table

    report = FleetReport()
    report.path = str(tmp_path / "fleet.json")
    out = io.StringIO()
    report.finish(state, stream=out)
    nodes_json = {node["host"]: node for node in json.loads((tmp_path / "fleet.json").read_text())["nodes"]}
    assert nodes_json["@fake/refused"]["failure_lines"] == [HOSTILE_LINE]
    assert nodes_json["@fake/fine"]["failure_lines"] == []
    assert f"--> Fleet report page: {tmp_path / 'fleet.html'}" in out.getvalue()
    page = DomTree((tmp_path / "fleet.html").read_text()).root
    rows_read = page.one("table", id="fleet").one("tbody").find("tr")
    assert [row.attrs["data-host"] for row in rows_read] == ["@fake/apt-broken", "@fake/refused", "@fake/fine"], (
        "failures first, then by name"
    )
    assert rows_read[1].one("span", **{"class": "line"}).text() == HOSTILE_LINE
    assert not page.find("script") and not page.find("b")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fleet.html", "fleet.json"], "no temporary file left"
    assert [stat.S_IMODE(path.stat().st_mode) for path in sorted(tmp_path.iterdir())] == [0o600, 0o600], (
        "readable by the operator only: a failure line can quote a host's config"
    )


def test_the_page_goes_beside_the_json_never_over_it():
    assert html_path("/var/log/gpu-node/fleet.json") == Path("/var/log/gpu-node/fleet.html")
    assert html_path("reports/run.fleet.json") == Path("reports/run.fleet.html")
    assert html_path("fleet") == Path("fleet.html")
    assert html_path("fleet.html") == Path("fleet.html.html")


def test_the_page_escapes_host_names_in_text_and_attributes():
    host = "node-\"a' x='1'<i>"
    page = DomTree(fleet_html([FleetRow(host, FAILED, failed_operations=["op <1>"], failure_lines=[""])])).root
    (row,) = page.one("table", id="fleet").one("tbody").find("tr")
    assert row.attrs == {"class": "failed", "data-host": host}
    assert row.one("td", **{"class": "host"}).text() == host and not page.find("i")
    assert row.one("span", **{"class": "operation"}).text() == "op <1>"
    assert row.one("span", **{"class": "line"}).text() == "(no line kept: see the run output)"


@deploy("Verify")
def _verified():
    """A verify record for each host, as verify's operation stores it (deploy/verification/steps.py node_record)."""
    from pyinfra import host

    verify_report_store(host.state).add(
        "verify.json",
        NodeRecord(
            host=host.name,
            driver="550.54.15",
            runtime="containerd 1.7.24",
            kernel_module_type="open",
            persistence="nvidia-persistenced active, mode on 8/8 GPU(s)",
            fabric_manager="active",
            cuda="ok, 8 device(s), CUDA 12.4",
            cdi="on, spec current",
            steps=[Step("gpu_pci", PASS, "8 GPUs")],
        ),
    )
    server.shell(name="Read the node", commands=["true"])


def test_a_verified_nodes_row_carries_what_verify_found_in_the_table_and_the_json(tmp_path, monkeypatch):
    """The row's summary is the verify record's (one declaration, NodeSummary): every field reaches
    the row and the fleet JSON."""
    monkeypatch.chdir(tmp_path)
    quick = {"fake_delay": 0, "fake_delay_jitter": 0}
    state, error = run_pyinfra(
        Inventory(([("@fake/hgx", quick)], {})),
        lambda state: add_deploy(state, _verified),
        nodes={"@fake/hgx": Node(commands={"true": ""})},
    )
    assert error is None, error
    (row,) = fleet_rows(state)
    expected = {
        "runtime": "containerd 1.7.24",
        "kernel_module_type": "open",
        "persistence": "nvidia-persistenced active, mode on 8/8 GPU(s)",
        "fabric_manager": "active",
        "cuda": "ok, 8 device(s), CUDA 12.4",
        "cdi": "on, spec current",
    }
    assert {name: getattr(row, name) for name in expected} == expected
    assert row.verify == {PASS: 1, FAIL: 0, SKIP: 0, "failed_steps": []}
    (node,) = json.loads(write_json(tmp_path / "fleet.json", [row]).read_text())["nodes"]
    assert node["host"] == "@fake/hgx" and {name: node[name] for name in expected} == expected
