"""
Hostile settings: values with shell metacharacters or control characters are refused by
validation before any command runs, or (paths, where such characters are legitimate) reach
the host only shell-quoted. The plans run on pyinfra's @fake connector (tests/plan.py).
"""

from __future__ import annotations

import base64
import shlex
from pathlib import Path

import pyinfra
import pytest
from plan import QUICK, Node, run_inventory, run_plan, settings_for
from pyinfra.api import Inventory

from deploy.facts.containerd import config_read
from deploy.distros import detect_platform
from deploy.operations.docker import state_read
from deploy.settings import DEFAULTS, SETTING_FIELDS, Settings, SettingsError, parse_settings
from deploy.tasks.containerd import containerd_runtime
from deploy.tasks.docker import docker_runtime

REPO = Path(__file__).resolve().parents[2]
PAYLOAD = "touch /tmp/pwned"
HOSTILE_VALUES = [
    f"535; {PAYLOAD}",
    f"535 && {PAYLOAD}",
    f"535 | {PAYLOAD}",
    f"$({PAYLOAD})",
    f"`{PAYLOAD}`",
    f"x' ; {PAYLOAD}; '",
    f'x" ; {PAYLOAD}; "',
    f"x\n{PAYLOAD}",
    f"x\r{PAYLOAD}",
    f"x\x00{PAYLOAD}",
    f"x > /etc/passwd < {PAYLOAD}",
    f"x\\; {PAYLOAD}",
]
URL_KEYS = ("nvidia_toolkit_repo_url", "nvidia_toolkit_gpgkey_url", "gpushare_inspect_source")
# Keys whose values may hold spaces, quotes and ; (a path): they must be quoted wherever they go.
PATH_KEYS = ("containerd_config_path", "docker_daemon_config_path", "kubeconfig",
             "gpushare_scheduler_config_path", "gpushare_inspect_path", "verify_report_path",
             "fleet_report_path")
CONTROLLER_PATH_KEYS = ("verify_report_path", "fleet_report_path")
SHELL_SPECIAL = set(" \t'\"\\`$;|&<>()\n\r\x00")


@pytest.mark.parametrize("key", sorted(SETTING_FIELDS))
def test_every_setting_refuses_a_second_line(key):
    """A bare str would let anything through: each setting's type refuses a newline."""
    with pytest.raises(SettingsError, match=f"invalid setting {key}=.*allowed"):
        parse_settings({key: f"x\n{PAYLOAD}"})


@pytest.mark.parametrize("key", sorted(SETTING_FIELDS))
@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=range(len(HOSTILE_VALUES)))
def test_a_hostile_value_is_refused_in_one_line_or_comes_out_harmless(key, value):
    try:
        parsed = getattr(parse_settings({key: value}), key)
    except SettingsError as error:
        message = str(error)
        assert "\n" not in message and "\x00" not in message
        assert message.startswith(f"invalid setting {key}=") and "allowed:" in message
        return
    text = str(parsed)
    assert not any(ord(char) < 32 or 127 <= ord(char) < 160 for char in text), (key, parsed)
    if key not in PATH_KEYS:
        assert not SHELL_SPECIAL & set(text), (key, parsed)


@pytest.mark.parametrize("key", URL_KEYS)
@pytest.mark.parametrize("char", list(" \t'\"\\`$;|&<>\n\x7f"))
def test_urls_refuse_characters_a_shell_or_a_source_line_reads(key, char):
    value = f"https://mirror.example/a{char}b"
    with pytest.raises(SettingsError, match=f"invalid setting {key}=.*percent-encode"):
        parse_settings({key: value})


@pytest.mark.parametrize("key", URL_KEYS)
def test_percent_encoded_urls_are_accepted(key):
    value = "https://mirror.example/a%20b%27c/stable?x=1"
    assert getattr(parse_settings({key: value}), key) == value


@pytest.mark.parametrize("key", [key for key in PATH_KEYS if key not in CONTROLLER_PATH_KEYS])
@pytest.mark.parametrize("char", ["\n", "\x00", "\x1b", "\x7f", "\t"])
def test_paths_refuse_control_characters(key, char):
    with pytest.raises(SettingsError, match=f"invalid setting {key}=.*without control characters"):
        parse_settings({key: f"/etc/a{char}b"})


@pytest.mark.parametrize("key", CONTROLLER_PATH_KEYS)
def test_the_report_paths_are_controller_paths_without_control_characters(key):
    assert getattr(parse_settings({key: "reports/node a.json"}), key) == "reports/node a.json"
    for value in ("a\nb.json", "a\x00b", ""):
        with pytest.raises(SettingsError, match=f"{key}=.*without control characters"):
            parse_settings({key: value})


def test_kube_node_names_must_map_to_kubernetes_node_names():
    parsed = parse_settings({"kube_node_names": "@ssh/gpu-1.example=gpu-1.example,gpu2=k8s-gpu-2"})
    assert dict(parsed.kube_node_names) == {"@ssh/gpu-1.example": "gpu-1.example", "gpu2": "k8s-gpu-2"}
    assert parse_settings({"kube_node_names": {"a": "node-a"}}).kube_node_names == (("a", "node-a"),)
    for value in ("a=node;rm", "a=Node A", {"a": "$(id)"}, "a=node\nb"):
        with pytest.raises(SettingsError, match="kube_node_names=.*Kubernetes node name"):
            parse_settings({"kube_node_names": value})


# --- the whole gpu_node.py plan ---------------------------------------------------------------

