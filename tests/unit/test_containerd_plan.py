"""Plan tests of the containerd and Docker stages for the families (pyinfra's @fake connector)."""

from __future__ import annotations

import base64

import pytest
from plan import DEFAULT, gpu_node, run_deploy, run_plan, settings_for

from deploy.distros.families import detect_platform
from deploy.facts.containerd import config_read
from deploy.operations.docker import state_read
from deploy.tasks.containerd import containerd_runtime
from deploy.tasks.docker import docker_runtime

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

PLAIN_MISSING = {
    "paths": [],
    "units": {},
    "generated_versions": {},
    "binary": None,
    "installation": {"name": "plain", "service": "containerd"},
}
PLAIN_PRESENT = {**PLAIN_MISSING, "binary": "/usr/bin/containerd"}
# The wiring's read of a plain containerd's config, and the Docker stage's of Docker
CONFIG = config_read("/etc/containerd/config.toml", None, "containerd")
DOCKER = state_read("/etc/docker/daemon.json")


def family(distro_id: str):
    return detect_platform({"name": distro_id, "major": None, "release_meta": {"ID": distro_id}}, "x86_64").family


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "distro, install, pinned",
    [
        ("debian", "apt-get -y", "containerd=1.6.20~ds1-1+deb12u1"),
        ("ubuntu", "apt-get -y", "containerd=1.6.20~ds1-1+deb12u1"),
        ("rhel", "dnf install -y", "containerd.io-1.6.20~ds1-1+deb12u1"),
        ("opensuse-leap", "zypper", "containerd=1.6.20~ds1-1+deb12u1"),
    ],
)
def test_missing_containerd_is_installed_pinned_enabled_and_started(distro, install, pinned):
    settings = settings_for(containerd_version="1.6.20~ds1-1+deb12u1")
    # Nothing stated reads as nothing there: no config, no package, no unit (the facts' defaults).
    plan = run_plan(containerd_runtime, settings, family(distro), PLAIN_MISSING, unstated=DEFAULT)
    installs = [command for command in plan.matching(install) if pinned in command]
    assert installs, plan.commands
    assert plan.ran("systemctl enable containerd") or plan.ran("systemctl enable containerd.service")
    assert plan.ran("systemctl start containerd") or plan.ran("systemctl start containerd.service")
    if distro == "rhel":
        assert plan.ran("/etc/yum.repos.d/docker-ce-stable.repo")  # containerd.io comes from Docker's repository


def test_present_containerd_is_used_as_it_is():
    plan = run_plan(containerd_runtime, settings_for(), family("debian"), PLAIN_PRESENT, unstated=DEFAULT)
    assert not plan.ran("apt-get")


def test_missing_containerd_without_install_fails_with_what_to_do():
    plan = run_plan(containerd_runtime, settings_for(containerd_install="false"), family("debian"), PLAIN_MISSING)
    assert plan.failed and plan.failures == [
        "containerd is not installed and containerd_install=false: install containerd, or set containerd_install=true "
        "to install the distribution's package"
    ]
    assert plan.op_names() == ["containerd | Check that containerd is installed"]
    assert not plan.ran("apt-get")


def test_wired_config_is_a_noop_that_runs_no_command_but_the_fact():
    from pathlib import Path

    wired = (
        Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "merge" / "already-wired" / "expected.toml"
    ).read_text()
    dump = (Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "dump-1.6.20-wired.toml").read_text()
    plan = run_plan(
        containerd_runtime,
        settings_for(),
        family("debian"),
        PLAIN_PRESENT,
        facts=[(CONFIG, f"binary_path /usr/bin/containerd\nconfig {b64(wired)}\ndump {b64(dump)}")],
    )
    assert len(plan.commands) == 1 and "base64 -w0" in plan.commands[0], plan.commands
    # Nothing to do: no operation is created at all (a fleet's no-op pays pyinfra's cost per operation).
    assert not [meta for meta in plan.state.op_meta.values() if "Wire the nvidia runtime" in " ".join(meta.names)]


def test_unparsable_config_fails_the_host_with_the_parse_error_and_uploads_nothing():
    plan = run_plan(
        containerd_runtime,
        settings_for(),
        family("debian"),
        PLAIN_PRESENT,
        facts=[(CONFIG, f"binary_path /usr/bin/containerd\nconfig {b64('version = 2 x')}")],
    )
    errors = plan.failed_with("is not valid TOML")
    assert errors and "/etc/containerd/config.toml" in errors[0] and "line 1" in errors[0]
    assert not plan.ran("gpu-node-candidate")


@pytest.mark.parametrize("distro, package", [("debian", " (docker.io)"), ("rhel", "")])
def test_docker_missing_without_install_names_the_setting_and_the_package(distro, package):
    plan = run_plan(
        docker_runtime, settings_for(container_runtimes="docker"), family(distro), facts=[(DOCKER, "dockerd")]
    )
    assert plan.failed and plan.failures == [
        "docker is in container_runtimes but Docker is not installed: install Docker Engine, or set "
        f"docker_install=true to install the distribution's package{package}"
    ]
    assert plan.op_names() == ["Docker | Check that Docker is installed"]
    assert not plan.ran("apt-get") and not plan.ran("dnf")


def test_docker_install_takes_the_distribution_package():
    plan = run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker", docker_install="true"),
        family("debian"),
        facts=[(DOCKER, "dockerd")],
        unstated=DEFAULT,
    )
    assert [command for command in plan.matching("apt-get -y") if "docker.io" in command]


