"""VerifyOptions built from the settings by the names its fields declare (deploy/verification/options.py)."""

from __future__ import annotations

from dataclasses import fields

from deploy.settings import parse_settings
from deploy.verification.options import VerifyOptions

# A value other than the default for every setting verify reads
CHANGED = {
    "require_gpu": True,
    "container_runtimes": "docker",
    "containerd_config_path": "/etc/k0s/containerd.toml",
    "verify_image": "registry.example/cuda:12",
    "nvidia_toolkit_install": False,
    "nvidia_kernel_modules": "open",
    "nvidia_persistenced": False,
    "fabric_manager_install": False,
    "cdi": "false",
    "nvidia_driver_root": "/run/nvidia/driver",
    "nvidia_runtime_mode": "legacy",
    "module_signing": "true",
    "module_signing_key": "/etc/site/mok.key",
    "module_signing_cert": "/etc/site/mok.der",
}


def test_every_field_takes_the_value_of_the_setting_it_names():
    settings = parse_settings(CHANGED)
    options, default = VerifyOptions.from_settings(settings), VerifyOptions.from_settings(parse_settings({}))
    named = {each.metadata["setting"]: each.name for each in fields(VerifyOptions) if "setting" in each.metadata}
    assert set(CHANGED) <= set(named), "a setting verify reads has no field"
    for setting, name in named.items():
        assert getattr(options, name) == getattr(settings, setting), name
    for setting in CHANGED:  # the changed value arrived, not a default
        assert getattr(options, named[setting]) != getattr(default, named[setting]), setting
    assert options.kernel_module_type == "open" and options.runtimes == ("docker",)


def test_every_field_has_the_type_of_the_setting_it_names():
    """VerifyOptions declares no type or default of its own: each field's is the setting's (a default
    verify is from_settings of the defaults)."""
    from typing import get_type_hints

    from deploy.settings import SETTING_FIELDS
    from deploy.settings.fields import unwrap

    hints = get_type_hints(VerifyOptions)
    for each in fields(VerifyOptions):
        if "setting" in each.metadata:
            inner, _, optional = unwrap(hints[each.name])
            setting_inner, _, setting_optional = unwrap(SETTING_FIELDS[each.metadata["setting"]].annotation)
            assert (inner, optional) == (setting_inner, setting_optional), each.name