def run_entry(monkeypatch, data: dict) -> tuple[Exception | None, list[str]]:
    """Load deploy/gpu_node.py like ``pyinfra @fake/node deploy/gpu_node.py``: (error, commands run)."""
    inventory = Inventory(([("@fake/node", QUICK)], {}), override_data=data)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    # A node with nothing stated: the plan must stop before it reads anything.
    fake = run_inventory(inventory, {"@fake/node": Node()}, str(REPO / "deploy" / "gpu_node.py"), execute=False)
    return fake.error, fake.commands


@pytest.mark.parametrize(
    "key, value",
    [
        ("nvidia_driver_version", f"535; {PAYLOAD}"),
        ("nvidia_toolkit_repo_url", f"https://mirror.example/stable {PAYLOAD}"),
        ("nvidia_toolkit_repo_url", f"https://mirror.example/stable'{PAYLOAD}'"),
        ("nvidia_toolkit_gpgkey_url", f"https://mirror.example/key$({PAYLOAD})"),
        ("containerd_config_path", f"/etc/containerd/config.toml\n{PAYLOAD}"),
        ("kube_node_names", f"node=gpu1;{PAYLOAD}"),
    ],
)
def test_hostile_values_stop_the_gpu_node_plan_before_any_command(monkeypatch, key, value):
    error, commands = run_entry(monkeypatch, {key: value, "kernel_modules_load": "false"})
    assert isinstance(error, SettingsError), error
    assert str(error).startswith(f"invalid setting {key}=")
    assert commands == []


# --- hostile but valid paths reach the host quoted -----------------------------------------

HOSTILE_PATH_TAIL = f"it's $({PAYLOAD}); `{PAYLOAD}` & {PAYLOAD} | x.conf"


def single_quoted_positions(command: str) -> set[int]:
    """Indexes of the characters sh reads literally: inside '...' (outside double quotes, unescaped)."""
    inside, state, index = set(), "plain", 0
    while index < len(command):
        char = command[index]
        if state == "single":
            if char == "'":
                state = "plain"
            else:
                inside.add(index)
        elif state == "double":
            if char == "\\":
                index += 1
            elif char == '"':
                state = "plain"
        elif char == "\\":
            index += 1
        elif char == "'":
            state = "single"
        elif char == '"':
            state = "double"
        index += 1
    return inside


def assert_only_quoted(commands: list[str], value: str) -> None:
    """
    Wherever the value (or its directory) appears in a command, its active parts -- $(...),
    backticks, the command after & -- and every 'pwned' sit inside single quotes, which sh
    reads literally (double quotes would still run $() and backticks).
    """
    assert any(shlex.quote(value) in command for command in commands), commands
    active = [f"$({PAYLOAD})", f"`{PAYLOAD}`", "& touch /tmp", "pwned"]
    for command in commands:
        literal = single_quoted_positions(command)
        for fragment in active:
            start = command.find(fragment)
            while start != -1:
                span = range(start, start + len(fragment))
                assert all(i in literal for i in span if command[i] != "'"), (
                    f"{fragment!r} of {value!r} is not single-quoted in {command!r}"
                )
                start = command.find(fragment, start + 1)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def family(distro_id: str):
    return detect_platform({"name": distro_id, "major": None, "release_meta": {"ID": distro_id}}, "x86_64").family


def test_containerd_config_path_with_shell_characters_is_only_ever_quoted():
    path = f"/etc/containerd/{HOSTILE_PATH_TAIL}"
    settings = settings_for(containerd_config_path=path)
    containerd_found = {"paths": [], "units": {}, "generated_versions": {}, "binary": "/usr/bin/containerd",
             "flavour": {"name": "plain", "service": "containerd"}}
    plan = run_plan(containerd_runtime, settings, family("debian"), containerd_found,
                    facts=[(config_read(path, None, "containerd"), "binary_path /usr/bin/containerd\nversion containerd 1.6.20")])
    assert plan.ran("gpu-node-candidate")  # the wiring really went ahead on that path
    assert_only_quoted(plan.commands, path)


def test_docker_daemon_config_path_with_shell_characters_is_only_ever_quoted():
    path = f"/etc/docker/{HOSTILE_PATH_TAIL}"
    settings = settings_for(container_runtimes="docker", docker_daemon_config_path=path)
    state = f"dockerd /usr/sbin/dockerd\nversion Docker version 20.10.24+dfsg1\nconfig {b64('{}')}"
    plan = run_plan(docker_runtime, settings, family("debian"), facts=[(state_read(path), state)])
    assert plan.ran("gpu-node-candidate")
    assert_only_quoted(plan.commands, path)


def test_kubeconfig_path_with_shell_characters_is_only_ever_quoted(monkeypatch):
    from test_k8s_plan import A100, gpu_identity_lines, run_plan as run_k8s_plan, two_gpu_node_cluster

    kubeconfig = f"/etc/kubernetes/{HOSTILE_PATH_TAIL}"
    run = run_k8s_plan(monkeypatch, two_gpu_node_cluster(), {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])},
                       data={"kubeconfig": kubeconfig})
    commands = run.control_plane_commands()
    assert len([c for c in commands if " label node " in c]) >= 1  # the plan went as far as labelling
    assert_only_quoted(commands, kubeconfig)


def test_the_defaults_pass_their_own_checks():
    """Tasks get a Settings: a default is held to the same checks as a value from the command line."""
    assert Settings.model_validate(DEFAULTS) == Settings()
