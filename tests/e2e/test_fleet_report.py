"""
The fleet report on three real nodes in one pyinfra run: one left as it was (converged), one with
a managed file edited by hand (changed: put back), one with a containerd config.toml that is not
TOML (failed: the file is left byte for byte). The table is the run's last word, the JSON file
holds the same rows, and the page beside it shows them failures first (read in a browser:
tests/unit/test_fleet_report_page.py). A third run poisons that node's config.toml (nested 3,000
deep, which once stopped the whole run with a RecursionError before any report): it fails in one
line, its file as it was, and the other two converge, verify and report. containerd is Debian's, in the
node image (its install is tests/e2e/test_containerd_e2e.py's subject).
"""

from __future__ import annotations

import html
import json
import os
import sys

from harness import REPO, SAFE_DATA, DeployResult, run

from deploy.tasks.kernel import SYSCTL_PATH

STAGES = "kernel,toolkit,runtimes,verify"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
WIRE = f"containerd | Wire the nvidia runtime into {CONTAINERD_CONFIG}"


def deploy_fleet(nodes, data: dict) -> DeployResult:
    """One `pyinfra -y` run over all the nodes, as an operator runs a fleet."""
    args = [sys.executable, "-m", "pyinfra", "-y", ",".join(node.target for node in nodes), "deploy/gpu_node.py"]
    for key, value in {**SAFE_DATA, **data}.items():
        args += ["--data", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPU_NODES", None)
    result = run(args, check=False, cwd=REPO, env=env, timeout=1500)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def test_fleet_report_on_three_nodes_one_converged_one_changed_one_failed(
    start_node, containerd_image, toolkit_repo, tmp_path
):
    nodes = [start_node(image=containerd_image) for _ in range(3)]
    converged, changed, broken = nodes
    report_path = tmp_path / "fleet.json"
    data = {**toolkit_repo.data(), "stages": STAGES, "fleet_report_path": str(report_path)}

    first = deploy_fleet(nodes, data)
    assert first.returncode == 0, first.explain()
    provisioned = json.loads(report_path.read_text())
    assert provisioned["ok"] and provisioned["counts"]["changed"] == 3, provisioned

    changed.write(SYSCTL_PATH, "net.ipv4.ip_forward = 0\n")
    broken.write(CONTAINERD_CONFIG, "this is [not toml\n")
    broken_before = broken.stat(CONTAINERD_CONFIG)

    result = deploy_fleet(nodes, data)
    assert result.returncode != 0, result.explain()
    assert broken.stat(CONTAINERD_CONFIG) == broken_before, "a file the tool cannot edit is left byte for byte"

    report = json.loads(report_path.read_text())
    rows = {row["host"]: row for row in report["nodes"]}
    assert sorted(rows) == sorted(node.target for node in nodes)
    assert report["ok"] is False
    assert report["counts"] == {"converged": 1, "changed": 1, "failed": 1}

    assert rows[converged.target]["status"] == "converged"
    assert rows[converged.target]["changed_operations"] == []
    assert rows[changed.target]["status"] == "changed"
    assert rows[changed.target]["changed_operations"] == ["Kernel prerequisites | Persist the Kubernetes sysctls"]
    assert rows[broken.target]["status"] == "failed"
    assert rows[broken.target]["failed_operations"] == [WIRE]
    (line,) = rows[broken.target]["failure_lines"]
    assert line.startswith(f"{CONTAINERD_CONFIG} is not valid TOML"), line
    # The failed node stopped at the containerd stage: no verification, no driver report.
    assert rows[broken.target]["verify"] is None
    for node in (converged, changed):
        row = rows[node.target]
        assert row["verify"]["fail"] == 0 and row["verify"]["pass"] >= 3, row
        assert row["no_gpu"] is True and row["reboot_required"] is False, row

    # The table is printed after pyinfra's own output, one row per node.
    table = result.stderr[result.stderr.index("--> Fleet report: 3 nodes: 1 converged, 1 changed, 1 failed") :]
    lines = table.splitlines()
    assert lines[1].split() == ["node", "result", "reboot", "required", "no", "GPU", "runtime", "verify"]
    cells = {line.split()[0]: line.split() for line in lines[2:5]}
    assert cells[converged.target][1:4] == ["converged", "no", "yes"]
    assert cells[changed.target][1:4] == ["changed", "no", "yes"]
    assert cells[broken.target][1:] == ["failed", "?", "?", "-", "not", "run"]
    assert cells[converged.target][4:6] == ["containerd", "1.6.20~ds1"]
    assert f"{broken.target} failed in: {WIRE}: {line}" in table
    assert f"--> Fleet report written to {report_path}" in table
    page_path = tmp_path / "fleet.html"
    assert f"--> Fleet report page: {page_path}" in table
    page = page_path.read_text()
    assert (
        page.index(f'data-host="{broken.target}"')
        < page.index(f'data-host="{changed.target}"')
        < page.index(f'data-host="{converged.target}"')
    ), "failed, changed, converged"
    assert line in html.unescape(page)

    broken.write(CONTAINERD_CONFIG, "version = 2\nx = " + "[" * 3000 + "]" * 3000 + "\n")
    poisoned = broken.stat(CONTAINERD_CONFIG)
    third = deploy_fleet(nodes, data)
    assert third.returncode != 0, third.explain()
    assert broken.stat(CONTAINERD_CONFIG) == poisoned, "a file the tool cannot read is left byte for byte"
    assert "Traceback" not in third.output, third.explain()
    [line] = [line for line in third.run_output.splitlines() if "gpu-node: " in line]
    assert broken.target in line and CONTAINERD_CONFIG in line, line
    assert "nests values deeper than gpu-node reads (64 levels)" in line, line
    report = json.loads(report_path.read_text())
    rows = {row["host"]: row for row in report["nodes"]}
    assert report["counts"] == {"converged": 2, "changed": 0, "failed": 1}, report
    assert rows[broken.target]["failed_operations"] == [WIRE]
    for node in (converged, changed):
        row = rows[node.target]
        assert row["status"] == "converged" and row["verify"]["fail"] == 0 and row["verify"]["pass"] >= 3, row
