"""
MIG layouts, pure (deploy/rack/values.py, deploy/rack/mig.py): the mig_layout setting read, the files
NVIDIA's mig-parted service reads rendered from it and checked against the fields mig-parted documents (its v1 config: ``version``,
``mig-configs`` naming lists of ``devices`` / ``mig-enabled`` / ``mig-devices``, with ``device-filter``
optional and nothing else, ``mig-devices`` required where MIG is on and empty where it is off; its v1
hooks: ``version``, ``hooks`` by name, each a list of ``command`` / ``args`` / ``envs`` / ``workdir``; the
names of its hook points: apply-start, pre-apply-mode, pre-apply-config, apply-exit), and the plan of a
layout change against the GPU's holders.
"""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from deploy.driver.reload import Holder
from deploy.rack.mig import CONFIG_PATH, HOOKS_PATH, config_text, drop_in_text, hooks_text, layout_change
from deploy.rack.values import mig_layout

# mig-parted's v1 config, as its spec documents the fields (our own schema of them)
CONFIG_SCHEMA = {
    "type": "object",
    "required": ["version", "mig-configs"],
    "additionalProperties": False,
    "properties": {
        "version": {"const": "v1"},
        "mig-configs": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["devices", "mig-enabled"],
                    "additionalProperties": False,
                    "properties": {
                        "devices": {"oneOf": [{"const": "all"}, {"type": "array", "items": {"type": "integer"}}]},
                        "device-filter": {
                            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
                        },
                        "mig-enabled": {"type": "boolean"},
                        "mig-devices": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
                    },
                    "if": {"properties": {"mig-enabled": {"const": True}}},
                    "then": {"required": ["mig-devices"]},
                    "else": {"not": {"required": ["mig-devices"], "properties": {"mig-devices": {"minProperties": 1}}}},
                },
            },
        },
    },
}
HOOK_POINTS = ("apply-start", "pre-apply-mode", "pre-apply-config", "apply-exit")
HOOKS_SCHEMA = {
    "type": "object",
    "required": ["version", "hooks"],
    "additionalProperties": False,
    "properties": {
        "version": {"const": "v1"},
        "hooks": {
            "type": "object",
            "propertyNames": {"enum": list(HOOK_POINTS)},
            "additionalProperties": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["command"],
                    "additionalProperties": False,
                    "properties": {
                        "command": {"type": "string", "pattern": "^/"},
                        "args": {"type": "array", "items": {"type": "string"}},
                        "envs": {"type": "object", "additionalProperties": {"type": "string"}},
                        "workdir": {"type": "string"},
                    },
                },
            },
        },
    },
}
MIXED = {"name": "training-and-inference", "gpus": {"0,1": {"3g.40gb": 2}, "2": {"1g.10gb": 7}, "3": "disabled"}}


