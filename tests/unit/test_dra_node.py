"""
A DRA node's host side (gpu_allocator=dra): the prerequisites deploy/k8s/dra.py decides, each one line,
and deploy/gpu_node.py on stated @fake hosts: refused in preflight before any change, IMEX masked
as dra_imex says, and nothing of it on a device-plugin node; deploy/verify.py reporting each
prerequisite as a step of the node report (and the fleet report's row).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan import DEFAULT, GPU_NODE, PCI_WITH_GPU, Output, gpu_node, node_lines, run_deploy

from deploy.driver.reload import Holder
from deploy.facts.dra import DraNodeState
from deploy.facts.nvidia import NodeSurvey
from deploy.k8s.dra import (
    IMEX_UNKNOWN,
    cdi_prerequisite,
    driver_prerequisite,
    driver_root_prerequisite,
    imex_action,
    imex_busy_line,
    imex_prerequisite,
)
from deploy.operations.containerd import target_read
from deploy.operations.dra import imex_mask_command
from deploy.reports.fleet_report import fleet_rows
from deploy.runtimes.containerd.installations import plain_target

pytestmark = pytest.mark.usefixtures("both_modes")

CONTAINERD = target_read(plain_target("/etc/containerd/config.toml"))
CONTAINERD_2 = "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd/v2 2.1.9 x"
CONTAINERD_16 = "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd 1.6.20~ds1 x"
ROOT_WITH_NVML = ["root", "nvml usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"]
IMEX_RUNNING = ["imex_enabled enabled", "imex_active active"]
CHANGING = ("systemctl mask", "apt-get", "mkdir ", "mv ")
DRA = {"stages": "runtimes", "gpu_allocator": "dra"}
VERIFY = GPU_NODE.replace("gpu_node.py", "verify.py")
FACT_CASES = Path(__file__).resolve().parents[1] / "facts" / "dra.DraNodeState"
COMPUTE_DOMAINS = {**DRA, "dra_compute_domains": True, "dra_driver_install_method": "helm"}


def driver(**given):
    arguments = {"installs": False, "branch": None, "pinned": None, "installed": None, "compute_domains": False}
    return driver_prerequisite(**{**arguments, **given})


@pytest.mark.parametrize(
    "given, status",
    [
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
    ],
)
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


@pytest.mark.parametrize(
    "compute_domains, mode, unit, action, after",
    [
        (False, "driver-managed", ("enabled", "active"), None, "pass"),  # no ComputeDomains: left alone
        (True, "driver-managed", ("not-found", "inactive"), None, "pass"),  # no IMEX on this node
        (True, "driver-managed", ("enabled", "active"), "mask", "fail"),
        (True, "driver-managed", ("masked", "inactive"), None, "pass"),
        (True, "host-managed", ("enabled", "active"), None, "pass"),
        (True, "host-managed", ("disabled", "inactive"), None, "fail"),
    ],
)
def test_imex_as_dra_imex_says(compute_domains, mode, unit, action, after):
    state = {**DraNodeState.default()["imex"], "enabled": unit[0], "active": unit[1]}
    assert imex_action(compute_domains, mode, state) == action
    assert imex_prerequisite(compute_domains, mode, state).status == after
    planned = imex_prerequisite(compute_domains, mode, state, planned=True)
    assert planned.status == ("pass" if action == "mask" else after)


JOB = Holder(935, "nobody", "python3", "/dev/nvidia-caps-imex-channels/channel0")
IMEX_OWN = Holder(906, "root", "nvidia-imex", "/dev/nvidia-caps-imex-channels/channel0", unit="nvidia-imex.service")
JOB_LINE = (
    "reboot/drain required: nvidia-imex.service not masked (dra_imex=driver-managed), an IMEX channel is in use: "
    "python3 (pid 935, user nobody) holds /dev/nvidia-caps-imex-channels/channel0: a multi-node job runs on this "
    "node; drain it (drain_before_restart=true) or let the job end, and rerun"
)


@pytest.mark.parametrize(
    "holders, active, unknown, drain, status",
    [
        ([JOB], "active", False, False, "fail"),  # a job's channel: the mask would stop its IMEX daemon
        ([JOB], "active", False, True, "pass"),  # drained first
        ([IMEX_OWN], "active", False, False, "pass"),  # the daemon's own process: stopped by the mask anyway
        ([JOB], "inactive", False, False, "pass"),  # no IMEX daemon runs: masking stops nothing
        ([], "active", True, False, "fail"),  # a channel and no fuser: unknown
        ([], "active", False, False, "pass"),
    ],
)
def test_the_mask_only_where_no_imex_channel_is_in_use_or_after_the_drain(holders, active, unknown, drain, status):
    state = {"enabled": "enabled", "active": active, "holders": holders, "holders_unknown": unknown}
    found = imex_prerequisite(True, "driver-managed", state, planned=True, drain=drain)
    assert found.status == status, found.line
    if holders == [JOB] and status == "fail":
        assert found.line == imex_busy_line(
            "python3 (pid 935, user nobody) holds /dev/nvidia-caps-imex-channels/channel0"
        )
        assert found.line == JOB_LINE
    if drain:
        assert "the node drained first, then masked" in found.line


def fact_output(name: str) -> list[str]:
    return json.loads((FACT_CASES / f"{name}.json").read_text())["output"]


def dra_node(containerd: str, dra_state: list[str], built: str | None = "570.158.01", commands=None):
    return gpu_node(
        node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, built=built),
        facts=[(CONTAINERD, containerd), ((DraNodeState, {"driver_root": "/"}), dra_state)],
        unstated=DEFAULT,
        commands=commands,
    )


def test_an_old_driver_is_refused_in_preflight_before_any_change():
    run = run_deploy(dra_node(CONTAINERD_2, ROOT_WITH_NVML, built="550.54.15"), data=DRA)
    assert run.refusal == (
        "gpu_allocator=dra needs a driver of 565 or newer: the installed driver 550.54.15 is older"
    ), run.refusal
    assert not [command for command in run.commands if command.startswith(CHANGING)]


def test_containerd_1_6_and_a_missing_driver_root_are_refused_together():
    run = run_deploy(dra_node(CONTAINERD_16, []), data={**DRA, "nvidia_driver_root": "/run/nvidia/driver"})
    assert "containerd 1.6.20~ds1 has none" in run.refusal
    assert "nvidia_driver_root=/run/nvidia/driver is no folder" in run.refusal
    assert not [command for command in run.commands if command.startswith(CHANGING)]


@pytest.mark.parametrize("case", ["imex-running-its-own-channel", "host-root-imex-masked"])
def test_driver_managed_imex_masks_the_hosts_unit_in_one_command_checking_the_channels_and_recording_it_first(case):
    output = fact_output(case)
    run = run_deploy(
        dra_node(CONTAINERD_2, output if "masked" not in case else ROOT_WITH_NVML + IMEX_RUNNING), data=COMPUTE_DOMAINS
    )
    assert run.error is None, run.refusal
    [mask] = run.ran("systemctl mask --now nvidia-imex.service")
    assert mask == imex_mask_command().get_raw_value()
    # in that one command: the channels read, the unit's state recorded, then the mask
    assert (
        mask.index("imex_holders |") < mask.index("gn_record_units nvidia-imex.service") < mask.index("systemctl mask")
    )


@pytest.mark.parametrize(
    "case, line",
    [("imex-channel-held-by-a-job", JOB_LINE), ("imex-channel-without-fuser", imex_busy_line(IMEX_UNKNOWN))],
)
def test_a_job_holding_an_imex_channel_is_refused_in_preflight_nothing_masked(case, line):
    """Red before: the mask ran with --now under the job's IMEX channel."""
    run = run_deploy(dra_node(CONTAINERD_2, fact_output(case)), data=COMPUTE_DOMAINS)
    assert run.refusal == line
    assert not [command for command in run.commands if command.startswith(CHANGING) or "systemctl mask" in command]


