"""The node report: the table, the JSON, and records of parallel hosts merged into one file."""

from __future__ import annotations

import io
import json
import re

import gevent
import pytest

from deploy.reports.node_report import FAIL, PASS, SKIP, NodeRecord, ReportStore, Step, node_table, report_json


def record(host: str, *statuses: str) -> NodeRecord:
    return NodeRecord(
        host=host,
        gpus=["A100-SXM4-40GB (GPU-36c9561a)"],
        driver="535.216.03",
        toolkit="1.17.8",
        runtime="containerd 1.6.20~ds1",
        steps=[Step(f"step{index}", status, f"reason {index}") for index, status in enumerate(statuses)],
    )


def test_a_step_status_must_be_pass_fail_or_skip():
    with pytest.raises(ValueError, match="not one of"):
        Step("x", "ok", "")


def test_table_shows_summary_then_each_step():
    text = node_table(record("node-1", PASS, SKIP, FAIL))
    lines = text.splitlines()
    assert lines[0].startswith("node-1: FAILED  GPUs: A100-SXM4-40GB (GPU-36c9561a)  driver: 535.216.03")
    assert "toolkit: 1.17.8" in lines[0] and "runtime: containerd 1.6.20~ds1" in lines[0]
    assert [line.split()[:2] for line in lines[1:]] == [["step0", "pass"], ["step1", "skip"], ["step2", "fail"]]


def test_json_has_one_record_per_node_and_an_overall_ok():
    data = report_json([record("b", PASS), record("a", PASS, FAIL)])
    assert [node["host"] for node in data["nodes"]] == ["a", "b"]
    assert data["ok"] is False and data["nodes"][0]["ok"] is False and data["nodes"][1]["ok"] is True
    assert data["nodes"][0]["steps"][1] == {"name": "step1", "status": "fail", "reason": "reason 1"}


def test_parallel_hosts_merge_into_one_file_and_the_table_prints_once(tmp_path):
    path = str(tmp_path / "out" / "report.json")
    store = ReportStore()
    hosts = [f"node-{index:02d}" for index in range(20)]
    # pyinfra runs hosts as gevent greenlets: add records from as many greenlets at once.
    gevent.joinall([gevent.spawn(store.add, path, record(name, PASS)) for name in hosts])
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [node["host"] for node in on_disk["nodes"]] == hosts
    assert list((tmp_path / "out").iterdir()) == [tmp_path / "out" / "report.json"], "no temp files left"
    stream = io.StringIO()
    store.finish(stream)
    store.finish(stream)
    assert stream.getvalue().count("--> GPU node verification (20 nodes)") == 1
    assert f"--> Report written to {tmp_path / 'out' / 'report.json'}" in stream.getvalue()
    # the end of verification writes it for people to read, indented, with every record
    final = (tmp_path / "out" / "report.json").read_text()
    assert (
        final.startswith('{\n  "gpu_node_version": ') and [node["host"] for node in json.loads(final)["nodes"]] == hosts
    )


def test_a_rerun_for_the_same_host_replaces_its_record(tmp_path):
    path = str(tmp_path / "report.json")
    store = ReportStore()
    store.add(path, record("node", FAIL))
    store.add(path, record("node", PASS))
    nodes = json.loads((tmp_path / "report.json").read_text())["nodes"]
    assert len(nodes) == 1 and nodes[0]["ok"] is True


def test_the_driver_fields_show_on_the_summary_line_and_in_the_json():
    datacenter = NodeRecord(
        host="hgx-1",
        gpus=["NVIDIA H100 80GB HBM3 (GPU-5d5ba0d6)"],
        driver="535.216.03",
        kernel_module_type="open",
        persistence="nvidia-persistenced active, mode on 8/8 GPU(s)",
        fabric_manager="inactive",
        cuda="error 802 CUDA_ERROR_SYSTEM_NOT_READY",
        cdi="on, spec current",
        steps=[Step("cuda", FAIL, "Fabric Manager not running")],
    )
    first = node_table(datacenter).splitlines()[0]
    assert first.endswith(
        "module: open  persistence: nvidia-persistenced active, mode on 8/8 GPU(s)  "
        "fabric manager: inactive  CUDA: error 802 CUDA_ERROR_SYSTEM_NOT_READY  CDI: on, spec current"
    )
    (node,) = report_json([datacenter])["nodes"]
    assert (node["kernel_module_type"], node["persistence"], node["fabric_manager"], node["cuda"], node["cdi"]) == (
        "open",
        "nvidia-persistenced active, mode on 8/8 GPU(s)",
        "inactive",
        "error 802 CUDA_ERROR_SYSTEM_NOT_READY",
        "on, spec current",
    )
    # a record without them (verify read none) shows dashes
    assert (
        node_table(record("plain", PASS))
        .splitlines()[0]
        .endswith("module: -  persistence: -  fabric manager: -  CUDA: -  CDI: -")
    )


def test_the_table_escapes_control_characters_a_node_sent():
    """A step's reason holds what a node's tool printed: an escape sequence in it (or in the host,
    step or driver's text) is written escaped, never sent to the terminal (node_text.printable)."""
    text = node_table(
        NodeRecord(
            host="node-\x1b]0;owned\x07",
            driver="535\x9b2K",
            steps=[Step("cuda\r", FAIL, "cuInit: \x1b[2K\rall fine"), Step("gpu_pci", PASS, "1 GPU")],
        )
    )
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", text), text
    lines = text.splitlines()
    assert lines[0].startswith(r"node-\x1b]0;owned\x07: FAILED") and r"driver: 535\x9b2K" in lines[0]
    assert lines[1:] == [r"  cuda\r   fail  cuInit: \x1b[2K\rall fine", "  gpu_pci  pass  1 GPU"]
