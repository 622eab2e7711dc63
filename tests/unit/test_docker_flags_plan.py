"""
The Docker stage's plan (pyinfra's @fake connector) when docker.service passes dockerd flags:
the fact's one command carries the unit; a refusal is one `gpu-node:` line and nothing is
installed; a unit the check cannot read is named, never a traceback. And the restart's cost on a
live node: live-restore off, with containers running, is named in one warning.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from plan import assigned, placed_uploads, run_plan, settings_for
from pyinfra.connectors.fake import FakeConnector

from deploy.distros.families import detect_platform
from deploy.node import bake
from deploy.operations.docker import state_read
from deploy.tasks.docker import docker_runtime

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

UNITS = Path(__file__).resolve().parents[1] / "fixtures" / "docker" / "units"
DROP_IN = "/etc/systemd/system/docker.service.d/docker-options.conf"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def debian():
    return detect_platform({"name": "debian", "major": None, "release_meta": {"ID": "debian"}}, "x86_64").family


def plan_for(
    drop_in: str,
    daemon_json: str = '{"bridge": "none"}\n',
    version: str = "20.10.24+dfsg1",
    containers: int | None = None,
    **task,
):
    unit = (
        f"# /lib/systemd/system/docker.service\n{(UNITS / 'packaged/docker.service').read_text()}\n"
        f"# {DROP_IN}\n{drop_in}"
    )
    state = "\n".join(
        [
            "dockerd /usr/sbin/dockerd",
            f"version Docker version {version}, build 1",
            f"unit {b64(unit)}",
            f"envfile {b64('/etc/default/docker')} {b64((UNITS / 'packaged/default-docker').read_text())}",
            *([f"containers {containers}"] if containers is not None else []),
            f"config {b64(daemon_json)}",
        ]
    )
    return run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker"),
        debian(),
        facts=[(state_read("/etc/docker/daemon.json"), state)],
        **task,
    )


def failures(plan) -> list[str]:
    """The problems the host failed with (deploy/operations/failure.py), once it did fail."""
    assert plan.failed or not plan.failures
    return plan.failures


@pytest.fixture
def uploads(monkeypatch) -> dict[str, bytes]:
    """What the plan uploads, by remote path (the fake connector only records commands)."""
    files: dict[str, bytes] = {}

    def put_file(connector, filename_or_io, remote_filename, *args, **kwargs):
        filename_or_io.seek(0)  # as pyinfra's real connectors do (its sha1 check read it)
        files[remote_filename] = filename_or_io.read()
        return True

    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    return files


def test_a_drop_in_passing_the_systemd_cgroup_flag_installs_a_daemon_json_without_exec_opts(uploads):
    plan = plan_for((UNITS / "installer/options-systemd.conf").read_text())
    assert failures(plan) == []
    assert plan.ran("dest=/etc/docker/daemon.json")
    assert json.loads(placed_uploads(plan.commands, uploads)["/etc/docker/daemon.json.gpu-node-candidate"]) == {
        "bridge": "none",
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
        "default-runtime": "nvidia",
    }


def test_a_drop_in_passing_the_cgroupfs_flag_fails_the_host_with_one_line_and_installs_nothing(uploads):
    plan = plan_for((UNITS / "installer/options-cgroupfs.conf").read_text())
    [failure] = failures(plan)
    assert "--exec-opt native.cgroupdriver=cgroupfs" in failure and DROP_IN in failure
    assert not plan.ran("candidate") and uploads == {}


def test_a_daemon_json_that_already_conflicts_is_named():
    plan = plan_for((UNITS / "installer/options-systemd.conf").read_text(), '{"bridge": "none", "iptables": false}\n')
    [failure] = failures(plan)
    assert "/etc/docker/daemon.json sets 'iptables' and --iptables=false" in failure and DROP_IN in failure


def test_config_file_flag_elsewhere_names_the_setting():
    plan = plan_for('[Service]\nEnvironment="DOCKER_OPTS=--config-file=/etc/docker/site.json"\n')
    [failure] = failures(plan)
    assert "dockerd reads /etc/docker/site.json, not /etc/docker/daemon.json" in failure
    assert "docker_daemon_config_path=/etc/docker/site.json" in failure


@pytest.mark.parametrize(
    "drop_in",
    ['[Service]\nEnvironment="DOCKER_OPTS=--debug\n', "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd 'unclosed\n"],
)
def test_unreadable_unit_is_one_line_naming_the_file(drop_in):
    plan = plan_for(drop_in)
    [failure] = failures(plan)
    assert DROP_IN in failure and "No closing quotation" in failure


def plan_26(daemon_json: str):
    """Docker 26 (it has `dockerd --validate`), the packaged unit without drop-ins."""
    unit = f"# /lib/systemd/system/docker.service\n{(UNITS / 'packaged/docker.service').read_text()}"
    state = "\n".join(
        [
            "dockerd /usr/sbin/dockerd",
            "version Docker version 26.1.5+dfsg1, build 411e817",
            "validate",
            f"unit {b64(unit)}",
            f"config {b64(daemon_json)}",
        ]
    )
    return run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker", nvidia_runtime_default="false"),
        debian(),
        facts=[(state_read("/etc/docker/daemon.json"), state)],
    )


def test_docker_26_keeps_a_shim_name_default_runtime_and_validates_with_dockerd(uploads):
    plan = plan_26('{"bridge": "none", "default-runtime": "io.containerd.runsc.v1"}\n')
    assert failures(plan) == []
    assert plan.ran("--validate")
    placed = placed_uploads(plan.commands, uploads)
    assert (
        json.loads(placed["/etc/docker/daemon.json.gpu-node-candidate"])["default-runtime"] == "io.containerd.runsc.v1"
    )


def test_docker_26_unknown_default_runtime_is_refused_though_dockerd_validate_passes_it(uploads):
    # `dockerd --validate` of Docker 23+ says "configuration OK" here; dockerd then fails to start.
    plan = plan_26('{"bridge": "none", "default-runtime": "myshim"}\n')
    [failure] = failures(plan)
    assert "default-runtime 'myshim' is not a configured runtime" in failure
    assert uploads == {}


# --- live-restore: what a dockerd restart does to the containers running ----------------------

SYSTEMD_FLAG = (UNITS / "installer/options-systemd.conf").read_text()
WIRED = (
    '{"bridge": "none", "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}, '
    '"default-runtime": "nvidia"}\n'
)


def live_restore_warnings(caplog) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelname == "WARNING" and "live-restore" in record.getMessage()
    ]


def test_a_restart_with_live_restore_off_and_containers_running_is_named_in_one_warning(caplog):
    plan = plan_for(SYSTEMD_FLAG, containers=3)
    [install] = plan.ran("dest=/etc/docker/daemon.json")
    assert failures(plan) == [] and assigned(install, "unit") == "docker"  # the swap restarts dockerd
    [warning] = live_restore_warnings(caplog)
    assert warning.endswith(
        "/etc/docker/daemon.json: live-restore is off and 3 containers run: the dockerd restart that wires the "
        'nvidia runtime stops them all; to keep them running, set "live-restore": true there and run '
        "`systemctl reload docker` before this run, or drain the node first (drain_before_restart=true)"
    ), warning


def test_only_a_restart_that_stops_running_containers_warns(caplog, monkeypatch):
    """Live-restore on (daemon.json or a flag), no container running, a count not known (no docker CLI,
    dockerd not answering), no restart, or an image root (a bake restarts nothing): no warning; off with
    containers running and a restart (one an interrupted run left due, too): one."""
    off, on = '{"bridge": "none"}\n', '{"bridge": "none", "live-restore": true}\n'
    pending = {"pending_restarts": {"docker": "/etc/docker/daemon.json"}}
    cases = {  # drop-in, daemon.json, containers running, docker_runtime's arguments, an image root
        "off, 2 running": (SYSTEMD_FLAG, off, 2, {}, False),
        "on in daemon.json": (SYSTEMD_FLAG, on, 2, {}, False),
        "on by a flag": (
            SYSTEMD_FLAG.replace("--iptables=false", "--iptables=false --live-restore"),
            off,
            2,
            {},
            False,
        ),
        "off by a flag": (
            SYSTEMD_FLAG.replace("--iptables=false", "--iptables=false --live-restore=false"),
            off,
            2,
            {},
            False,
        ),
        "none running": (SYSTEMD_FLAG, off, 0, {}, False),
        "count unknown": (SYSTEMD_FLAG, off, None, {}, False),
        "wired already": (SYSTEMD_FLAG, WIRED, 2, {}, False),
        "wired, its restart due": (SYSTEMD_FLAG, WIRED, 2, pending, False),
        "an image root": (SYSTEMD_FLAG, off, 2, {}, True),
    }
    warned = {}
    for case, (drop_in, daemon_json, containers, task, image_root) in cases.items():
        caplog.clear()
        monkeypatch.setattr(bake, "is_image_root", lambda connector, image_root=image_root: image_root)
        assert failures(plan_for(drop_in, daemon_json, containers=containers, **task)) == [], case
        warned[case] = len(live_restore_warnings(caplog))
    assert warned == {
        "off, 2 running": 1,
        "on in daemon.json": 0,
        "on by a flag": 0,
        "off by a flag": 1,
        "none running": 0,
        "count unknown": 0,
        "wired already": 0,
        "wired, its restart due": 1,
        "an image root": 0,
    }