def test_a_channel_the_node_finds_in_use_at_the_mask_fails_the_host_in_its_one_line():
    """A job that starts after preflight's read: the mask's own command finds it and masks nothing."""
    node = dra_node(
        CONTAINERD_2,
        fact_output("imex-running-its-own-channel"),
        commands={"systemctl mask --now": Output(stderr=[JOB_LINE], success=False)},
    )
    run = run_deploy(node, data=COMPUTE_DOMAINS)
    assert run.failed_with("reboot/drain required") == [JOB_LINE]


@pytest.mark.parametrize(
    "data",
    [
        {"dra_compute_domains": True, "dra_driver_install_method": "helm", "dra_imex": "host-managed"},
        {},  # no ComputeDomains
    ],
)
def test_imex_is_left_alone_host_managed_or_without_compute_domains(data):
    run = run_deploy(dra_node(CONTAINERD_2, ROOT_WITH_NVML + IMEX_RUNNING), data={**DRA, **data})
    assert run.error is None, run.refusal
    assert not run.ran("systemctl mask")


def test_a_masked_imex_unit_changes_nothing():
    run = run_deploy(
        dra_node(CONTAINERD_2, ROOT_WITH_NVML + ["imex_enabled masked", "imex_active inactive"]),
        data={**DRA, "dra_compute_domains": True, "dra_driver_install_method": "helm"},
    )
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
        "dra_driver": "pass",
        "dra_cdi": "pass",
        "dra_driver_root": "pass",
        "dra_imex": "pass",
    }
    assert steps["dra_driver"]["reason"] == "driver: the installed driver 570.158.01, at least 565"
    assert steps["dra_cdi"]["reason"] == "CDI on in containerd 2.1.9"
    assert not plan.failed_with("dra_"), plan.refusal
    (row,) = fleet_rows(plan.state)
    assert "dra_" not in " ".join(row.verify["failed_steps"])


