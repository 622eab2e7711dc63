"""
Every object of gpu_allocator=dra (deploy/tasks/dra_cluster.py), rendered by the deploy's own
functions for every sharing mode and driver root, and every file of deploy/render_cluster.py's
folder for a DRA group (deploy/tasks/gitops.py), checked offline and strictly (unknown fields
refused) against the OpenAPI schemas kubernetes-validate ships for every Kubernetes minor from
1.34 to the newest it has; and refused in one line for a cluster older than 1.34.
"""

from __future__ import annotations

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from packaging.version import Version
from test_k8s_schemas import schema_files_read_once  # noqa: F401 (its schema cache, for this module too)

from deploy.k8s import dra
from deploy.operations.kubectl import manifest_documents, stamp_manifest
from deploy.settings import parse_settings
from deploy.tasks.dra_cluster import render_claims, render_driver, render_helm_values, render_smoke_pod
from deploy.tasks.gitops import cluster_files, settings_only_node

OLDEST = "1.34"
VERSIONS = sorted(
    {
        kubernetes_validate.utils.major_minor(version)
        for version in kubernetes_validate.utils.all_versions()
        if Version(version) >= Version(OLDEST)
    },
    key=Version,
)
CASES = {
    "plain": {},
    "time-slicing": {"gpu_sharing": "time-slicing"},
    "mps": {"gpu_sharing": "mps", "gpu_sharing_replicas": 4},
    "driver-container": {"nvidia_driver_root": "/run/nvidia/driver"},
}


def settings(**data):
    return parse_settings({"gpu_allocator": "dra", **data})


def documents(case: str) -> list[dict]:
    chosen = settings(**CASES[case])
    texts = [
        stamp_manifest(render_driver(chosen), "nvidia-dra-driver-gpu")[0],
        stamp_manifest(render_claims(chosen), "dra-claims")[0],
        render_smoke_pod(chosen),
    ]
    return [document for text in texts for document in manifest_documents(text)]


def test_the_release_has_1_34_to_1_37():
    """What this file claims: kubernetes-validate (>=1.37 in pyproject's test extra) has these schemas."""
    assert {"1.34", "1.35", "1.36", "1.37"} <= set(VERSIONS), VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_dra_object_is_valid_strictly(case, version):
    for document in documents(case):
        kubernetes_validate.validate(document, version, strict=True)


def test_a_dra_object_is_not_served_by_1_33():
    """The check can fail: resource.k8s.io/v1 has no schema before 1.34."""
    claims = [d for d in documents("plain") if d["kind"] == "ResourceClaimTemplate"]
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(claims[0], "1.33", strict=True)


def test_an_unknown_field_is_refused():
    """Strictness is real: a misspelt field in a claim template fails."""
    [template] = [d for d in documents("plain") if d["kind"] == "ResourceClaimTemplate"]
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["cuont"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, "1.34", strict=True)


def test_the_pod_asks_for_one_gpu_through_the_claim_of_the_template():
    [pod] = [d for d in documents("plain") if d["kind"] == "Pod"]
    [template] = [d for d in documents("plain") if d["kind"] == "ResourceClaimTemplate"]
    [device_class] = [d for d in documents("plain") if d["kind"] == "DeviceClass"]
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": template["metadata"]["name"]}]
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"] == {
        "deviceClassName": device_class["metadata"]["name"],
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert "config" not in template["spec"]["spec"]["devices"]
    assert "gpu.nvidia.com" in device_class["spec"]["selectors"][0]["cel"]["expression"]


