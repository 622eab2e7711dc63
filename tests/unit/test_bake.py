"""What a bake (deploy/node/bake.py) runs in an image root, and with which settings."""

from __future__ import annotations

import base64

import pytest
from plan import DEFAULT, run_plan, settings_for
from test_containerd_plan import CONFIG, DOCKER, PLAIN_MISSING, PLAIN_PRESENT, family

from deploy.node import bake
from deploy.stages import steps_for
from deploy.tasks.containerd import containerd_runtime
from deploy.tasks.docker import docker_runtime
from deploy.tasks.preflight import access_refusal


def test_an_image_root_runs_what_an_image_holds_and_says_each_stage_it_skips():
    said = []
    kept = bake.image_steps(steps_for(settings_for(container_runtimes="containerd,docker")), said.append)
    assert [stage.name for stage in kept] == [
        "kernel",
        "driver",
        "toolkit",
        "containerd",
        "docker",
        "device links",
        "first boot",
        "health check",
        "driver report",
    ]
    assert [line.split(" skipped")[0] for line in said] == ["bake: cdi", "bake: verify"]


def test_a_bake_of_an_image_whose_pipeline_installs_the_driver_still_gets_the_first_boot_unit_and_the_health_check():
    """The stages kernel and runtimes alone (the driver comes from the image's own pipeline): the
    first-boot unit, which generates the CDI spec the bake skips, and the health check come with it;
    a run of verify or of the kernel stage alone puts no GPU software on a node and installs neither;
    each goes with its switch."""

    def kept(**settings) -> list[str]:
        return [step.name for step in bake.image_steps(steps_for(settings_for(**settings)), lambda line: None)]

    assert kept(stages="kernel,runtimes") == [
        "kernel",
        "containerd",
        "device links",
        "first boot",
        "health check",
        "driver report",
    ]
    assert [step.name for step in steps_for(settings_for(stages="verify"))] == ["verify", "driver report"]
    assert [step.name for step in steps_for(settings_for(stages="kernel"))] == ["kernel", "driver report"]
    assert "first boot" not in kept(stages="kernel,runtimes", first_boot_unit=False)
    assert "health check" not in kept(stages="runtimes", health_check=False)
    assert {"first boot", "health check"} <= set(kept(stages="toolkit"))
    assert {"first boot", "health check"}.isdisjoint(kept(stages="toolkit", nvidia_toolkit_install=False))


def test_no_stage_loads_modules_or_reboots_the_builder_but_the_first_boot_unit_keeps_the_sites_values():
    settings = settings_for(kernel_modules_load=True, reboot_allowed=True)
    kernel = bake.step_settings(settings, "kernel")
    assert kernel.kernel_modules_load is False and kernel.reboot_allowed is False
    assert bake.step_settings(settings, "first boot").kernel_modules_load is True


def test_an_image_root_without_a_running_systemd_is_not_refused_a_node_is():
    access = {"kernel": "Linux", "uid": 0, "user": "root", "systemd": False, "init": None, "managers": ["apt"]}
    assert access_refusal(access, image_root=True) is None
    assert "systemd is not running as PID 1" in access_refusal(access)


@pytest.fixture
def image_root(monkeypatch):
    """The run's host is an image root (pyinfra's @chroot connector; the plan tests' host is @fake)."""
    monkeypatch.setattr(bake, "is_image_root", lambda connector: True)


def installs(plan) -> list[str]:
    """The safe install's scripts (deploy/operations/safe_install.py): each names the unit it restarts."""
    return [command for command in plan.commands if command.startswith("dest=")]


def test_an_image_root_merges_containerds_config_checked_by_its_own_binary_and_restarts_nothing(image_root):
    answer = f"binary_path /usr/bin/containerd\nconfig {base64.b64encode(b'version = 2').decode()}"
    plan = run_plan(containerd_runtime, settings_for(), family("debian"), PLAIN_PRESENT, facts=[(CONFIG, answer)])
    assert not plan.failed, plan.refusal
    assert plan.ran("/usr/bin/containerd --config /etc/containerd/config.toml.gpu-node-check config dump")
    (install,) = installs(plan)
    assert "dest=/etc/containerd/config.toml\n" in install and "\nunit=''\n" in install, install[:300]


def test_an_image_root_merges_daemon_json_checked_by_dockerd_validate_and_restarts_nothing(image_root):
    state = "dockerd /usr/sbin/dockerd\nversion Docker version 20.10.24+dfsg1, build x\nvalidate"
    plan = run_plan(
        docker_runtime, settings_for(container_runtimes="docker"), family("debian"), facts=[(DOCKER, state)]
    )
    assert not plan.failed, plan.refusal
    (install,) = installs(plan)
    assert "set -- /usr/sbin/dockerd --validate --config-file /etc/docker/daemon.json.gpu-node-candidate\n" in install
    assert "\nunit=''\n" in install, install[:300]


def test_containerd_installed_in_an_image_root_is_enabled_by_its_files_not_started(image_root):
    plan = run_plan(containerd_runtime, settings_for(), family("debian"), PLAIN_MISSING, unstated=DEFAULT)
    assert plan.ran("apt-get -y")
    assert plan.starting("systemctl") == ["systemctl --root=/ enable containerd.service"], plan.commands