def test_verify_fails_the_host_naming_each_dra_prerequisite_the_node_lacks(tmp_path):
    plan, record, steps = verify_dra_node(
        tmp_path, CONTAINERD_16, ["root"], built="550.54.15", dra_compute_domains=True, dra_driver_install_method="helm"
    )
    assert {name: step["status"] for name, step in steps.items()} == {
        "dra_driver": "fail",
        "dra_cdi": "fail",
        "dra_driver_root": "fail",
        "dra_imex": "pass",
    }
    assert steps["dra_driver"]["reason"] == (
        "gpu_allocator=dra needs a driver of 570.158.01 or newer "
        "(dra_compute_domains): the installed driver 550.54.15 is older"
    )
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
    plan = run_deploy(
        dra_node(CONTAINERD_2, []),
        deploy_file=VERIFY,
        data={"verify_report_path": str(report), "fleet_report_path": str(tmp_path / "fleet.json")},
    )
    [record] = json.loads(report.read_text())["nodes"]
    assert record["steps"] and not [step for step in record["steps"] if step["name"].startswith("dra_")]
    assert not plan.ran("imex_enabled")


@pytest.mark.parametrize(
    "case, drained_for_the_mask", [("imex-channel-held-by-a-job", True), ("imex-running-its-own-channel", False)]
)
def test_with_drain_before_restart_a_job_holding_an_imex_channel_is_drained_first_then_the_mask(
    monkeypatch, caplog, case, drained_for_the_mask
):
    """deploy/gpu_node.py over a GPU node and a control plane (a stand-in cluster answers kubectl,
    tests/unit/test_drain_plan.py): the runtimes stage's containerd restart drains the node first, and
    the mask, where a job holds a channel, calls the drain again right before its one command (drained
    earlier in this run: it says so); uncordoned at the end."""
    import logging

    from test_drain_plan import CP, GPU, NODE, StandInCluster, gpu_host, run_gpu_node

    caplog.set_level(logging.INFO)
    cluster = StandInCluster()
    gpu = gpu_host(
        "version = 3\n",
        NODE,
        (CONTAINERD, CONTAINERD_2),
        (NodeSurvey, node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, built="570.158.01")),
        ((DraNodeState, {"driver_root": "/"}), fact_output(case)),
    )
    run = run_gpu_node(monkeypatch, cluster, data=COMPUTE_DOMAINS, gpu_answers=gpu)
    assert run.error is None and not run.failed, run.error
    assert run.kubectl_verbs() == ["get", "get", "cordon", "drain", "uncordon"]
    assert run.index(CP, " drain ") < run.index(GPU, "systemctl mask --now") < run.index(CP, " uncordon ")
    mask_op = [name for op in run.state.get_op_order() for name in run.state.op_meta[op].names if "Mask" in name]
    assert [("drained first" in name) for name in mask_op] == [drained_for_the_mask]
    assert ("Kubernetes node gpu1 was drained earlier in this run" in caplog.text) is drained_for_the_mask
    assert cluster.nodes[NODE] is False


