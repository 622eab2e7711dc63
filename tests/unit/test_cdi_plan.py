"""Plan tests of the CDI stage (deploy/tasks/cdi.py) on pyinfra's @fake connector."""

from __future__ import annotations

import base64

import pytest
from plan import DEFAULT, run_plan, settings_for

from deploy.facts.containerd import config_read
from deploy.operations.cdi import HEADER, state_read
from deploy.operations.runtime_config import WiredRuntime
from deploy.tasks.cdi import cdi

pytestmark = pytest.mark.usefixtures("both_modes")

CONFIG = config_read("/etc/containerd/config.toml", None, "containerd")
# A plain containerd, as its stage hands it to the CDI stage (deploy/stages.py wired_runtimes)
PLAIN = (
    WiredRuntime(
        "containerd",
        CONFIG,
        {
            "paths": [],
            "units": {},
            "generated_versions": {},
            "binary": "/usr/bin/containerd",
            "installation": {"name": "plain", "service": "containerd"},
        },
    ),
)
CONTAINERD = {
    "2.1": "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd/v2 2.1.9 x",
    "1.7": "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd 1.7.24~ds1 x",
    "1.6": "binary_path /usr/bin/containerd\nversion containerd github.com/containerd/containerd 1.6.20~ds1 x",
}
UNIT = "refresh_unit /usr/lib/systemd/system/nvidia-cdi-refresh.path"
STALE_WITH_GPUS = "ctk /usr/bin/nvidia-ctk\ninputs_changed 200\nsmi_exit_code 0\nsmi_gpus 2"
CURRENT = "ctk /usr/bin/nvidia-ctk\ninputs_changed 200\nspec_changed 300"
GENERATE = "/usr/bin/nvidia-ctk cdi generate --output /var/run/cdi/nvidia.yaml"


def plan_for(containerd: str, cdi_state: str, **data):
    return run_plan(
        cdi,
        settings_for(**data),
        PLAIN,
        facts=[(CONFIG, CONTAINERD[containerd]), (state_read(), cdi_state)],
        unstated=DEFAULT,
    )


def test_auto_on_containerd_2_enables_the_refresh_and_generates_the_missing_spec():
    plan = plan_for("2.1", f"{STALE_WITH_GPUS}\n{UNIT}\nrefresh_enabled disabled\nrefresh_active inactive")
    assert plan.ran(GENERATE) and not plan.ran("--driver-root"), plan.commands
    assert plan.ran("systemctl enable --now nvidia-cdi-refresh.path")


def test_another_driver_root_reaches_the_generator_and_the_refresh_service():
    plan = plan_for(
        "1.7",
        f"{STALE_WITH_GPUS}\n{UNIT}\nrefresh_enabled enabled\nrefresh_active active",
        nvidia_driver_root="/run/nvidia/driver",
    )
    assert plan.ran(f"{GENERATE} --driver-root /run/nvidia/driver"), plan.commands
    assert plan.ran("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env")


def test_a_current_spec_and_running_refresh_make_no_operation():
    plan = plan_for("2.1", f"{CURRENT}\n{UNIT}\nrefresh_enabled enabled\nrefresh_active active")
    assert not plan.op_names(), plan.op_names()


def test_auto_on_containerd_1_6_sets_up_no_cdi():
    plan = plan_for("1.6", f"{STALE_WITH_GPUS}\n{UNIT}\nrefresh_enabled disabled\nrefresh_active inactive")
    assert not plan.op_names(), plan.op_names()


def test_no_answering_driver_writes_no_spec_and_does_not_fail():
    plan = plan_for("2.1", "ctk /usr/bin/nvidia-ctk\ninputs_changed 200\nsmi_exit_code 9\nsmi_gpus 0")
    assert not plan.ran("cdi generate") and not plan.failed


def test_cdi_false_turns_off_the_refresh_it_finds_enabled():
    plan = plan_for("2.1", f"{CURRENT}\n{UNIT}\nrefresh_enabled enabled\nrefresh_active active", cdi="false")
    assert plan.ran("systemctl disable --now nvidia-cdi-refresh.path"), plan.commands
    assert not plan.ran("cdi generate")


def test_the_environment_file_it_wrote_goes_when_the_root_is_back_to_slash():
    ours = base64.b64encode((HEADER + "NVIDIA_CTK_DRIVER_ROOT=/run/nvidia/driver\n").encode()).decode()
    plan = plan_for("2.1", f"{CURRENT}\n{UNIT}\nrefresh_enabled enabled\nrefresh_active active\nenv {ours}")
    assert plan.ran("rm -f /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"), plan.commands


def test_a_toolkit_this_run_installs_is_decided_when_the_operation_runs():
    """No nvidia-ctk when the deploy is prepared: the operation is made, and decides at execution."""
    plan = plan_for("2.1", "inputs_changed 200")
    assert "Configure CDI (the spec and its refresh)" in " ".join(plan.op_names())
    assert not plan.ran("cdi generate") and not plan.failed
