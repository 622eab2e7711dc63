"""
A DRA node's host side (gpu_allocator=dra): the prerequisites deploy/dra.py decides, each one line,
and deploy/gpu_node.py on stated @fake hosts: refused in preflight before any change, IMEX masked
as dra_imex says, and nothing of it on a device-plugin node; deploy/verify.py reporting each
prerequisite as a step of the node report (and the fleet report's row).
"""

from __future__ import annotations

import json

import pytest

from plan import DEFAULT, GPU_NODE, PCI_WITH_GPU, gpu_node, node_lines, run_deploy

from deploy.engines.containerd.installations import plain_target
from deploy.operations.containerd import target_read
from deploy.dra import (
    cdi_prerequisite, driver_prerequisite, driver_root_prerequisite, imex_action, imex_prerequisite,
)
from deploy.facts.dra import DraNodeState
from deploy.fleet_report import fleet_rows

pytestmark = pytest.mark.usefixtures("both_modes")

CONTAINERD = target_read(plain_target("/etc/containerd/config.toml"))
CONTAINERD_2 = "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd/v2 2.1.9 x"
CONTAINERD_16 = "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd 1.6.20~ds1 x"
ROOT_WITH_NVML = ["root", "nvml usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"]
IMEX_RUNNING = ["imex_enabled enabled", "imex_active active"]
CHANGING = ("systemctl mask", "apt-get", "mkdir ", "mv ")
DRA = {"stages": "runtimes", "gpu_allocator": "dra"}
VERIFY = GPU_NODE.replace("gpu_node.py", "verify.py")


def driver(**given):
    arguments = {"installs": False, "branch": None, "pinned": None, "installed": None, "compute_domains": False}
    return driver_prerequisite(**{**arguments, **given})


@pytest.mark.parametrize("given, status", [
    ({"installs": True, "branch": "550"}, "fail"),
    ({"installs": True, "branch": "565"}, "pass"),
    ({"installs": True}, "fail"),  # the distribution's default branch is unknown
    ({"installed": "560.35.03"}, "fail"),
    ({"installed": "570.86.15"}, "pass"),
    ({"installed": None}, "fail"),
    ({"installs": True, "branch": "570", "compute_domains": True}, "fail"),  # which 570 release?
    ({"installs": True, "pinned": "570.158.01-1", "compute_domains": True}, "pass"),
    ({"installs": True, "pinned": "570.86.15-1", "compute_domains": True}, "fail"),
    ({"installs": True, "branch": "575", "compute_domains": True}, "pass"),
    ({"installed": "570.124.06", "compute_domains": True}, "fail"),
])
def test_the_driver_branch_a_dra_node_needs(given, status):
    found = driver(**given)
    assert found.status == status, found.line
    assert "\n" not in found.line


def test_a_refused_driver_names_the_minimum_and_what_it_read():
    found = driver(installs=True, branch="550")
    assert found.line == "gpu_allocator=dra needs a driver of 565 or newer: nvidia_driver_branch=550 is older"


def test_cdi_in_containerd():
    assert cdi_prerequisite(cdi_on=True, containerd_version="2.1.9").status == "pass"
    refused = cdi_prerequisite(cdi_on=False, containerd_version="1.6.20~ds1")
    assert refused.status == "fail" and "containerd 1.6.20~ds1 has none" in refused.line
    assert cdi_prerequisite(cdi_on=None, containerd_version=None).status == "unknown"


def test_the_driver_root():
    missing = driver_root_prerequisite("/run/nvidia/driver", DraNodeState.default(), driver_expected=True)
    assert missing.status == "fail" and "nvidia_driver_root=/run/nvidia/driver is no folder" in missing.line
    empty = {**DraNodeState.default(), "root_exists": True}
    assert driver_root_prerequisite("/", empty, driver_expected=False).status == "unknown"
    assert driver_root_prerequisite("/", empty, driver_expected=True).status == "fail"
    found = {**empty, "nvml": "usr/lib64/libnvidia-ml.so.1"}
    assert driver_root_prerequisite("/", found, driver_expected=True).status == "pass"


