"""
The runtime-engine contract (deploy/runtimes/engine.py), the same checks over every engine: containerd
and Docker each read their config, wire the NVIDIA runtime in keeping what else the file holds,
render it back, and say what the runtime will run. What "the runtime will run" is judged on is the
real daemon's view, never the engine's own output: containerd's own ``config dump`` of the file
(Debian's containerd 1.6 and 2.1, tests/containerd_releases.py), and for Docker, which dumps nothing,
daemon.json with no flag overriding it, as the real dockerd 26 accepts it (``dockerd --validate``).
Where the real binary cannot be had (Debian's archive out of reach) the case is skipped in one
line; in CI (``CI`` set) it fails instead.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from containerd_releases import config_dump, dockerd, dockerd_validate, release

from deploy.foundations.toml_layout import tomllib
from deploy.node.records import JSON, TOML
from deploy.runtimes.containerd.cri import ContainerdEngine
from deploy.runtimes.docker.daemon_json import DockerEngine, DockerRunning
from deploy.runtimes.engine import ConfigError, Effective, RuntimeEngine, Wired
from deploy.runtimes.wiring import RuntimeWiring

WIRING = RuntimeWiring()


def real_binary(find: Callable[[], Path], what: str) -> Path:
    """The real daemon's binary; a visible skip where it cannot be had, a failure in CI."""
    try:
        return find()
    except (RuntimeError, OSError) as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{what} cannot be had here ({error}): the contract is judged by the real daemon only")


def containerd_check(suite: str) -> Callable[[str], subprocess.CompletedProcess]:
    """``containerd config dump`` of a file holding the text, by Debian ``suite``'s containerd."""

    def check(text: str) -> subprocess.CompletedProcess:
        binary = real_binary(lambda: release(suite).binary, f"Debian {suite}'s containerd")
        with tempfile.TemporaryDirectory(prefix="engine-") as folder:
            config = Path(folder) / "config.toml"
            config.write_text(text)
            return config_dump(binary, config)

    return check


def dockerd_check(text: str) -> subprocess.CompletedProcess:
    """``dockerd --validate`` of a daemon.json holding the text, by Debian trixie's dockerd 26."""
    binary = real_binary(dockerd, "Debian trixie's dockerd")
    with tempfile.TemporaryDirectory(prefix="engine-") as folder:
        config = Path(folder) / "daemon.json"
        config.write_text(text)
        return dockerd_validate(binary, config)


def dumped(check: Callable[[str], subprocess.CompletedProcess]) -> Callable[[str], str]:
    """What containerd runs from the file alone: its own dump, which must succeed."""

    def running(text: str) -> str:
        result = check(text)
        assert result.returncode == 0, f"containerd refuses the file: {result.stderr.strip()[-300:]}"
        return result.stdout

    return running


def docker_running(text: str) -> DockerRunning:
    """What dockerd runs from daemon.json alone (no flag of its unit overrides it): the file as read,
    once the real dockerd accepts it."""
    result = dockerd_check(text)
    assert result.returncode == 0, f"dockerd refuses the file: {(result.stderr or result.stdout).strip()[-300:]}"
    return DockerRunning(json.loads(text), (), "/etc/docker/daemon.json")


@dataclass(frozen=True)
class Case:
    engine: Any
    source: str
    # A site's config, not wired: a setting of its own (``kept``, which must stay) and runc as default.
    unwired: str
    kept: str
    kept_value: str  # a value of the site's setting, which the file's values must still hold
    # The same config with nvidia as its default runtime.
    nvidia_default: str
    malformed: str
    check: Callable[[str], subprocess.CompletedProcess]  # the real daemon's check of a file holding the text
    alone: Callable[[str], Any]  # what the runtime runs from this file alone, as the real daemon says
    values: Callable[[str], dict]  # the file's values, read by the format's own reader


CONTAINERD_UNWIRED = """version = 2
# the site's mirror, kept by every edit
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://mirror.example.internal"]

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
"""

# containerd 2's own format: the CRI plugin split in two, under new names
CONTAINERD_3_UNWIRED = """version = 3
# the site's snapshotter, kept by every edit
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
"""

# A version 2 file written for containerd 2 too: containerd 2 reads its 2.x-named section over the
# migrated 1.x one, key by key (the file's text alone says otherwise: only the daemon's view tells).
CONTAINERD_MIXED_UNWIRED = CONTAINERD_UNWIRED.replace(
    """[plugins."io.containerd.grpc.v1.cri".containerd]""", """[plugins."io.containerd.cri.v1.runtime".containerd]"""
)

DOCKER_UNWIRED = """{
    "registry-mirrors": ["https://mirror.example.internal"],
    "default-runtime": "runc"
}
"""

