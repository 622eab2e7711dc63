"""
The node and fleet reports' formats, shipped as JSON Schema in the package (deploy/schemas/): the
files are the models' schemas (deploy/reports/formats.py's NodeReportFormat and
FleetReportFormat, the source), every report the code writes is valid against the files (checked by
jsonschema, not by the models), each carries the gpu-node version that wrote it, and the files
refuse the hostile reports the fleet view refuses.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
from hostile_reports import WRONG_TYPES, case_id, evil_report, failing_report, passing_report, with_value
from pyinfra.api.connect import disconnect_all
from test_api import KERNEL_ONLY, call
from test_dra_node import CONTAINERD_16, verify_dra_node
from test_first_boot import boot, node

import deploy
from deploy import __version__
from deploy.fleet import from_reports as fleet_from_reports
from deploy.node.root_files import write_json_durably
from deploy.reports.formats import NodeReportFormat

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("report_schemas", REPO / "scripts" / "report_schemas.py")
report_schemas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_schemas)


def shipped(name: str) -> jsonschema.Validator:
    schema = json.loads((REPO / "deploy" / "schemas" / name).read_text())
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    return validator(schema)


NODE_REPORT, FLEET_REPORT, HEALTH_REPORT = (
    "node-report.schema.json",
    "fleet-report.schema.json",
    "health-report.schema.json",
)


def assert_valid(name: str, path: Path) -> dict:
    report = json.loads(path.read_text())
    errors = [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in shipped(name).iter_errors(report)
    ]
    assert not errors, f"{path}: {errors}"
    assert report["gpu_node_version"] == __version__
    return report


def test_the_shipped_schema_files_are_the_models_schemas():
    assert not report_schemas.stale(), f"out of date: run {report_schemas.COMMAND} and commit the result"
    assert {path.name for path in (REPO / "deploy" / "schemas").glob("*.schema.json")} == {
        NODE_REPORT,
        FLEET_REPORT,
        HEALTH_REPORT,
    }


def test_verify_writes_a_node_report_and_a_fleet_report_valid_against_the_schemas(tmp_path):
    """deploy/verify.py on a node, failed steps and all (a pull run writes its reports as verify does)."""
    plan, _, _ = verify_dra_node(
        tmp_path, CONTAINERD_16, ["root"], built="550.54.15", dra_compute_domains=True, dra_driver_install_method="helm"
    )
    disconnect_all(plan.state)  # the fleet report is written when the last host disconnects
    report = assert_valid(NODE_REPORT, tmp_path / "report.json")
    fleet = assert_valid(FLEET_REPORT, tmp_path / "fleet.json")
    assert report["ok"] is False and fleet["nodes"][0]["verify"]["failed_steps"]


def test_a_deploy_run_writes_a_fleet_report_valid_against_the_schema(tmp_path):
    """deploy/gpu_node.py's run (the package's provision_gpu_node): a node that changed."""
    state, error, _ = call(deploy.provision_gpu_node, tmp_path, **KERNEL_ONLY)
    assert error is None, error
    disconnect_all(state)
    fleet = assert_valid(FLEET_REPORT, tmp_path / "fleet.json")
    assert fleet["counts"]["changed"] == 1 and fleet["nodes"][0]["changed_operations"]


@pytest.mark.parametrize("module", [True, False], ids=["passing", "failing"])
def test_the_first_boot_unit_writes_a_node_report_valid_against_the_schema(module, tmp_path):
    host, _ = node(tmp_path, "pcie-only", module=module)
    path = tmp_path / "boot-report.json"
    write_json_durably(str(path), boot(host)[1].report())
    assert assert_valid(NODE_REPORT, path)["ok"] is module


def test_the_fleet_view_writes_a_fleet_report_valid_against_the_schema(tmp_path, capsys):
    folder = tmp_path / "reports"
    folder.mkdir()
    for name, report in (
        ("a", passing_report("gpu-a")),
        ("b", failing_report("gpu-b")),
        ("c", evil_report()),
        ("d", passing_report("gpu-b")),
    ):  # gpu-b twice: a row of its own words
        (folder / f"{name}.json").write_text(json.dumps(report))
    assert fleet_from_reports.main([str(folder), str(tmp_path / "fleet.json")]) == 1
    fleet = assert_valid(FLEET_REPORT, tmp_path / "fleet.json")
    assert fleet["counts"] == {"converged": 1, "changed": 0, "failed": 2}


@pytest.mark.parametrize(
    ("where", "value"), [pytest.param(where, value, id=case_id(where, value)) for where, value in WRONG_TYPES]
)
def test_the_schema_and_the_model_refuse_the_same_hostile_reports(where, value):
    report = passing_report("gpu-a")
    assert shipped(NODE_REPORT).is_valid(report)
    NodeReportFormat.model_validate(report)
    hostile = with_value(report, where, value)
    assert not shipped(NODE_REPORT).is_valid(hostile)
    with pytest.raises(ValueError):
        NodeReportFormat.model_validate(hostile)
