"""
Verify's steps of the rack's parts (deploy/verification/rack.py), pure: from the readings
deploy/facts/rack.py makes, each step passes, skips or fails with one line that names what to do.
"""

from __future__ import annotations

from pathlib import Path

from deploy.rack.imex import Member
from deploy.rack.values import mig_layout
from deploy.verification.rack import imex_step, mig_step, peermem_step

UP = (Path(__file__).resolve().parents[1] / "fixtures" / "imex" / "ctl-N-up.txt").read_text().splitlines()
MEMBERS = (Member("gpu1", "10.20.0.11"), Member("gpu2", "10.20.0.12"), Member("gpu3", "10.20.0.13"))
NODES = "10.20.0.11\n10.20.0.12\n10.20.0.13\n"


def imex_reading(**changes) -> dict:
    return {
        "enabled": "enabled",
        "active": "active",
        "module": True,
        "channel": True,
        "nodes_config": NODES,
        "ctl_status": 0,
        "ctl": UP,
        **changes,
    }


def test_an_up_domain_with_every_member_ready_passes():
    step = imex_step("rack-a", MEMBERS, imex_reading())
    assert (step.name, step.status) == ("imex_domain", "pass")
    assert step.reason == "IMEX domain rack-a UP: 3/3 members READY (10.20.0.11, 10.20.0.12, 10.20.0.13)"


def test_a_member_that_is_down_is_named_with_its_host():
    lines = [
        line.replace("10.20.0.13      - READY", "10.20.0.13      - UNAVAILABLE").replace(
            "Domain State: UP", "Domain State: DEGRADED"
        )
        for line in UP
    ]
    step = imex_step("rack-a", MEMBERS, imex_reading(ctl=lines))
    assert step.status == "fail"
    assert step.reason == "IMEX domain rack-a is DEGRADED: gpu3 (10.20.0.13) UNAVAILABLE (nvidia-imex-ctl -N)"


def test_a_file_that_does_not_list_the_domain_fails_before_the_daemon_is_asked():
    step = imex_step("rack-a", MEMBERS, imex_reading(nodes_config="10.20.0.11\n"))
    assert step.status == "fail" and "does not list the 3 members of IMEX domain rack-a" in step.reason


def test_the_daemon_stopped_fails_with_a_gpu_and_skips_without_a_driver():
    assert imex_step("rack-a", MEMBERS, imex_reading(active="failed")).reason == (
        "nvidia-imex.service is failed: systemctl start nvidia-imex.service"
    )
    skipped = imex_step("rack-a", MEMBERS, imex_reading(active="inactive", module=False))
    assert skipped.status == "skip" and "IMEX runs with the driver" in skipped.reason


def test_no_channel_with_the_driver_loaded_fails_naming_the_device():
    step = imex_step("rack-a", MEMBERS, imex_reading(channel=False))
    assert step.status == "fail" and "/dev/nvidia-caps-imex-channels/channel0 does not exist" in step.reason


def test_an_unreachable_daemon_is_named_with_what_nvidia_imex_ctl_said():
    step = imex_step("rack-a", MEMBERS, imex_reading(ctl_status=1, ctl=["connection refused", ""]))
    assert step.reason == ("nvidia-imex-ctl -N (exit 1) named no member of IMEX domain rack-a: connection refused")


def peermem_reading(**changes) -> dict:
    return {
        "loaded": ["nvidia", "nvidia_peermem", "ib_core", "mlx5_ib"],
        "ofed": "OFED-internal-25.04-0.6.1:",
        "softdep": True,
        "built": {"nvidia-peermem": 1757000000, "ib_core": 1756000000},
        **changes,
    }


def test_nvidia_peermem_loaded_after_doca_ofed_passes_naming_the_stack():
    step = peermem_step(peermem_reading(), 570)
    assert (step.name, step.status) == ("gpudirect_rdma", "pass")
    assert step.reason == "nvidia_peermem loaded after OFED 25.04-0.6.1 (ib_core, mlx5_ib)"


def test_peermem_built_before_the_ib_core_it_loads_against_is_named():
    step = peermem_step(
        peermem_reading(
            loaded=["nvidia", "ib_core", "mlx5_ib"], built={"nvidia-peermem": 1756000000, "ib_core": 1757000000}
        ),
        570,
    )
    assert step.status == "fail" and "nvidia-peermem was built before the ib_core of OFED 25.04-0.6.1" in step.reason


def test_an_ofed_outside_nvidias_support_is_one_line_and_a_missing_stack_names_its_modules():
    old = peermem_step(peermem_reading(ofed="MLNX_OFED_LINUX-4.9-7.1.0.0:"), 550)
    assert old.status == "fail" and old.reason.startswith("OFED 4.9-7.1.0.0 is older than 5.3-1.0.0.1.43")
    inbox = peermem_step(peermem_reading(ofed=None, loaded=["nvidia", "ib_core"]), 570)
    assert inbox.reason == (
        "the RDMA stack nvidia-peermem needs is not loaded (mlx5_ib of the inbox RDMA stack): load "
        "it, then modprobe nvidia-peermem"
    )
    unloaded = peermem_step(peermem_reading(loaded=["nvidia", "ib_core", "mlx5_ib"]), 570)
    assert unloaded.status == "fail" and unloaded.reason.startswith("nvidia_peermem is not loaded")
    assert peermem_step(peermem_reading(loaded=[]), 570).status == "skip"
    assert peermem_step(peermem_reading(softdep=False), 570).reason.startswith(
        "/etc/modprobe.d/gpu-node-peermem.conf is missing"
    )


LAYOUT = mig_layout({"name": "inference", "gpus": {"all": {"1g.10gb": 7}}})


def mig_reading(**changes) -> dict:
    return {
        "enabled": "enabled",
        "active": "active",
        "module": True,
        "assert_status": 0,
        "assert": ["Selected MIG configuration currently applied"],
        **changes,
    }


def test_the_layout_mig_parted_asserts_passes_and_one_it_does_not_names_its_answer():
    assert mig_step(LAYOUT, mig_reading()).reason == "MIG layout inference applied (nvidia-mig-parted assert)"
    failed = mig_step(
        LAYOUT,
        {
            **mig_reading(assert_status=1),
            "assert": ["Error: Assertion failure: selected configuration not currently applied"],
        },
    )
    assert failed.status == "fail"
    assert failed.reason.startswith(
        "MIG layout inference is not applied (Error: Assertion failure: selected configuration not currently applied): "
        "systemctl restart nvidia-mig-manager.service"
    )


def test_the_service_missing_or_disabled_fails_and_no_driver_skips_until_the_boot():
    assert mig_step(LAYOUT, mig_reading(enabled="not-found")).status == "fail"
    assert "systemctl enable nvidia-mig-manager.service" in mig_step(LAYOUT, mig_reading(enabled="disabled")).reason
    skipped = mig_step(LAYOUT, mig_reading(module=False))
    assert skipped.status == "skip" and "at the next boot" in skipped.reason