@pytest.mark.parametrize(
    "case, strategy, gate",
    [("time-slicing", "TimeSlicing", "TimeSlicingSettings=true"), ("mps", "MPS", "MPSSupport=true")],
)
def test_sharing_goes_through_the_claims_opaque_config_and_the_drivers_gate(case, strategy, gate):
    found = documents(case)
    [template] = [d for d in found if d["kind"] == "ResourceClaimTemplate"]
    [config] = template["spec"]["spec"]["devices"]["config"]
    assert config["requests"] == ["gpu"] and config["opaque"]["driver"] == "gpu.nvidia.com"
    assert config["opaque"]["parameters"]["kind"] == "GpuConfig"
    assert config["opaque"]["parameters"]["sharing"]["strategy"] == strategy
    [daemonset] = [d for d in found if d["kind"] == "DaemonSet"]
    env = {item["name"]: item.get("value") for item in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FEATURE_GATES"] == gate
    assert (case == "mps") == any(d["kind"] == "Role" for d in found)


def test_the_kubelet_plugin_runs_only_on_dra_nodes_and_reads_the_driver_root():
    [daemonset] = [d for d in documents("driver-container") if d["kind"] == "DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpu-node.io/gpu-allocator": "dra"}
    env = {item["name"]: item.get("value") for item in spec["containers"][0]["env"]}
    assert env["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    [root] = [volume for volume in spec["volumes"] if volume["name"] == "driver-root"]
    assert root["hostPath"]["path"] == "/run/nvidia/driver"


def test_the_helm_values_carry_the_same_root_placement_and_compute_domains():
    values = yaml.safe_load(
        render_helm_values(
            settings(
                nvidia_driver_root="/run/nvidia/driver",
                dra_driver_install_method="helm",
                dra_compute_domains=True,
                dra_imex="host-managed",
            )
        )
    )
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver" and values["image"]["tag"] == "v0.5.0"
    assert values["resources"]["computeDomains"] == {"enabled": True, "imex": {"mode": "hostManaged"}}
    assert values["featureGates"] == {"HostManagedIMEXDaemon": True}
    term = values["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "gpu-node.io/gpu-allocator", "operator": "In", "values": ["dra"]}]}
    ]
    # The Kubernetes part of the values is an affinity a pod takes: valid strictly as one.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "x", "image": "x"}], "affinity": values["kubeletPlugin"]["affinity"]},
    }
    for version in VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)


@pytest.mark.parametrize(
    "server, refused", [("v1.33.4", True), ("v1.28.0", True), ("v1.34.0", False), ("v1.37.1+k3s1", False), ("", True)]
)
def test_a_cluster_older_than_1_34_is_refused_in_one_line(server, refused):
    refusal = dra.kubernetes_refusal(server)
    assert (refusal is not None) == refused
    if refusal:
        assert "\n" not in refusal and "1.34" in refusal


def test_every_api_version_written_in_a_dra_template_is_rendered_and_so_checked():
    """No DRA template branch with an apiVersion escapes the matrix above."""
    from test_k8s_schemas import REPO, TEMPLATE_API

    written = set()
    for path in (REPO / "templates" / "k8s" / "dra").glob("*.j2"):
        written |= set(TEMPLATE_API.findall(path.read_text()))
    rendered = {(document["apiVersion"], document["kind"]) for case in CASES for document in documents(case)}
    assert ("resource.k8s.io/v1", "DeviceClass") in written
    assert written == rendered


def folder(case: str, minor: str, **more) -> dict[str, str]:
    """What deploy/render_cluster.py writes for a DRA group with the case's settings (the pure function it writes)."""
    chosen = settings(**CASES[case], **more)
    return cluster_files(parse_settings({}), [settings_only_node("gpu1", chosen)], minor)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("method", ["static", "helm"])
def test_every_file_of_the_gitops_folder_is_valid_strictly(method, version):
    checked = 0
    for case in sorted(CASES):
        written = folder(case, version, dra_driver_install_method=method)
        for path, text in written.items():
            if path.startswith(("manifests/", "smoke/")):
                for document in manifest_documents(text):
                    kubernetes_validate.validate(document, version, strict=True)
                    checked += 1
        if method == "helm":
            affinity = yaml.safe_load(written["helm/dra-values.yaml"])["kubeletPlugin"]["affinity"]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "x"},
                "spec": {"containers": [{"name": "x", "image": "x"}], "affinity": affinity},
            }
            kubernetes_validate.validate(pod, version, strict=True)
    kinds = {
        document["kind"]
        for text in folder("plain", version).values()
        if text.startswith("apiVersion")
        for document in manifest_documents(text)
    }
    assert checked and {"DeviceClass", "ResourceClaimTemplate", "DaemonSet", "Pod"} <= kinds, kinds


def test_the_gitops_folder_is_refused_for_1_33_in_one_line():
    from deploy.tasks.gitops import RenderError

    with pytest.raises(RenderError) as refused:
        folder("plain", "1.33")
    assert "\n" not in str(refused.value) and "manifests_kubernetes_version is 1.33" in str(refused.value)


def test_the_wheel_carries_every_template_folder_the_dra_templates_included():
    """pyproject.toml's package data names each templates/ folder with a .j2 (red without k8s/dra)."""
    import tomllib
    from test_k8s_schemas import REPO

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {path.parent.relative_to(REPO / "templates") for path in (REPO / "templates").rglob("*.j2")}
    packages = {".".join(["gpu_node.template_files", *folder.parts]) for folder in folders}
    assert {"gpu_node.template_files.k8s.dra"} <= packages
    assert packages <= set(setup["packages"]) and packages <= set(setup["package-data"])
