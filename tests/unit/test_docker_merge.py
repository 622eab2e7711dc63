"""daemon.json merge: fixture files in, fixture files out; strict parsing; the Python-side schema check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.facts.docker import DockerState, parse_docker_version
from deploy.runtimes.docker.daemon_json import (
    DaemonConfigError,
    check_schema,
    merge_daemon_config,
    parse_daemon_json,
    render_daemon_json,
)
from deploy.runtimes.wiring import RuntimeWiring

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker" / "merge"
CASES = sorted(path.name for path in FIXTURES.iterdir() if path.is_dir())


def case(name: str):
    directory = FIXTURES / name
    wiring_file = directory / "wiring.json"
    wiring = RuntimeWiring(**json.loads(wiring_file.read_text())) if wiring_file.exists() else RuntimeWiring()
    source = (directory / "input.json").read_text() if (directory / "input.json").exists() else None
    return source, (directory / "expected.json").read_text(), wiring


@pytest.mark.parametrize("name", CASES)
def test_merge_renders_the_golden_file_and_a_second_merge_changes_nothing(name):
    source, expected, wiring = case(name)
    existing = parse_daemon_json(source, "daemon.json") if source is not None else {}
    merged = merge_daemon_config(existing, wiring)
    assert render_daemon_json(merged.config) == expected
    again = merge_daemon_config(parse_daemon_json(expected, "daemon.json"), wiring)
    assert not again.changed
    check_schema(merged.config, "daemon.json")


@pytest.mark.parametrize("name", CASES)
def test_every_existing_key_keeps_its_value_and_place(name):
    source, expected, wiring = case(name)
    existing = parse_daemon_json(source or "", "daemon.json")
    result = json.loads(expected)
    touched = {"runtimes", "default-runtime", "exec-opts", "features"}
    assert [key for key in result if key in existing] == list(existing)
    for key, value in existing.items():
        if key not in touched:
            assert result[key] == value
    assert result["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}
    assert result["default-runtime"] == ("nvidia" if wiring.make_default else "runc")
    assert result["exec-opts"].count("native.cgroupdriver=systemd") == 1
    assert not any(opt == "native.cgroupdriver=cgroupfs" for opt in result["exec-opts"])


def test_many_keys_keeps_other_runtimes_and_feature_flags():
    _, expected, _ = case("many-keys")
    result = json.loads(expected)
    assert result["runtimes"]["runsc"] == {"path": "/usr/local/bin/runsc", "runtimeArgs": ["--platform=systrap"]}
    assert result["features"] == {"buildkit": True}
    assert result["exec-opts"] == ["native.umask=normal", "native.cgroupdriver=systemd"]
    _, with_cdi, _ = case("cgroupfs-replaced-cdi")
    assert json.loads(with_cdi)["features"] == {"buildkit": True, "containerd-snapshotter": False, "cdi": True}


def test_rendering_is_two_space_json_with_a_trailing_newline():
    text = render_daemon_json({"a": {"b": [1]}, "é": "<&>"})
    assert text == '{\n  "a": {\n    "b": [\n      1\n    ]\n  },\n  "é": "<&>"\n}\n'


def test_a_file_that_has_everything_is_not_changed_even_when_formatted_differently():
    compact = json.dumps(json.loads(case("already-wired")[1]))
    assert not merge_daemon_config(parse_daemon_json(compact, "daemon.json"), RuntimeWiring()).changed


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            '{"log-driver": "json-file",\n "bridge": none}',
            r"daemon.json is not valid JSON: Expecting value: line 2 column 12",
        ),
        ('{"a": 1, "a": 2}', "daemon.json is not valid JSON: duplicate key 'a'"),
        ('{"a": NaN}', "daemon.json is not valid JSON: NaN is not JSON"),
        ('["runtimes"]', "daemon.json is not a JSON object: it holds a list at the top level"),
    ],
)
def test_bad_files_are_refused_with_position(text, expected):
    with pytest.raises(DaemonConfigError) as error:
        parse_daemon_json(text, "daemon.json")
    assert str(error.value).startswith(expected)


@pytest.mark.parametrize(
    "config, problem",
    [
        ({"exec-opts": "native.cgroupdriver=systemd"}, "exec-opts must be a list of strings"),
        ({"iptables": "false"}, "iptables must be true or false"),
        ({"runtimes": {"nvidia": {"path": 1}}}, "runtimes.nvidia must be an object with a string path"),
        ({"default-runtime": "crun"}, "default-runtime 'crun' is not a configured runtime"),
        ({"features": {"cdi": "yes"}}, "features.cdi must be true or false"),
        ({"exec-opts": ["native.cgroupdriver=systemd", "native.cgroupdriver=cgroupfs"]}, "cgroup driver twice"),
    ],
)
def test_schema_check_for_dockerd_without_validate(config, problem):
    with pytest.raises(DaemonConfigError, match=problem):
        check_schema(config, "daemon.json")


def test_merge_refuses_a_runtimes_value_that_is_not_an_object():
    with pytest.raises(DaemonConfigError, match="runtimes must be an object"):
        merge_daemon_config({"runtimes": []}, RuntimeWiring())


@pytest.mark.parametrize(
    "line, version, major",
    [
        ("Docker version 20.10.24+dfsg1, build 5d6db84", "20.10.24+dfsg1", 20),
        ("Docker version 26.1.5+dfsg1, build a72d7cd", "26.1.5+dfsg1", 26),
        ("Docker version 27.3.1, build ce12230", "27.3.1", 27),
        ("garbage", None, None),
    ],
)
def test_docker_version(line, version, major):
    assert parse_docker_version(line) == {"version": version, "major": major}


def test_docker_state_fact_output():
    encoded = "eyJicmlkZ2UiOiAibm9uZSJ9Cg=="  # {"bridge": "none"}\n
    state = DockerState().process(
        [
            "dockerd /usr/sbin/dockerd",
            "version Docker version 26.1.5+dfsg1, build a72d7cd",
            "validate",
            f"config {encoded}",
        ]
    )
    assert state == {
        "dockerd": "/usr/sbin/dockerd",
        "version": "26.1.5+dfsg1",
        "major": 26,
        "can_validate": True,
        "config": '{"bridge": "none"}\n',
        "unit": None,
        "environment_files": {},
        "containers": None,
    }
    assert DockerState().process(["dockerd"]) == DockerState.default()
