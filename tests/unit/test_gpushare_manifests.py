"""
The gpushare manifests (extender RBAC/Deployment/Service, device plugin RBAC/DaemonSet) rendered
for each supported Kubernetes version and validated offline against the official schemas with
``kubernetes-validate --strict`` (unknown fields rejected). kubernetes-validate ships schemas from
1.25 on: manifests rendered for 1.23 and 1.24 are validated against 1.25's, the oldest it has
(the objects used, apps/v1 and v1 and rbac/v1, did not change between them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from deploy.k8s.gpushare import (
    EXTENDER_NODE_PORT,
    EXTENDER_PORT,
    GpushareError,
    device_plugin_manifest,
    extender_manifest,
)
from deploy.settings import DEFAULTS

EXTENDER_IMAGE = DEFAULTS["gpushare_extender_image"]
PLUGIN_IMAGE = DEFAULTS["gpushare_device_plugin_image"]
VERSIONS = ["1.23", "1.24", "1.25", "1.28", "1.31"]
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
MASTER = "node-role.kubernetes.io/master"


def schema_version(version: str) -> str:
    return max(version, "1.25", key=lambda v: tuple(map(int, v.split(".")))) + ".0"


def documents(text: str) -> list[dict]:
    return [document for document in yaml.safe_load_all(text) if document]


def by_kind(text: str) -> dict[str, dict]:
    return {document["kind"]: document for document in documents(text)}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_strictly(version, tmp_path):
    text = extender_manifest(version, EXTENDER_IMAGE) + "---\n" + device_plugin_manifest(PLUGIN_IMAGE, "GiB")
    manifest = tmp_path / "gpushare.yaml"
    manifest.write_text(text)
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("kubernetes-validate")),
            "--strict",
            "-k",
            schema_version(version),
            str(manifest),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = [document["kind"] for document in documents(text)]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
    ]
    assert result.stdout.count(" passed for resource ") == len(kinds)


def test_strict_validation_catches_a_misspelt_field():
    """The validation above can fail: a misspelt field in the DaemonSet is rejected."""
    daemonset = by_kind(device_plugin_manifest(PLUGIN_IMAGE, "GiB"))["DaemonSet"]
    daemonset["spec"]["template"]["spec"]["nodeSelecter"] = {"gpushare": "true"}
    with pytest.raises(kubernetes_validate.ValidationError, match="nodeSelecter"):
        kubernetes_validate.validate(daemonset, "1.28.0", strict=True)


@pytest.mark.parametrize("version", ["1.24", "1.25", "1.28", "1.31"])
def test_extender_selects_the_control_plane_label_only_from_1_24(version):
    spec = by_kind(extender_manifest(version, EXTENDER_IMAGE))["Deployment"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {CONTROL_PLANE: ""}
    assert "affinity" not in spec
    assert MASTER not in yaml.safe_dump(spec["nodeSelector"])


def test_extender_accepts_the_old_master_label_below_1_24():
    spec = by_kind(extender_manifest("1.23", EXTENDER_IMAGE))["Deployment"]["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [term["matchExpressions"][0]["key"] for term in terms] == [CONTROL_PLANE, MASTER]
    assert {toleration["key"] for toleration in spec["tolerations"]} >= {CONTROL_PLANE, MASTER}


def test_master_taint_is_tolerated_only_where_kubeadm_still_set_it():
    def toleration_keys(version):
        spec = by_kind(extender_manifest(version, EXTENDER_IMAGE))["Deployment"]["spec"]["template"]["spec"]
        return {toleration["key"] for toleration in spec["tolerations"]}

    assert MASTER in toleration_keys("1.24")
    assert MASTER not in toleration_keys("1.25")
    assert CONTROL_PLANE in toleration_keys("1.31")


def test_extender_service_is_the_node_port_the_scheduler_config_calls():
    objects = by_kind(extender_manifest("1.28", EXTENDER_IMAGE))
    service = objects["Service"]["spec"]
    assert service["type"] == "NodePort"
    assert service["ports"] == [
        {"name": "http", "port": EXTENDER_PORT, "targetPort": EXTENDER_PORT, "nodePort": EXTENDER_NODE_PORT}
    ]
    pod = objects["Deployment"]["spec"]["template"]
    assert service["selector"] == pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == EXTENDER_IMAGE
    assert {"name": "PORT", "value": str(EXTENDER_PORT)} in container["env"]
    assert pod["spec"]["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == objects["ServiceAccount"]["metadata"]["name"]


@pytest.mark.parametrize("unit", ["GiB", "MiB"])
def test_device_plugin_runs_on_gpushare_nodes_with_the_memory_unit(unit):
    objects = by_kind(device_plugin_manifest(PLUGIN_IMAGE, unit))
    spec = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpushare": "true"}
    container = spec["containers"][0]
    assert container["image"] == PLUGIN_IMAGE
    assert [arg for arg in container["command"] if arg.startswith("--memory-unit")] == [f"--memory-unit={unit}"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]


def test_device_plugin_refuses_an_unknown_memory_unit():
    with pytest.raises(GpushareError, match="GiB or MiB"):
        device_plugin_manifest(PLUGIN_IMAGE, "KiB")


def test_nvidia_device_plugin_stays_off_gpushare_nodes():
    """The NVIDIA device plugin (issue 7's template) must not run where gpushare's does."""
    from deploy.settings import parse_settings
    from deploy.tasks import k8s

    text = k8s.render_device_plugin(parse_settings({}), [])
    daemonset = next(d for d in documents(text) if d["kind"] == "DaemonSet")
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    for term in terms:
        assert {"key": "gpushare", "operator": "NotIn", "values": ["true"]} in term["matchExpressions"]
