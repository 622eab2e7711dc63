"""
Golden tests of the NVIDIA device plugin config (file version v1) and the sharing settings' rules.
The golden files are the oracle of the exact text; the field checks read the tool's own output
against NVIDIA's documented config (k8s-device-plugin README, "Shared Access to GPUs").
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy.settings import SettingsError, parse_settings
from deploy.tasks.k8s import SharingConfig

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "k8s" / "device-plugin-config"

CASES = {
    "no-sharing": {},
    "time-slicing-10": {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "10"},
    "time-slicing-10-renamed": {
        "gpu_sharing": "time-slicing",
        "gpu_sharing_replicas": "10",
        "time_slicing_rename_by_default": "true",
    },
    "time-slicing-10-strict": {
        "gpu_sharing": "time-slicing",
        "gpu_sharing_replicas": 10,
        "time_slicing_fail_requests_greater_than_one": True,
    },
    "mps-4": {"gpu_sharing": "mps", "gpu_sharing_replicas": "4"},
    "no-sharing-mig-mixed": {"mig_strategy": "mixed"},
    "time-slicing-4-cdi": {"gpu_sharing": "time-slicing", "cdi": "true"},
}


def generated(name: str) -> dict:
    """The config the tool writes for the settings of ``CASES[name]``, parsed."""
    return yaml.safe_load(SharingConfig.from_settings(parse_settings(CASES[name])).text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_device_plugin_config_matches_golden_file(name):
    config = SharingConfig.from_settings(parse_settings(CASES[name]))
    assert config.name == name
    assert config.text() == (GOLDEN / f"{name}.yaml").read_text()


def test_time_slicing_ten_replicas_shares_each_gpu_ten_ways():
    """The seed's example: 10 replicas per GPU (a node with 3 GPUs then advertises 30 nvidia.com/gpu)."""
    document = generated("time-slicing-10")
    assert document["version"] == "v1"
    assert document["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 10}]
    assert document["sharing"]["timeSlicing"]["renameByDefault"] is False
    assert document["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is False


def test_rename_by_default_makes_pods_request_the_shared_resource_name():
    config = SharingConfig.from_settings(parse_settings(CASES["time-slicing-10-renamed"]))
    assert config.gpu_resource == "nvidia.com/gpu.shared"
    assert SharingConfig.from_settings(parse_settings({})).gpu_resource == "nvidia.com/gpu"


def test_mps_and_no_sharing_have_no_time_slicing_section():
    mps = generated("mps-4")
    assert mps["sharing"] == {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    assert "sharing" not in generated("no-sharing")
    assert generated("no-sharing-mig-mixed")["flags"]["migStrategy"] == "mixed"
    assert generated("time-slicing-10-renamed")["sharing"]["timeSlicing"]["renameByDefault"] is True
    assert generated("time-slicing-10-strict")["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is True


def test_gpushare_nodes_get_the_plain_config_name_if_asked():
    assert SharingConfig.from_settings(parse_settings({"gpu_sharing": "gpushare"})).name == "no-sharing"


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "0"},
            "invalid setting gpu_sharing_replicas='0': allowed: an integer >= 2 <= 1024",
        ),
        (
            {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": 1},
            "invalid setting gpu_sharing_replicas=1: allowed: an integer >= 2 <= 1024",
        ),
        (
            {"gpu_sharing_replicas": "4"},
            "invalid setting gpu_sharing_replicas='4': allowed only with gpu_sharing=time-slicing or mps",
        ),
        (
            {"gpu_sharing": "mps", "time_slicing_rename_by_default": "true"},
            "invalid setting time_slicing_rename_by_default='true': allowed only with gpu_sharing=time-slicing "
            "(gpu_sharing is 'mps'; MPS and time-slicing are exclusive)",
        ),
        (
            {"gpu_sharing": "mps", "time_slicing_fail_requests_greater_than_one": True},
            "invalid setting time_slicing_fail_requests_greater_than_one=True: allowed only with gpu_sharing=time-slicing",
        ),
        (
            {"gpu_sharing": "mps,time-slicing"},
            "invalid setting gpu_sharing='mps,time-slicing': allowed: one of none, time-slicing, mps, gpushare",
        ),
        ({"mig_strategy": "both"}, "invalid setting mig_strategy='both': allowed: one of none, single, mixed"),
        (
            {"gpu_sharing": "mps", "mig_strategy": "mixed"},
            "invalid setting mig_strategy='mixed': allowed: none with gpu_sharing=mps",
        ),
        (
            {"device_plugin_install_method": "kustomize"},
            "invalid setting device_plugin_install_method='kustomize': allowed: one of static, helm",
        ),
        (
            {"device_plugin_version": "latest"},
            "invalid setting device_plugin_version='latest': allowed: a release such as v0.17.0",
        ),
        ({"smoke_test_timeout": "5"}, "invalid setting smoke_test_timeout='5': allowed: an integer >= 10 <= 3600"),
        ({"kube_node_names": "gpu1"}, "invalid setting kube_node_names='gpu1': allowed: a mapping"),
    ],
)
def test_invalid_kubernetes_settings_name_the_key(data, message):
    with pytest.raises(SettingsError) as error:
        parse_settings(data)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_device_plugin_version_without_v_gets_one():
    assert parse_settings({"device_plugin_version": "0.17.1"}).device_plugin_version == "v0.17.1"


def test_cdi_hands_gpus_out_by_cdi_name_through_the_cri():
    """NVIDIA's device plugin: deviceListStrategy cdi-cri puts the CDI device names in the kubelet's
    CRI request, and the runtime injects them from the node's spec."""
    document = generated("time-slicing-4-cdi")
    assert document["flags"]["plugin"]["deviceListStrategy"] == "cdi-cri"
    assert generated("no-sharing")["flags"]["plugin"]["deviceListStrategy"] == "envvar"


@pytest.mark.parametrize(
    ("cdi", "spec", "strategy"),
    [
        ("auto", True, "cdi-cri"),
        ("auto", False, "envvar"),
        ("true", False, "cdi-cri"),
        ("false", True, "envvar"),
    ],
)
def test_a_node_s_config_follows_its_cdi_setting_and_its_spec(cdi, spec, strategy):
    from deploy.facts.gpu_node_identity import GpuNode

    node = GpuNode(
        host_name="gpu-1",
        node_name="gpu-1",
        products=("NVIDIA A100",),
        pci_gpus=1,
        nvidia_smi="ok",
        gpu_sharing="none",
        nvidia_runtime_default=True,
        settings=parse_settings({"cdi": cdi}),
        cdi_spec=spec,
    )
    config = SharingConfig.from_settings(node.settings, node.cdi)
    assert yaml.safe_load(config.text())["flags"]["plugin"]["deviceListStrategy"] == strategy
    assert config.name.endswith("-cdi") is (strategy == "cdi-cri")
