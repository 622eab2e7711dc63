"""The settings contract (docs/settings.md, README "Settings"): defaults, coercion of --data strings, one-line errors."""

from __future__ import annotations

import pytest

from deploy import settings as settings_module
from deploy.settings import DEFAULTS, Settings, SettingsError, likely_typos, parse_settings

DESIGN_DEFAULTS = {
    "container_runtimes": ("containerd",),
    "nvidia_runtime_default": True,
    "systemd_cgroup": True,
    "containerd_config_path": "/etc/containerd/config.toml",
    "docker_daemon_config_path": "/etc/docker/daemon.json",
    "nvidia_driver_install": True,
    "nvidia_driver_branch": None,
    "nvidia_driver_version": None,
    "nvidia_toolkit_install": True,
    "nvidia_toolkit_version": None,
    "cuda_toolkit_install": False,
    "kernel_modules_load": True,
    "reboot_allowed": False,
    "require_gpu": False,
}


def test_every_design_key_has_its_documented_default():
    for key, default in DESIGN_DEFAULTS.items():
        assert DEFAULTS[key] == default, key
    assert DEFAULTS["nvidia_toolkit_repo_url"].startswith("https://nvidia.github.io/libnvidia-container/")
    assert DEFAULTS["nvidia_toolkit_gpgkey_url"] == "https://nvidia.github.io/libnvidia-container/gpgkey"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("false", False), ("1", True), ("0", False), (True, True), (0, False), ("No", False)],
)
def test_booleans_from_the_command_line_are_coerced(raw, expected):
    assert parse_settings({"systemd_cgroup": raw}).systemd_cgroup is expected


def test_comma_lists_and_lists_both_work_and_duplicates_fold():
    assert parse_settings({"container_runtimes": "containerd,docker"}).container_runtimes == ("containerd", "docker")
    assert parse_settings({"container_runtimes": ["docker", "docker"]}).container_runtimes == ("docker",)
    assert parse_settings({"container_runtimes": " Docker , containerd "}).container_runtimes == ("docker", "containerd")


def test_numbers_arrive_as_ints_or_strings():
    # pyinfra's --data turns "535" into the int 535
    assert parse_settings({"nvidia_driver_branch": 535}).nvidia_driver_branch == "535"
    assert parse_settings({"nvidia_driver_branch": "550"}).nvidia_driver_branch == "550"
    assert parse_settings({"service_restart_timeout": "45"}).service_restart_timeout == 45


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("container_runtimes", "podman", "containerd, docker"),
        ("container_runtimes", "", "containerd, docker"),
        ("nvidia_driver_branch", "abc", "535"),
        ("systemd_cgroup", "maybe", "true or false"),
        ("containerd_config_path", "etc/containerd/config.toml", "absolute path"),
        ("service_restart_timeout", "2", ">= 5"),
        ("nvidia_toolkit_version", "latest!", "package version"),
        ("stages", "kernel,everything", "kernel"),
    ],
)
def test_invalid_values_raise_one_line_naming_key_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(SettingsError) as raised:
        parse_settings({key: value})
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"invalid setting {key}=")
    assert repr(value) in message or str(value) in message
    assert allowed in message


def test_plain_http_repository_needs_an_explicit_opt_in():
    mirror = {"nvidia_toolkit_repo_url": "http://mirror.internal/stable"}
    with pytest.raises(SettingsError, match="nvidia_toolkit_repo_url=.*allow_insecure_repositories"):
        parse_settings(mirror)
    assert parse_settings({**mirror, "allow_insecure_repositories": "true"}).nvidia_toolkit_repo_url == (
        "http://mirror.internal/stable"
    )


def test_unset_optional_values_stay_none():
    parsed = parse_settings({"nvidia_driver_version": "", "nvidia_toolkit_version": "none"})
    assert parsed.nvidia_driver_version is None and parsed.nvidia_toolkit_version is None


def test_typos_of_setting_names_are_pointed_out():
    assert likely_typos({"nvidia_runtime_defualt": True, "ssh_user": "root"}) == [
        "unknown setting 'nvidia_runtime_defualt': did you mean 'nvidia_runtime_default'?"
    ]


def test_group_data_all_applies_below_host_data_whatever_the_working_directory(tmp_path, monkeypatch):
    group_data = tmp_path / "all.py"
    group_data.write_text("container_runtimes = ['docker']\nsystemd_cgroup = False\nimport os\n")
    monkeypatch.setattr(settings_module, "GROUP_DATA_ALL", group_data)
    settings_module.repo_group_data.cache_clear()

    class FakeData:
        def dict(self):
            return {"systemd_cgroup": "true"}  # e.g. --data systemd_cgroup=true

    class FakeHost:
        data = FakeData()

    try:
        resolved = settings_module.host_settings(FakeHost())
    finally:
        settings_module.repo_group_data.cache_clear()
    assert resolved.container_runtimes == ("docker",)  # from group_data/all.py
    assert resolved.systemd_cgroup is True  # host data wins


def test_the_shipped_group_data_is_valid():
    settings_module.repo_group_data.cache_clear()
    parse_settings(settings_module.repo_group_data())


def test_settings_are_immutable():
    with pytest.raises(Exception):
        Settings().systemd_cgroup = False  # type: ignore[misc]


def test_an_unknown_key_with_one_of_our_prefixes_always_names_the_closest_setting():
    notes = likely_typos({
        "nvidia_driver_brnach": "535",  # a typo
        "nvidia_drvier": "550",  # far from any one name, but clearly meant for us
        "gpushare_inspect_sha": "abc",
        "kube_nodes": "a=b",
        "containerd_conf": "/etc/c.toml",
    })
    assert notes == [
        "unknown setting 'nvidia_driver_brnach': did you mean 'nvidia_driver_branch'?",
        "unknown setting 'nvidia_drvier': did you mean 'nvidia_driver_root'?",
        "unknown setting 'gpushare_inspect_sha': did you mean 'gpushare_inspect_sha256'?",
        "unknown setting 'kube_nodes': did you mean 'kube_node_names'?",
        "unknown setting 'containerd_conf': did you mean 'containerd_config_path'?",
    ]


def test_pyinfra_keys_and_unrelated_user_keys_get_no_warning():
    quiet = {
        "ssh_user": "root", "ssh_key": "~/.ssh/id", "_sudo": True, "_env": {},
        "docker_identifier": "abc", "docker_platform": "linux/amd64",  # pyinfra's docker connector
        "fake_responses": {}, "app_port": 8080, "time_zone": "UTC", "service_name": "web",
    }
    assert likely_typos(quiet) == []


def test_setting_prefixes_come_from_the_setting_names():
    prefixes = settings_module.setting_prefixes()
    for prefix in ("nvidia_", "containerd_", "docker_", "gpu_", "gpushare_", "drain_", "kube_", "verify_"):
        assert prefix in prefixes
    assert all(any(name.startswith(prefix) for name in settings_module.SETTING_FIELDS) for prefix in prefixes)