def test_the_rendered_config_has_mig_parteds_documented_fields_only_and_the_layout():
    layout = mig_layout(MIXED)
    spec = yaml.safe_load(config_text(layout))
    jsonschema.validate(spec, CONFIG_SCHEMA)
    assert spec["mig-configs"] == {
        "training-and-inference": [
            {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
            {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [3], "mig-enabled": False},
        ]
    }


def test_the_schema_refuses_what_mig_parted_refuses():
    """The check can fail: MIG devices on a GPU with MIG off, an unknown field, no devices."""
    for bad in (
        {"devices": [3], "mig-enabled": False, "mig-devices": {"1g.10gb": 1}},
        {"devices": "all", "mig-enabled": True, "mig-devices": {}, "gpus": 1},
        {"mig-enabled": True, "mig-devices": {}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"version": "v1", "mig-configs": {"x": [bad]}}, CONFIG_SCHEMA)


def test_the_layout_setting_from_the_command_lines_json_is_the_same_layout():
    assert mig_layout('{"name": "inference", "gpus": {"all": {"1g.10gb": 7}}}') == mig_layout(
        {"name": "inference", "gpus": {"all": {"1g.10gb": 7}}}
    )


@pytest.mark.parametrize(
    "value, why",
    [
        ({"name": "x", "gpus": {"all": {"big": 1}}}, "MIG profile 'big'"),
        ({"name": "x", "gpus": {"all": {"1g.10gb": 9}}}, "the count of 1g.10gb: 1 to 8"),
        ({"name": "x", "gpus": {"all": {"1g.10gb": 1}, "0": "disabled"}}, "each GPU in one entry"),
        ({"name": "x", "gpus": {"0": {"1g.10gb": 1}, "0,1": "disabled"}}, "each GPU in one entry"),
        ({"name": "x; rm -rf /", "gpus": {"all": "disabled"}}, "the name: letters, digits"),
        ({"name": "x", "gpus": {"first": "disabled"}}, "GPUs 'first'"),
        ({"name": "x"}, "a layout:"),
    ],
)
def test_a_layout_mig_parted_could_not_apply_is_refused_in_one_line(value, why):
    with pytest.raises(ValueError) as refused:
        mig_layout(value)
    assert why in str(refused.value) and "\n" not in str(refused.value)


def test_the_hooks_stop_the_nodes_enabled_gpu_clients_and_start_them_again():
    enabled = {
        "kubelet.service": "enabled",
        "nvidia-dcgm.service": "enabled",
        "dcgm-exporter.service": "not-found",
        "nvidia-persistenced.service": "enabled",
    }
    spec = yaml.safe_load(hooks_text(enabled))
    jsonschema.validate(spec, HOOKS_SCHEMA)
    hooks = spec["hooks"]
    assert hooks["pre-apply-mode"][0]["args"] == [
        "stop",
        "kubelet.service",
        "nvidia-dcgm.service",
        "nvidia-persistenced.service",
    ]
    assert hooks["pre-apply-config"][0]["args"] == ["stop", "kubelet.service", "nvidia-dcgm.service"]
    assert hooks["apply-exit"][0]["args"] == [
        "start",
        "nvidia-persistenced.service",
        "nvidia-dcgm.service",
        "kubelet.service",
    ]
    assert yaml.safe_load(hooks_text({}))["hooks"] == {}


def test_the_drop_in_names_gpu_nodes_files_and_the_selected_layout():
    text = drop_in_text(mig_layout(MIXED))
    assert "[Service]\n" in text
    assert f'Environment="MIG_PARTED_CONFIG_FILE={CONFIG_PATH}"' in text
    assert f'Environment="MIG_PARTED_HOOKS_FILE={HOOKS_PATH}"' in text
    assert 'Environment="MIG_PARTED_SELECTED_CONFIG=training-and-inference"' in text


JOB = Holder(pid=4242, user="alice", command="python3", device="/dev/nvidia0")
PERSISTENCED = Holder(
    pid=17, user="root", command="nvidia-persiste", device="/dev/nvidia0", unit="nvidia-persistenced.service"
)


def test_a_layout_change_is_applied_now_only_where_the_drivers_own_services_alone_hold_the_gpu():
    layout = mig_layout(MIXED)
    now = layout_change(layout, module_loaded=True, fuser=True, holders=[PERSISTENCED], drain=False)
    assert now.apply_now and now.refusal is None
    held = layout_change(layout, module_loaded=True, fuser=True, holders=[PERSISTENCED, JOB], drain=False)
    assert not held.apply_now
    assert held.refusal.startswith(
        "drain required: MIG layout training-and-inference changes the GPUs' partitions "
        "and python3 (pid 4242, user alice) holds /dev/nvidia0"
    )
    drained = layout_change(layout, module_loaded=True, fuser=True, holders=[JOB], drain=True)
    assert drained.apply_now and drained.refusal is None
    unknown = layout_change(layout, module_loaded=True, fuser=False, holders=[], drain=False)
    assert "fuser (psmisc) is not installed" in unknown.refusal
    boot = layout_change(layout, module_loaded=False, fuser=True, holders=[JOB], drain=False)
    assert not boot.apply_now and boot.refusal is None and "applied at the next boot" in boot.line
