"""The gpushare settings: pinned defaults, and bad values stopped naming the key."""

from __future__ import annotations

import pytest

from deploy.settings import DEFAULTS, SettingsError, parse_settings


def test_defaults_pin_images_and_leave_the_checksum_to_the_site():
    settings = parse_settings({})
    assert settings.gpushare_extender_image.endswith("k8s-gpushare-schd-extender:1.11-d170d8a")
    assert settings.gpushare_device_plugin_image.endswith("k8s-gpushare-plugin:v2-1.11-aff8a23")
    assert settings.gpushare_inspect_source.endswith("/releases/download/v0.3.0/kubectl-inspect-gpushare")
    assert settings.gpushare_inspect_sha256 is None  # never seen here: the site pins what it trusts
    assert settings.gpushare_scheduler_config_path == "/etc/kubernetes/gpushare/scheduler-config.yaml"
    assert DEFAULTS["gpushare_memory_unit"] == "GiB"


def test_values_from_the_command_line_are_parsed():
    settings = parse_settings(
        {
            "gpushare_inspect_sha256": "SHA256:" + "AB" * 32,
            "gpushare_inspect_source": "/srv/tools/kubectl-inspect-gpushare",
            "gpushare_scheduler_ready_timeout": "60",
            "gpushare_inspect_install": "false",
            "gpushare_memory_unit": "mib",
        }
    )
    assert settings.gpushare_inspect_sha256 == "ab" * 32
    assert settings.gpushare_inspect_source == "/srv/tools/kubectl-inspect-gpushare"
    assert settings.gpushare_scheduler_ready_timeout == 60
    assert settings.gpushare_inspect_install is False
    assert settings.gpushare_memory_unit == "MiB"


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("gpushare_inspect_sha256", "abc", "a SHA-256 digest"),
        ("gpushare_inspect_source", "http://mirror/kubectl-inspect-gpushare", "an https:// URL or an absolute path"),
        ("gpushare_inspect_source", "relative/file", "an https:// URL or an absolute path"),
        ("gpushare_extender_image", "Not An Image", "a container image reference"),
        ("gpushare_scheduler_config_path", "scheduler.yaml", "an absolute path"),
        ("gpushare_scheduler_ready_timeout", "5", "an integer >= 10 <= 1800"),
        ("gpushare_memory_unit", "KiB", "one of GiB, MiB"),
    ],
)
def test_bad_values_stop_the_run_naming_the_key(key, value, allowed):
    with pytest.raises(SettingsError, match=f"invalid setting {key}='{value}': allowed: {allowed}"):
        parse_settings({key: value})


@pytest.mark.parametrize(
    "data",
    [
        {"gpu_sharing": "gpushare", "nvidia_runtime_default": "false"},
        {"gpu_sharing": "gpushare", "nvidia_runtime_default": False},
        {"nvidia_runtime_default": "0", "gpu_sharing": "gpushare"},
    ],
)
def test_gpushare_without_nvidia_as_the_default_runtime_is_refused_saying_why(data):
    """The gpushare device plugin's pod update drops runtimeClassName (seen on a real 1.28 API
    server: the update is rejected and the pod runs with no GPU), so a RuntimeClass cannot serve."""
    with pytest.raises(SettingsError) as refused:
        parse_settings(data)
    assert str(refused.value) == (
        "invalid setting nvidia_runtime_default=false: allowed only true with gpu_sharing=gpushare "
        "(the gpushare device plugin drops a pod's runtimeClassName, so its pods need nvidia as the "
        "default runtime)"
    )


def test_nvidia_runtime_default_false_stays_allowed_for_the_other_sharing_modes():
    for sharing in ("none", "time-slicing", "mps"):
        assert (
            parse_settings({"gpu_sharing": sharing, "nvidia_runtime_default": "false"}).nvidia_runtime_default is False
        )
