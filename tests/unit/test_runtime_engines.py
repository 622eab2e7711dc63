"""
The runtime-engine contract (deploy/runtimes/engine.py), the same checks over every engine: containerd
and Docker each read their config, wire the NVIDIA runtime in keeping what else the file holds,
render it back, and say what the runtime will run. What "the runtime will run" is made of differs
(containerd's ``config dump``, daemon.json plus dockerd's flags): each case says how the file alone
is run, with no other file or flag overriding it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from deploy.foundations.toml_layout import tomllib
from deploy.node.records import JSON, TOML
from deploy.runtimes.containerd.cri import ContainerdEngine
from deploy.runtimes.docker.daemon_json import DockerEngine, DockerRunning
from deploy.runtimes.engine import ConfigError, Effective, RuntimeEngine, Wired
from deploy.runtimes.wiring import RuntimeWiring

WIRING = RuntimeWiring()


@dataclass(frozen=True)
class Case:
    engine: Any
    source: str
    # A site's config, not wired: a setting of its own (``kept``, which must stay) and runc as default.
    unwired: str
    kept: str
    # The same config with nvidia as its default runtime.
    nvidia_default: str
    malformed: str
    alone: Callable[[str], Any]  # what the runtime runs from this file alone
    values: Callable[[str], dict]  # the file's values, read by the format's own reader


CONTAINERD_UNWIRED = """version = 2
# the site's mirror, kept by every edit
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://mirror.example.internal"]

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
"""

DOCKER_UNWIRED = """{
    "registry-mirrors": ["https://mirror.example.internal"],
    "default-runtime": "runc"
}
"""

CASES = {
    "containerd": Case(
        engine=ContainerdEngine(major=1), source="/etc/containerd/config.toml",
        unwired=CONTAINERD_UNWIRED, kept="# the site's mirror, kept by every edit",
        nvidia_default=CONTAINERD_UNWIRED.replace('"runc"', '"nvidia"'),
        malformed='version = 2\n[plugins."io.containerd.grpc.v1.cri"\n',
        # containerd dumps a version 2 file under the same plugin names the file uses.
        alone=lambda text: text,
        values=tomllib.loads,
    ),
    "docker": Case(
        engine=DockerEngine(), source="/etc/docker/daemon.json",
        unwired=DOCKER_UNWIRED, kept="https://mirror.example.internal",
        nvidia_default=DOCKER_UNWIRED.replace('"runc"', '"nvidia"'),
        malformed='{"default-runtime": "runc",',
        alone=lambda text: DockerRunning(json.loads(text), (), "/etc/docker/daemon.json"),
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


def test_an_unwired_config_is_said_not_to_run_the_nvidia_runtime(case):
    effective = case.engine.effective(case.alone(case.unwired), WIRING)
    assert isinstance(effective, Effective) and effective.where
    assert any("nvidia" in problem for problem in effective.problems), effective


def test_the_wired_config_runs_the_wiring_and_keeps_the_sites_own_setting(case):
    text, _ = wired_text(case, case.unwired)
    assert case.engine.effective(case.alone(text), WIRING).problems == ()
    assert case.kept in text
    assert "https://mirror.example.internal" in json.dumps(case.values(text))


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
