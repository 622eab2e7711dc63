"""What a bake (deploy/bake.py) runs in an image root, and with which settings."""

from __future__ import annotations

from plan import settings_for

from deploy import bake
from deploy.stages import steps_for
from deploy.tasks.preflight import access_refusal


def test_an_image_root_runs_what_an_image_holds_and_says_each_stage_it_skips():
    said = []
    kept = bake.image_steps(steps_for(settings_for(container_runtimes="containerd,docker")), said.append)
    assert [stage.name for stage in kept] == ["kernel", "driver", "toolkit", "first boot", "driver report"]
    assert [line.split(" skipped")[0] for line in said] == [
        "bake: containerd", "bake: docker", "bake: cdi", "bake: device links", "bake: verify"]


def test_no_stage_loads_modules_or_reboots_the_builder_but_the_first_boot_unit_keeps_the_sites_values():
    settings = settings_for(kernel_modules_load=True, reboot_allowed=True)
    kernel = bake.step_settings(settings, "kernel")
    assert kernel.kernel_modules_load is False and kernel.reboot_allowed is False
    assert bake.step_settings(settings, "first boot").kernel_modules_load is True


def test_an_image_root_without_a_running_systemd_is_not_refused_a_node_is():
    access = {"kernel": "Linux", "uid": 0, "user": "root", "systemd": False, "init": None, "managers": ["apt"]}
    assert access_refusal(access, image_root=True) is None
    assert "systemd is not running as PID 1" in access_refusal(access)
