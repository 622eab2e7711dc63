"""
A driver upgrade reloads the modules instead of rebooting where nothing but the driver's own services
holds /dev/nvidia*: fuser's real table read (tests/fixtures/nvidia/), the decision, the order of the
steps, and the operation as a plan test (module loading never runs here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan import run_plan
from pyinfra.api import deploy

from deploy import driver_updates
from deploy.driver_updates import Holder, ReloadPlan, reload_plan
from deploy.facts.gpu_holders import DeviceHolders
from deploy.operations.driver_reload import reload_driver

pytestmark = pytest.mark.usefixtures("both_modes")

FUSER = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia" / "fuser-v-two-holders.txt"


def fuser_lines() -> list[str]:
    return [line for line in FUSER.read_text().splitlines() if not line.startswith("# ")]


def test_fusers_table_names_each_holder_of_each_device():
    assert driver_updates.parse_fuser(fuser_lines()) == [
        Holder(pid=954, user="root", command="sleep", device="/tmp/i38f/nvidia0"),
        Holder(pid=956, user="root", command="sleep", device="/tmp/i38f/nvidia0"),
        Holder(pid=954, user="root", command="sleep", device="/tmp/i38f/nvidiactl"),
    ]
    assert driver_updates.parse_fuser(["Specified filename /dev/nvidia9 does not exist.",
                                       "Cannot stat file /proc/1/fd/0: Permission denied"]) == []


def reading(holders=(), modules=("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"), active=(), fuser=True):
    return {"fuser": fuser, "holders": list(holders), "modules": list(modules), "active": list(active)}


def test_nothing_else_holding_the_gpu_reloads_services_stopped_first_modules_users_first():
    plan = reload_plan(reading(
        holders=[Holder(11, "root", "nvidia-persiste", "/dev/nvidia0"), Holder(12, "root", "nv-hostengine", "/dev/nvidiactl")],
        active=["nvidia-persistenced.service", "nvidia-dcgm.service"]))
    assert plan.steps == (
        ("stop", "nvidia-persistenced.service"), ("stop", "nvidia-dcgm.service"),
        ("unload", "nvidia_drm"), ("unload", "nvidia_modeset"), ("unload", "nvidia_uvm"), ("unload", "nvidia"),
        ("load", "nvidia"), ("load", "nvidia_uvm"), ("load", "nvidia_modeset"), ("load", "nvidia_drm"),
        ("start", "nvidia-dcgm.service"), ("start", "nvidia-persistenced.service"))
    assert driver_updates.commands(plan)[:3] == [["systemctl", "stop", "nvidia-persistenced.service"],
                                                 ["systemctl", "stop", "nvidia-dcgm.service"],
                                                 ["modprobe", "-r", "nvidia_drm"]]


def test_a_process_holding_a_device_means_reboot_required_naming_it():
    plan = reload_plan(reading(holders=driver_updates.parse_fuser(fuser_lines())))
    assert plan.steps == ()
    assert plan.line == ("reboot required: sleep (pid 954, root) holds /tmp/i38f/nvidia0; sleep (pid 954, root) holds "
                         "/tmp/i38f/nvidiactl; sleep (pid 956, root) holds /tmp/i38f/nvidia0: stop it (or drain the "
                         "node) and rerun, or reboot")


def test_without_fuser_or_without_a_loaded_module():
    assert reload_plan(reading(fuser=False)).line.startswith("reboot required: fuser (psmisc) is not installed")
    assert reload_plan(reading(modules=())) == ReloadPlan()


def fact_lines(holders: list[str], modules=("nvidia_uvm", "nvidia"), active=("nvidia-persistenced.service",)):
    return ["fuser", *(f"held {line}" for line in holders), *(f"module {m}" for m in modules),
            *(f"active {unit}" for unit in active)]


@deploy("reload")
def reload(load):
    reload_driver(load=load)


def test_the_operation_reloads_in_order_where_nothing_holds_the_gpu():
    plan = run_plan(reload, True, facts=[(DeviceHolders, fact_lines([]))])
    assert [command for command in plan.commands if "command -v fuser" not in command] == [
        "systemctl stop nvidia-persistenced.service", "modprobe -r nvidia_uvm", "modprobe -r nvidia",
        "modprobe nvidia", "modprobe nvidia_uvm", "systemctl start nvidia-persistenced.service"]


@pytest.mark.parametrize("load", [True, False])
def test_the_operation_never_unloads_when_a_process_holds_the_gpu_or_loading_is_off(load):
    holders = fuser_lines() if load else []
    plan = run_plan(reload, load, facts=[(DeviceHolders, fact_lines(holders))])
    assert not plan.matching("modprobe") and not plan.matching("systemctl stop") and not plan.failed
