"""
GPUDirect RDMA's and the MIG layout's steps through deploy/gpu_node.py on one @fake node (tests/plan.py):
the files each writes, nvidia-peermem loaded only where the driver is and kernel_modules_load allows, an
OFED outside NVIDIA's support named by preflight, and a changed MIG layout applied now, at the next boot,
or refused with "drain required" before any change.
"""

from __future__ import annotations

import logging
import os

import pytest
from plan import DEFAULT, PCI_WITH_GPU, gpu_node, node_lines, run_deploy
from shell_sandbox import Sandbox
from test_driver_updates import Node as SandboxNode
from test_driver_updates import template, with_driver_services  # noqa: F401 - template: the sandbox fixture
from test_read_ahead import digest_lines

from deploy.facts.gpu_holders import DeviceHolders
from deploy.facts.rack import PeermemState
from deploy.facts.units import UnitsEnabled
from deploy.operations.files import digest_read
from deploy.operations.rack import MIG_BUSY_STATUS, mig_apply_command
from deploy.rack import mig, peermem
from deploy.rack.values import mig_layout
from deploy.tasks import mig as mig_task

KERNEL = "5.14.0-427.el9.x86_64"
CONNECTX = "mellanox 0000:29:00.0 0x1021 0x020700 -"
ALONE = {"stages": "driver", "nvidia_driver_install": False, "first_boot_unit": False}


def node(*facts, pci=(*PCI_WITH_GPU, CONNECTX), loaded=None):
    return gpu_node(
        "rocky-9",
        node_survey=node_lines(
            KERNEL, pci=pci, loaded=loaded, built="570.172.08", modules=["nvidia"] if loaded else ()
        ),
        facts=facts,
        unstated=DEFAULT,
    )


def test_auto_on_a_gpu_node_with_a_connectx_nic_writes_the_soft_dependency_and_the_boot_load():
    run = run_deploy(node(), data={**ALONE, "gpudirect_rdma": "auto"})
    assert run.error is None and not run.failed, run.refusal
    names = run.op_names()
    assert f"GPUDirect RDMA | Put {peermem.SOFTDEP_PATH} (nvidia-peermem after the RDMA stack)" in names
    assert f"GPUDirect RDMA | Put {peermem.MODULES_LOAD_PATH} (nvidia-peermem after the RDMA stack)" in names
    assert not run.starting("modprobe")  # kernel_modules_load=false: at the next boot, with the driver


def test_auto_without_a_connectx_nic_leaves_nvidia_peermem_alone():
    run = run_deploy(node(pci=PCI_WITH_GPU), data={**ALONE, "gpudirect_rdma": "auto"})
    assert run.error is None and not [name for name in run.op_names() if "GPUDirect" in name]


def test_with_the_driver_loaded_and_modules_allowed_nvidia_peermem_is_loaded_now():
    run = run_deploy(
        node(loaded="570.172.08"),
        data={**ALONE, "gpudirect_rdma": "true", "kernel_modules_load": True, "stages": "driver"},
    )
    assert run.error is None and not run.failed, run.refusal
    assert "modprobe nvidia_peermem" in run.commands


def test_an_ofed_outside_nvidias_support_is_named_by_preflight_in_one_line(caplog):
    caplog.set_level(logging.WARNING)
    run = run_deploy(
        node((PeermemState, ["ofed MLNX_OFED_LINUX-4.9-7.1.0.0:"])), data={**ALONE, "gpudirect_rdma": "true"}
    )
    assert run.error is None
    assert any("OFED 4.9-7.1.0.0 is older than 5.3-1.0.0.1.43" in record.getMessage() for record in caplog.records)


LAYOUT = '{"name": "inference", "gpus": {"all": {"1g.10gb": 7}}}'
JOB = ["fuser", "holder 4242 - alice /dev/nvidia0 python3"]
PERSISTENCED = [
    "fuser",
    "holder 17 nvidia-persistenced.service root /dev/nvidia0 nvidia-persiste",
    "active nvidia-persistenced.service",
]


def test_a_changed_layout_where_a_job_holds_the_gpu_is_refused_drain_required_before_any_change():
    run = run_deploy(node((DeviceHolders, JOB), loaded="570.172.08"), data={**ALONE, "mig_layout": LAYOUT})
    assert run.failed
    assert run.refusal.startswith(
        "drain required: MIG layout inference changes the GPUs' partitions and python3 "
        "(pid 4242, user alice) holds /dev/nvidia0"
    ), run.refusal
    assert not run.ran("dnf install") and not run.ran("gpu-node-candidate")