@pytest.mark.parametrize("compute_domains, mode, unit, action, after", [
    (False, "driver-managed", ("enabled", "active"), None, "pass"),  # no ComputeDomains: left alone
    (True, "driver-managed", ("not-found", "inactive"), None, "pass"),  # no IMEX on this node
    (True, "driver-managed", ("enabled", "active"), "mask", "fail"),
    (True, "driver-managed", ("masked", "inactive"), None, "pass"),
    (True, "host-managed", ("enabled", "active"), None, "pass"),
    (True, "host-managed", ("disabled", "inactive"), None, "fail"),
])
def test_imex_as_dra_imex_says(compute_domains, mode, unit, action, after):
    state = {"enabled": unit[0], "active": unit[1]}
    assert imex_action(compute_domains, mode, state) == action
    assert imex_prerequisite(compute_domains, mode, state).status == after
    planned = imex_prerequisite(compute_domains, mode, state, planned=True)
    assert planned.status == ("pass" if action == "mask" else after)


def dra_node(containerd: str, dra_state: list[str], built: str | None = "570.158.01"):
    return gpu_node(node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, built=built),
                    facts=[(CONTAINERD, containerd),
                           ((DraNodeState, {"driver_root": "/"}), dra_state)], unstated=DEFAULT)


def test_an_old_driver_is_refused_in_preflight_before_any_change():
    run = run_deploy(dra_node(CONTAINERD_2, ROOT_WITH_NVML, built="550.54.15"), data=DRA)
    assert run.refusal == ("gpu_allocator=dra needs a driver of 565 or newer: the installed driver 550.54.15 "
                           "is older"), run.refusal
    assert not [command for command in run.commands if command.startswith(CHANGING)]


def test_containerd_1_6_and_a_missing_driver_root_are_refused_together():
    run = run_deploy(dra_node(CONTAINERD_16, []), data={**DRA, "nvidia_driver_root": "/run/nvidia/driver"})
    assert "containerd 1.6.20~ds1 has none" in run.refusal
    assert "nvidia_driver_root=/run/nvidia/driver is no folder" in run.refusal
    assert not [command for command in run.commands if command.startswith(CHANGING)]


def test_driver_managed_imex_masks_the_hosts_unit_and_records_it_first():
    run = run_deploy(dra_node(CONTAINERD_2, ROOT_WITH_NVML + IMEX_RUNNING),
                     data={**DRA, "dra_compute_domains": True, "dra_driver_install_method": "helm"})
    assert run.error is None, run.refusal
    [mask] = run.ran("systemctl mask --now nvidia-imex.service")
    commands = run.commands
    assert any("gn_record_units nvidia-imex.service" in command
               for command in commands[:commands.index(mask)]), "the unit's state is recorded before the mask"


@pytest.mark.parametrize("data", [
    {"dra_compute_domains": True, "dra_driver_install_method": "helm", "dra_imex": "host-managed"},
    {},  # no ComputeDomains
])
def test_imex_is_left_alone_host_managed_or_without_compute_domains(data):
    run = run_deploy(dra_node(CONTAINERD_2, ROOT_WITH_NVML + IMEX_RUNNING), data={**DRA, **data})
    assert run.error is None, run.refusal
    assert not run.ran("systemctl mask")


def test_a_masked_imex_unit_changes_nothing():
    run = run_deploy(dra_node(CONTAINERD_2, ROOT_WITH_NVML + ["imex_enabled masked", "imex_active inactive"]),
                     data={**DRA, "dra_compute_domains": True, "dra_driver_install_method": "helm"})
    assert run.error is None and not run.ran("systemctl mask")


def test_a_device_plugin_node_reads_nothing_of_dra_and_is_not_refused_for_an_old_driver():
    """The default node group: its driver 550 is fine, and no command reads the DRA state."""
    run = run_deploy(dra_node(CONTAINERD_2, [], built="550.54.15"), data={"stages": "runtimes"})
    assert run.error is None, run.refusal
    assert not run.ran("imex_enabled") and not run.ran("nvidia-imex")