# --- the mask's one command, for real in a scratch root (stand-in fuser and systemctl) ----------


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from shell_sandbox import build_template

    return build_template(tmp_path_factory.mktemp("sandbox") / "template")


@pytest.fixture
def imex_node(template, tmp_path):
    """A scratch root (tests/shell_sandbox.py) with the stand-in fuser and systemctl of
    tests/unit/test_driver_updates.py, an IMEX channel (the null device's numbers) and a running
    nvidia-imex.service whose main process holds it."""
    import os

    from shell_sandbox import Sandbox
    from test_driver_updates import Node

    if os.geteuid() != 0:
        pytest.skip("the scratch root is a chroot, and device nodes need root")
    node = Node(Sandbox.clone(template, tmp_path / "root"))
    (node.box.root / "dev/nvidia-caps-imex-channels").mkdir()
    os.mknod(node.box.root / "dev/nvidia-caps-imex-channels/channel0", 0o20666, os.makedev(1, 3))
    node.service("nvidia-imex.service", 906)
    node.process(906, "nvidia-imex", "channel0", "/system.slice/nvidia-imex.service")
    return node


def mask_in(node) -> tuple[int, str]:
    """The mask's one command run in the root: (its exit status, its last line on stderr)."""
    ran = node.box.run(imex_mask_command().get_raw_value())
    assert not ran.syntax_error, ran.syntax_error
    return ran.status, (ran.stderr.strip().splitlines() or [""])[-1]


def test_the_nodes_mask_command_masks_nothing_while_a_job_holds_a_channel(imex_node):
    imex_node.process(935, "python3", "channel0", uid=65534)
    assert mask_in(imex_node) == (3, JOB_LINE)
    assert imex_node.log() == [] and not imex_node.box.exists("/var/lib/gpu-node/units")


@pytest.mark.parametrize("job", [False, True])
def test_the_nodes_mask_command_records_then_masks_where_no_channel_is_a_jobs(imex_node, job):
    """Its own process holds the channel; or a job does, while the IMEX daemon does not run."""
    if job:
        imex_node.process(935, "python3", "channel0", uid=65534)
        imex_node.write("standin/units/nvidia-imex.service/active", "inactive\n")
    assert mask_in(imex_node) == (0, "")
    assert imex_node.log() == ["systemctl mask --now nvidia-imex.service"]
    recorded = imex_node.box.root / "var/lib/gpu-node/units/nvidia-imex.service"
    assert recorded.read_text() == ("enabled inactive\n" if job else "enabled active\n")


def test_the_nodes_mask_command_without_fuser_masks_nothing(imex_node):
    (imex_node.box.root / "usr/bin/fuser").unlink()
    status, line = mask_in(imex_node)
    assert status == 3 and line == imex_busy_line(IMEX_UNKNOWN) and imex_node.log() == []