def test_a_changed_layout_held_only_by_the_drivers_services_is_written_and_applied_now():
    run = run_deploy(
        node(
            (DeviceHolders, PERSISTENCED), (UnitsEnabled, ["nvidia-persistenced.service enabled"]), loaded="570.172.08"
        ),
        data={**ALONE, "mig_layout": LAYOUT},
    )
    assert run.error is None and not run.failed, run.refusal
    assert "dnf install -y nvidia-mig-manager" in run.commands
    # mig-parted's own check of the candidate config, before it replaces the file
    assert run.ran(
        "nvidia-mig-parted assert --valid-config --config-file "
        f"{mig.CONFIG_PATH}.gpu-node-candidate --selected-config inference"
    )
    assert "MIG layout | Apply MIG layout inference now (nvidia-mig-manager.service)" in run.op_names()
    [apply] = run.ran('systemctl restart "$unit"')
    assert "unit=nvidia-mig-manager.service" in apply and "driver_holders" in apply


def test_without_a_loaded_driver_the_layout_waits_for_the_boot_and_systemd_reads_the_drop_in():
    run = run_deploy(node((DeviceHolders, JOB)), data={**ALONE, "mig_layout": LAYOUT})
    assert run.error is None and not run.failed, run.refusal
    assert not [name for name in run.op_names() if "Apply MIG layout" in name]
    assert "MIG layout | Reload systemd's units (nvidia-mig-manager.service's drop-in changed)" in run.op_names()
    assert "systemctl enable nvidia-mig-manager.service" in run.commands or run.ran("enable nvidia-mig-manager")


def test_a_layout_in_place_changes_no_file_and_applies_nothing():
    layout_files = mig_task.wanted_files(mig_layout(LAYOUT), {})
    in_place = [(digest_read(path), digest_lines(text)) for path, text in layout_files.items()]
    run = run_deploy(
        node(
            *in_place, (DeviceHolders, JOB), (UnitsEnabled, ["nvidia-mig-manager.service enabled"]), loaded="570.172.08"
        ),
        data={**ALONE, "mig_layout": LAYOUT},
    )
    assert run.error is None and not run.failed, run.refusal
    assert not [name for name in run.op_names() if "Put /etc/nvidia-mig-manager" in name or "Apply" in name]


def test_neither_step_runs_without_its_setting():
    run = run_deploy(node(), data=ALONE)
    assert run.error is None
    assert not [name for name in run.op_names() if name.startswith(("GPUDirect RDMA", "MIG layout"))]


# --- the change's own holder check, run for real in a scratch root with STAND-IN fuser and systemctl
# (tests/unit/test_driver_updates.py's) ---------------------------------------------------------------


@pytest.fixture
def sandbox_node(template, tmp_path):  # noqa: F811 - the fixture
    if os.geteuid() != 0:
        pytest.skip("the scratch root is a chroot, and device nodes need root")
    return SandboxNode(Sandbox.clone(template, tmp_path / "root"))


def run_apply(sandbox_node) -> tuple[int, str]:
    wrapped = (
        "(\n"
        + mig_apply_command(mig_layout(LAYOUT)).get_raw_value()
        + "\n) > /standin/out 2>&1; echo $? > /standin/status"
    )
    ran = sandbox_node.box.run(wrapped)
    assert ran.status == 0 and not ran.syntax_error, (ran.stderr, ran.syntax_error)
    out = (sandbox_node.box.root / "standin/out").read_text().strip().splitlines()
    return int((sandbox_node.box.root / "standin/status").read_text()), out[-1] if out else ""


def test_the_change_restarts_the_service_where_only_the_drivers_services_hold_the_gpu(sandbox_node):
    with_driver_services(sandbox_node)
    sandbox_node.service("nvidia-mig-manager.service", 0)
    status, _ = run_apply(sandbox_node)
    assert status == 0
    assert sandbox_node.log()[-2:] == ["systemctl daemon-reload", "systemctl restart nvidia-mig-manager.service"]


def test_a_job_that_holds_the_gpu_at_the_change_stops_it_in_one_line_nothing_restarted(sandbox_node):
    with_driver_services(sandbox_node)
    sandbox_node.process(4242, "python3", "nvidia0", uid=65534)
    status, line = run_apply(sandbox_node)
    assert status == MIG_BUSY_STATUS
    assert line == mig.busy_line(mig_layout(LAYOUT), "python3 (pid 4242, user nobody) holds /dev/nvidia0")
    assert not [entry for entry in sandbox_node.log() if "restart" in entry or "daemon-reload" in entry]
    (sandbox_node.box.root / "usr/bin/fuser").unlink()
    status, line = run_apply(sandbox_node)
    assert status == MIG_BUSY_STATUS and line == mig.busy_line(mig_layout(LAYOUT), mig.UNKNOWN)