CASES = {
    "containerd-1.6": Case(
        engine=ContainerdEngine(major=1),
        source="/etc/containerd/config.toml",
        unwired=CONTAINERD_UNWIRED,
        kept="# the site's mirror, kept by every edit",
        kept_value="https://mirror.example.internal",
        nvidia_default=CONTAINERD_UNWIRED.replace('"runc"', '"nvidia"'),
        malformed='version = 2\n[plugins."io.containerd.grpc.v1.cri"\n',
        check=containerd_check("bookworm"),
        alone=dumped(containerd_check("bookworm")),
        values=tomllib.loads,
    ),
    "containerd-2.1": Case(
        engine=ContainerdEngine(major=2),
        source="/etc/containerd/config.toml",
        unwired=CONTAINERD_3_UNWIRED,
        kept="# the site's snapshotter, kept by every edit",
        kept_value="native",
        nvidia_default=CONTAINERD_3_UNWIRED.replace('"runc"', '"nvidia"'),
        malformed='version = 3\n[plugins."io.containerd.cri.v1.runtime"\n',
        check=containerd_check("sid"),
        alone=dumped(containerd_check("sid")),
        values=tomllib.loads,
    ),
    "containerd-2.1-mixed": Case(
        engine=ContainerdEngine(major=2),
        source="/etc/containerd/config.toml",
        unwired=CONTAINERD_MIXED_UNWIRED,
        kept="# the site's mirror, kept by every edit",
        kept_value="https://mirror.example.internal",
        nvidia_default=CONTAINERD_MIXED_UNWIRED.replace('"runc"', '"nvidia"'),
        malformed='version = 2\n[plugins."io.containerd.cri.v1.runtime"\n',
        check=containerd_check("sid"),
        alone=dumped(containerd_check("sid")),
        values=tomllib.loads,
    ),
    "docker": Case(
        engine=DockerEngine(),
        source="/etc/docker/daemon.json",
        unwired=DOCKER_UNWIRED,
        kept="https://mirror.example.internal",
        kept_value="https://mirror.example.internal",
        nvidia_default=DOCKER_UNWIRED.replace('"runc"', '"nvidia"'),
        malformed='{"default-runtime": "runc",',
        check=dockerd_check,
        alone=docker_running,
        values=json.loads,
    ),
}

pytestmark = pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())


def wired_text(case: Case, text: str, wiring: RuntimeWiring = WIRING) -> tuple[str, Wired]:
    engine = case.engine
    wired = engine.wire(engine.parse(text, case.source), wiring, case.source)
    return engine.render(wired.document), wired


def test_the_engine_has_every_method_of_the_contract_with_its_parameters(case):
    for name in ("parse", "wire", "render", "effective"):
        contract = list(inspect.signature(getattr(RuntimeEngine, name)).parameters)[1:]
        assert list(inspect.signature(getattr(case.engine, name)).parameters) == contract, name
    assert case.engine.file_format in (TOML, JSON)


def test_a_config_it_cannot_read_is_refused_in_one_line_naming_the_file(case):
    with pytest.raises(ConfigError) as refused:
        case.engine.parse(case.malformed, case.source)
    assert str(refused.value).startswith(case.source) and "\n" not in str(refused.value)
    # and the real daemon cannot read it either
    assert case.check(case.malformed).returncode != 0


def test_the_real_daemon_reads_the_wired_config_as_the_engine_rendered_it(case):
    text, _ = wired_text(case, case.unwired)
    result = case.check(text)
    assert result.returncode == 0, (result.stderr or result.stdout).strip()[-300:]


def test_an_unwired_config_is_said_not_to_run_the_nvidia_runtime(case):
    effective = case.engine.effective(case.alone(case.unwired), WIRING)
    assert isinstance(effective, Effective) and effective.where
    assert any("nvidia" in problem for problem in effective.problems), effective


def test_the_wired_config_runs_the_wiring_and_keeps_the_sites_own_setting(case):
    text, _ = wired_text(case, case.unwired)
    assert case.engine.effective(case.alone(text), WIRING).problems == ()
    assert case.kept in text
    assert case.kept_value in json.dumps(case.values(text))


def test_wiring_twice_changes_nothing_and_the_rendered_text_reads_back_as_itself(case):
    text, _ = wired_text(case, case.unwired)
    assert wired_text(case, text)[0] == text
    assert case.engine.render(case.engine.parse(text, case.source)) == text


def test_nvidia_as_default_is_set_back_when_not_asked_and_the_change_is_noted(case):
    not_default = replace(WIRING, make_default=False)
    assert case.engine.effective(case.alone(case.nvidia_default), not_default).problems != ()
    text, wired = wired_text(case, case.nvidia_default, not_default)
    assert case.engine.effective(case.alone(text), not_default).problems == ()
    assert any("nvidia_runtime_default=false" in note for note in wired.notes), wired.notes
    # What the runtime runs is held to the wiring asked: the same file fails the default one.
    assert case.engine.effective(case.alone(text), WIRING).problems != ()


def test_the_systemd_cgroup_driver_is_wired_and_checked(case):
    text, _ = wired_text(case, case.unwired)
    assert case.engine.effective(case.alone(text), WIRING).problems == ()
    without = wired_text(case, case.unwired, replace(WIRING, systemd_cgroup=False))[0]
    problems = case.engine.effective(case.alone(without), WIRING).problems
    assert any("systemd" in problem.lower() for problem in problems), problems