# --- verify: each prerequisite a step of the node's report ---------------------------------------

def verify_dra_node(tmp_path, containerd: str, dra_state: list[str], built: str | None = "570.158.01", **data):
    """deploy/verify.py on a DRA node: what the report at ``verify_report_path`` says of it, and the plan.
    Verify's own reads print nothing (their defaults: no GPU, nothing installed)."""
    report = tmp_path / "report.json"
    settings = {**DRA, "verify_report_path": str(report), "fleet_report_path": str(tmp_path / "fleet.json"), **data}
    plan = run_deploy(dra_node(containerd, dra_state, built), data=settings, deploy_file=VERIFY)
    [record] = json.loads(report.read_text())["nodes"]
    return plan, record, {step["name"]: step for step in record["steps"] if step["name"].startswith("dra_")}


def test_verify_reports_each_dra_prerequisite_as_a_step_and_passes_a_node_that_has_them(tmp_path):
    plan, record, steps = verify_dra_node(tmp_path, CONTAINERD_2, ROOT_WITH_NVML)
    assert {name: step["status"] for name, step in steps.items()} == {
        "dra_driver": "pass", "dra_cdi": "pass", "dra_driver_root": "pass", "dra_imex": "pass"}
    assert steps["dra_driver"]["reason"] == "driver: the installed driver 570.158.01, at least 565"
    assert steps["dra_cdi"]["reason"] == "CDI on in containerd 2.1.9"
    assert not plan.failed_with("dra_"), plan.refusal
    (row,) = fleet_rows(plan.state)
    assert "dra_" not in " ".join(row.verify["failed_steps"])


def test_verify_fails_the_host_naming_each_dra_prerequisite_the_node_lacks(tmp_path):
    plan, record, steps = verify_dra_node(tmp_path, CONTAINERD_16, ["root"], built="550.54.15",
                                          dra_compute_domains=True, dra_driver_install_method="helm")
    assert {name: step["status"] for name, step in steps.items()} == {
        "dra_driver": "fail", "dra_cdi": "fail", "dra_driver_root": "fail", "dra_imex": "pass"}
    assert steps["dra_driver"]["reason"] == ("gpu_allocator=dra needs a driver of 570.158.01 or newer "
                                             "(dra_compute_domains): the installed driver 550.54.15 is older")
    assert "containerd 1.6.20~ds1 has none" in steps["dra_cdi"]["reason"]
    assert record["ok"] is False
    [line] = plan.failed_with("verification failed")
    assert "dra_driver, dra_cdi, dra_driver_root" in line
    (row,) = fleet_rows(plan.state)
    assert {"dra_driver", "dra_cdi", "dra_driver_root"} <= set(row.verify["failed_steps"])


def test_verify_after_the_run_fails_a_dra_node_without_containerd(tmp_path):
    """Preflight leaves CDI to verify where the run installs containerd; verify has nothing to wait for."""
    _, _, steps = verify_dra_node(tmp_path, "", ROOT_WITH_NVML)
    assert steps["dra_cdi"]["status"] == "fail"
    assert "no containerd is installed" in steps["dra_cdi"]["reason"]


def test_verify_of_a_device_plugin_node_has_no_dra_step(tmp_path):
    """deploy/verify.py runs the steps a node's settings want: nothing of DRA is read on this one."""
    report = tmp_path / "report.json"
    plan = run_deploy(dra_node(CONTAINERD_2, []), deploy_file=VERIFY,
                      data={"verify_report_path": str(report), "fleet_report_path": str(tmp_path / "fleet.json")})
    [record] = json.loads(report.read_text())["nodes"]
    assert record["steps"] and not [step for step in record["steps"] if step["name"].startswith("dra_")]
    assert not plan.ran("imex_enabled")