def test_docker_install_on_rhel_says_there_is_no_distribution_package():
    plan = run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker", docker_install="true"),
        family("rhel"),
        facts=[(DOCKER, "dockerd")],
    )
    assert plan.failed and plan.failures == [
        "docker_install=true, but rhel ships no Docker package: install Docker Engine (docker-ce) from Docker's "
        "repository first"
    ]
    assert plan.op_names() == ["Docker | Check that Docker can be installed"]


def test_new_dockerd_validates_the_candidate_itself():
    state = "dockerd /usr/sbin/dockerd\nversion Docker version 26.1.5, build x\nvalidate"
    plan = run_plan(
        docker_runtime, settings_for(container_runtimes="docker"), family("debian"), facts=[(DOCKER, state)]
    )
    # the check's words, the safe install's positional parameters (deploy/shell/safe_install_validate.sh)
    assert plan.ran("set -- /usr/sbin/dockerd --validate --config-file /etc/docker/daemon.json.gpu-node-candidate\n")
    assert plan.ran("systemctl restart")


def _wired_config() -> str:
    from pathlib import Path

    return (
        Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "merge" / "already-wired" / "expected.toml"
    ).read_text()


def test_files_that_look_wired_but_containerd_dumps_otherwise_fail_naming_the_override():
    """The stuck node of issue 14: config.toml wired, containerd's own dump not (another file wins)."""
    from pathlib import Path

    unwired_dump = (Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "default-1.6.20.toml").read_text()
    answer = f"binary_path /usr/bin/containerd\nconfig {b64(_wired_config())}\ndump {b64(unwired_dump)}"
    plan = run_plan(containerd_runtime, settings_for(), family("debian"), PLAIN_PRESENT, facts=[(CONFIG, answer)])
    failed = plan.failed_with("another file containerd reads overrides it")
    assert failed, plan.failures
    assert "/etc/containerd/config.toml holds the nvidia wiring" in failed[0]
    assert "runtimes.nvidia is missing" in failed[0]
    assert not plan.ran("gpu-node-candidate") and not plan.ran("systemctl restart")


def test_candidate_that_containerd_would_not_run_wired_is_never_installed():
    """containerd's dump of the candidate (scripted: the unwired default) decides; nothing is swapped in."""
    from pathlib import Path

    unwired_dump = (Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "default-1.6.20.toml").read_text()
    answer = f"binary_path /usr/bin/containerd\nconfig {b64('version = 2')}"
    plan = run_plan(
        containerd_runtime,
        settings_for(),
        family("debian"),
        PLAIN_PRESENT,
        facts=[(CONFIG, answer)],
        commands={"config dump; status=$?": unwired_dump.splitlines()},
    )
    assert plan.ran("config dump; status=$?")
    assert plan.state.failed_hosts, "the host did not fail"
    assert not plan.ran("gpu-node-candidate") and not plan.ran("systemctl restart")


CONTAINERD_1_6 = "version containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"


def test_cdi_true_on_containerd_1_6_fails_the_host_naming_it_and_writes_nothing():
    answer = f"binary_path /usr/bin/containerd\n{CONTAINERD_1_6}\nconfig {b64('version = 2')}"
    plan = run_plan(
        containerd_runtime, settings_for(cdi="true"), family("debian"), PLAIN_PRESENT, facts=[(CONFIG, answer)]
    )
    assert plan.failed_with("cdi=true, but containerd 1.6.20~ds1 has no CDI"), plan.failures
    assert not plan.ran("gpu-node-candidate") and not plan.ran("systemctl restart")


def test_cdi_true_on_docker_20_fails_the_host_naming_it_and_writes_nothing():
    state = "dockerd /usr/sbin/dockerd\nversion Docker version 20.10.24+dfsg1, build 297e128"
    plan = run_plan(
        docker_runtime, settings_for(container_runtimes="docker", cdi="true"), family("debian"), facts=[(DOCKER, state)]
    )
    assert plan.failed_with("cdi=true, but Docker 20.10.24+dfsg1 has no CDI"), plan.failures
    assert not plan.ran("systemctl restart")


DOCKER_20 = "dockerd /usr/sbin/dockerd\nversion Docker version 20.10.24+dfsg1, build 297e128"


@pytest.mark.parametrize(
    "runtime, read, line",
    [
        (
            "containerd",
            (CONFIG, f"binary_path /usr/bin/containerd\n{CONTAINERD_1_6}\nconfig {b64('version = 2')}"),
            "cdi=true, but containerd 1.6.20~ds1 has no CDI",
        ),
        ("docker", (DOCKER, DOCKER_20), "cdi=true, but Docker 20.10.24+dfsg1 has no CDI"),
    ],
)
def test_through_the_deploy_a_runtime_without_cdi_is_refused_in_preflight_before_the_kernel_stage(runtime, read, line):
    """deploy/gpu_node.py with the kernel and runtimes stages: cdi=true on an installed runtime that has
    no CDI fails the host in preflight, so not even the kernel stage (which runs first) changes anything."""
    run = run_deploy(
        gpu_node("debian-12", facts=[read], unstated=DEFAULT),
        data={"stages": "kernel,runtimes", "cdi": "true", "container_runtimes": runtime},
    )
    assert line in run.refusal, run.failures
    assert [name for name in run.op_names() if not name.startswith(("Preflight", "Refuse this host"))] == []
