"""
Hostile settings and node names: values with shell metacharacters or control characters are
refused by validation before any command runs, URLs need a host and hold no credentials, and
names the node gives (os-release, the kernel) that could not name a package refuse the host.
Values that are legitimate and still hostile (paths) are run for real in test_hostile_values_run.py.
The plans run on pyinfra's @fake connector (tests/plan.py).
"""

from __future__ import annotations

from pathlib import Path

import pyinfra
import pytest
from plan import QUICK, Node, run_inventory
from pyinfra.api import Inventory

from deploy.distros.families import UnsupportedPlatform, detect_platform
from deploy.settings import DEFAULTS, SETTING_FIELDS, Settings, SettingsError, parse_settings

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
PATH_KEYS = (
    "containerd_config_path",
    "docker_daemon_config_path",
    "kubeconfig",
    "gpushare_scheduler_config_path",
    "gpushare_inspect_path",
    "verify_report_path",
    "fleet_report_path",
    "manifests_dir",
    "manifests_inventory",
)
CONTROLLER_PATH_KEYS = ("verify_report_path", "fleet_report_path", "manifests_dir")
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


# --- what a URL must be --------------------------------------------------------------------------

URL_SETTINGS = (
    "nvidia_toolkit_repo_url",
    "nvidia_toolkit_gpgkey_url",
    "nvidia_driver_repo_url",
    "nvidia_cuda_repo_url",
    "gpushare_inspect_source",
)


@pytest.mark.parametrize("key", URL_SETTINGS)
@pytest.mark.parametrize(
    "value, why",
    [
        ("https://bob:hunter2@mirror.example/stable", "without user:password@"),
        ("https://token@mirror.example/stable", "without user:password@"),
        ("https://mirror.example/stable#frag", "percent-encode"),
        ("https:relative/path", "with a host"),
        ("https:///no-host", "with a host"),
        ("https://mirror.example:port/x", "could not be cast"),
        ("https://[::1/x", "Invalid IPv6"),
    ],
)
def test_urls_need_a_host_and_refuse_user_info_and_fragments(key, value, why):
    data = {key: value, "allow_insecure_repositories": "true"}
    with pytest.raises(SettingsError, match=f"invalid setting {key}=") as refused:
        parse_settings(data)
    assert why in str(refused.value) and "\n" not in str(refused.value)
    assert "hunter2" not in str(refused.value)  # the line names the value, user-info masked


@pytest.mark.parametrize("value", ["file://mirror.example/srv/repo", "file:relative"])
def test_a_file_url_is_a_local_absolute_path(value):
    with pytest.raises(SettingsError, match="file:///absolute/path"):
        parse_settings({"nvidia_toolkit_repo_url": value, "allow_insecure_repositories": "true"})


@pytest.mark.parametrize(
    "value", ["https://[::1]:8443/stable", "https://mirror.example:8443/a%23b?x=1", "file:///srv/mirror"]
)
def test_urls_with_a_port_a_query_or_a_local_mirror_are_taken(value):
    settings = parse_settings({"nvidia_toolkit_repo_url": value, "allow_insecure_repositories": "true"})
    assert settings.nvidia_toolkit_repo_url == value


# --- names the node gives ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("ID", "debian$(touch /tmp/pwned)"),
        ("VERSION_ID", "12; touch /tmp/pwned"),
        ("VERSION_CODENAME", "bookworm main\ndeb http://evil/ x"),
        ("VERSION_CODENAME", "bookworm #x"),
    ],
)
def test_os_release_values_that_name_nothing_refuse_the_host_in_one_line(field, value):
    meta = {"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm", "ID_LIKE": "debian", field: value}
    with pytest.raises(UnsupportedPlatform) as refused:
        detect_platform({"name": "Debian", "major": 12, "release_meta": meta}, "x86_64")
    assert f"os-release's {field} is " in str(refused.value) and "\n" not in str(refused.value)


def test_a_kernel_release_that_names_no_package_refuses_the_host_before_any_change():
    from plan import PCI_WITH_GPU, node_lines, run_deploy
    from test_driver_plans import DEBIAN_FILES, node

    run = run_deploy(
        node(
            "debian-12",
            node_survey=node_lines("6.1.0-18-amd64 $(touch /tmp/pwned)", pci=PCI_WITH_GPU),
            facts=[*DEBIAN_FILES],
        )
    )
    assert run.failed and "the running kernel's release is '6.1.0-18-amd64 $(touch /tmp/pwned)'" in run.refusal
    assert not [command for command in run.commands if "apt-get" in command or "mv -f" in command]


def test_an_arch_kernel_package_base_that_names_no_package_refuses_the_host():
    from plan import PCI_WITH_GPU, node_lines, run_deploy
    from test_driver_plans import node

    state = node_lines("6.6.8-arch1-1", pci=PCI_WITH_GPU, pkgbases=["linux-zen", "linux' ; touch /tmp/pwned ; '"])
    run = run_deploy(node("arch", node_survey=state))
    assert run.failed and "a kernel's pkgbase is" in run.refusal
    assert not [command for command in run.commands if "pacman" in command and "-S" in command]


def test_the_defaults_pass_their_own_checks():
    """Tasks get a Settings: a default is held to the same checks as a value from the command line."""
    assert Settings.model_validate(DEFAULTS) == Settings()
