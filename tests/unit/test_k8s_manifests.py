"""
Every manifest the Kubernetes layer renders validates offline against the official schemas
(kubernetes-validate, strict: unknown fields are errors) for each supported Kubernetes version.
No cluster is involved: these are the schemas kubernetes-validate ships.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from deploy.facts.gpu_node_identity import GpuNode
from deploy.operations.kubectl import manifest_documents, stamp_manifest
from deploy.settings import parse_settings
from deploy.tasks.k8s import (
    render_device_plugin,
    render_helm_values,
    render_runtime_class,
    render_smoke_pod,
)

SUPPORTED_KUBERNETES = ["1.28", "1.29", "1.30", "1.31", "1.32", "1.33"]

VARIANTS = {
    "no-sharing": {},
    "time-slicing": {
        "gpu_sharing": "time-slicing",
        "gpu_sharing_replicas": "10",
        "time_slicing_rename_by_default": "true",
        "time_slicing_fail_requests_greater_than_one": "true",
    },
    "mps-runtimeclass": {"gpu_sharing": "mps", "nvidia_runtime_default": "false"},
    "mig-mixed": {"mig_strategy": "mixed"},
}


def gpu_node(name: str, data: dict) -> GpuNode:
    settings = parse_settings(data)
    return GpuNode(
        host_name=name,
        node_name=name,
        products=("NVIDIA A100-SXM4-40GB",),
        pci_gpus=1,
        nvidia_smi="ok",
        gpu_sharing=settings.gpu_sharing,
        nvidia_runtime_default=settings.nvidia_runtime_default,
        settings=settings,
    )


def rendered(variant: str) -> list[tuple[str, str]]:
    settings = parse_settings(VARIANTS[variant])
    nodes = [gpu_node("gpu1", VARIANTS[variant]), gpu_node("gpu2", {"gpu_sharing": "time-slicing"})]
    return [
        ("runtimeclass", render_runtime_class()),
        ("device-plugin", render_device_plugin(settings, nodes)),
        ("smoke-pod", render_smoke_pod(settings, nodes)),
    ]


def all_documents() -> list[tuple[str, dict]]:
    out = []
    for variant in VARIANTS:
        for bundle, text in rendered(variant):
            stamped, _ = stamp_manifest(text, bundle)  # what is applied
            for document in manifest_documents(stamped):
                out.append((f"{variant}/{bundle}/{document['kind']}/{document['metadata']['name']}", document))
    return out


DOCUMENTS = all_documents()


def test_kubernetes_validate_ships_every_supported_version():
    shipped = {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}
    assert set(SUPPORTED_KUBERNETES) <= shipped


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
@pytest.mark.parametrize("label, document", DOCUMENTS, ids=[label for label, _ in DOCUMENTS])
def test_manifest_validates_strictly(label, document, version):
    # validate() raises on a schema error, and SchemaNotFoundError for an unknown kind/apiVersion
    # (the CLI only warns for that; here it fails).
    assert kubernetes_validate.validate(document, version, strict=True) == version


def test_strict_validation_rejects_an_unknown_field():
    """The check above can fail: a misspelt field is caught."""
    document = yaml.safe_load(render_runtime_class())
    document["handlr"] = "nvidia"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, "1.33", strict=True)


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_kubernetes_validate_cli_strict_accepts_every_rendered_file(tmp_path, version):
    paths = []
    for variant in VARIANTS:
        for bundle, text in rendered(variant):
            path = tmp_path / f"{variant}-{bundle}.yaml"
            path.write_text(stamp_manifest(text, bundle)[0])
            paths.append(str(path))
    cli = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    result = subprocess.run([cli, "--strict", "-k", version, *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARN" not in result.stdout and "ERROR" not in result.stdout
    assert result.stdout.count("passed for resource") == len(DOCUMENTS)


def test_helm_values_carry_the_same_configs_as_the_static_configmap():
    data = VARIANTS["time-slicing"]
    settings = parse_settings(data)
    nodes = [gpu_node("gpu1", data)]
    values = yaml.safe_load(render_helm_values(settings, nodes))
    configmap = [d for d in manifest_documents(render_device_plugin(settings, nodes)) if d["kind"] == "ConfigMap"][0]
    assert values["config"]["map"] == configmap["data"]
    assert values["config"]["default"] == "time-slicing-10-renamed-strict"
    static = [d for d in manifest_documents(render_device_plugin(settings, nodes)) if d["kind"] == "DaemonSet"][0]
    pod = static["spec"]["template"]["spec"]
    assert values["affinity"] == pod["affinity"] and values["tolerations"] == pod["tolerations"]


def test_device_plugin_daemonset_has_the_issue_requirements():
    settings = parse_settings(VARIANTS["mps-runtimeclass"])
    documents = manifest_documents(render_device_plugin(settings, [gpu_node("gpu1", VARIANTS["mps-runtimeclass"])]))
    kinds = [(d["kind"], d["metadata"]["name"]) for d in documents]
    assert ("DaemonSet", "nvidia-device-plugin-mps-control-daemon") in kinds
    plugin = [d for d in documents if d["metadata"]["name"] == "nvidia-device-plugin" and d["kind"] == "DaemonSet"][0]
    pod = plugin["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in expressions
    assert {"key": "gpushare", "operator": "NotIn", "values": ["true"]} in expressions
    images = {c["image"] for c in pod["containers"] + pod["initContainers"]}
    assert images == {"nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
    no_runtime_class = manifest_documents(render_device_plugin(parse_settings({}), [gpu_node("gpu1", {})]))
    daemonset = [d for d in no_runtime_class if d["kind"] == "DaemonSet"][0]
    assert "runtimeClassName" not in daemonset["spec"]["template"]["spec"]
    assert not any(d["metadata"]["name"].endswith("mps-control-daemon") for d in no_runtime_class)


def test_a_driver_root_other_than_slash_is_mounted_and_named_in_the_plugin_config():
    """nvidia_driver_root (a driver container's /run/nvidia/driver, the lab's mock): the plugin config
    names it as nvidiaDriverRoot and containerDriverRoot /driver-root, where the DaemonSet mounts it
    read-only; the default root '/' renders neither mount nor containerDriverRoot."""
    data = {"nvidia_driver_root": "/run/nvidia/driver"}
    settings = parse_settings(data)
    documents = manifest_documents(render_device_plugin(settings, [gpu_node("gpu1", data)]))
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    (config,) = [yaml.safe_load(text) for text in config_map["data"].values()]
    assert config["flags"]["nvidiaDriverRoot"] == "/run/nvidia/driver"
    assert config["flags"]["plugin"]["containerDriverRoot"] == "/driver-root"
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    assert {"name": "driver-root", "hostPath": {"path": "/run/nvidia/driver", "type": "Directory"}} in pod["volumes"]
    plugin = next(c for c in pod["containers"] if c["name"] == "nvidia-device-plugin-ctr")
    assert {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True} in plugin["volumeMounts"]
    assert (
        yaml.safe_load(render_helm_values(settings, [gpu_node("gpu1", data)]))["nvidiaDriverRoot"]
        == "/run/nvidia/driver"
    )

    default = manifest_documents(render_device_plugin(parse_settings({}), [gpu_node("gpu1", {})]))
    assert "driver-root" not in yaml.safe_dump(default)
    assert "containerDriverRoot" not in yaml.safe_dump(default)
