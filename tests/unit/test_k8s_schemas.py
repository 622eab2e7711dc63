"""
Every object the Kubernetes half applies, rendered by the deploy's own functions (deploy/tasks/k8s.py,
deploy/k8s/gpushare.py, deploy/k8s/health_monitor.py, the kube-scheduler static pod edit), checked
offline against the Kubernetes OpenAPI schemas kubernetes-validate ships, for every minor from 1.28
to the newest that package has: strict, so an unknown field is an error. No API server runs here.

An object in an API group/version a release no longer serves has no schema in that release's set.
The deploy itself has no check for that (kubectl apply would meet the API server's "no matches for
kind"): ``schema_problem`` below, a test helper, turns kubernetes-validate's errors into one line.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from packaging.version import Version

from deploy.facts.gpu_node_identity import GpuNode
from deploy.k8s import health_monitor
from deploy.k8s.gpushare import (
    NODE_LABEL,
    check_scheduler_manifest,
    device_plugin_manifest,
    edit_scheduler_manifest,
    extender_manifest,
    scheduler_config,
)
from deploy.operations.kubectl import manifest_documents, stamp_manifest
from deploy.settings import DEFAULTS, parse_settings
from deploy.tasks.k8s import (
    node_labels,
    render_device_plugin,
    render_helm_values,
    render_runtime_class,
    render_smoke_pod,
)

OLDEST = "1.28"
# all_versions() lists each release twice (its plain and its strict schema folder)
VERSIONS = sorted(
    {
        kubernetes_validate.utils.major_minor(version)
        for version in kubernetes_validate.utils.all_versions()
        if Version(version) >= Version(OLDEST)
    },
    key=Version,
)
REPO = Path(__file__).resolve().parents[2]
SCHEDULER_POD = REPO / "tests" / "fixtures" / "gpushare" / "kube-scheduler-static-pod.yaml"


# kubernetes_validate.validate re-reads a release's 1.8 MB _definitions.json on every call; the
# matrix reads each file once.
@pytest.fixture(scope="module", autouse=True)
def schema_files_read_once():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            kubernetes_validate.utils, "schema_contents", functools.cache(kubernetes_validate.utils.schema_contents)
        )
        yield


def one_line(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def schema_problem(document: dict, version: str) -> str | None:
    """None when ``document`` is valid (strict) for Kubernetes ``version``; else one line saying why."""
    kind, api_version = document.get("kind"), document.get("apiVersion")
    name = (document.get("metadata") or {}).get("name", "?")
    try:
        checked = kubernetes_validate.validate(document, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return f"{kind} {api_version} is not served by Kubernetes {version}"
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        return one_line(
            f"{kind} {name} ({api_version}) is invalid for Kubernetes {version} at {where}: {error.message}"
        )
    if checked != version:  # validate() silently falls back to the nearest older schema set
        return f"{kind} {name}: no Kubernetes {version} schemas in kubernetes-validate (it used {checked})"
    return None


def problems(documents: list[dict], version: str) -> list[str]:
    return [problem for problem in (schema_problem(document, version) for document in documents) if problem]


# What is rendered, from the deploy's own functions.

GPU = ("NVIDIA A100-SXM4-40GB",)


def gpu_node(name: str, data: dict, products: tuple[str, ...] = GPU, pci_gpus: int = 1) -> GpuNode:
    settings = parse_settings(data)
    return GpuNode(
        host_name=name,
        node_name=name,
        products=products,
        pci_gpus=pci_gpus,
        nvidia_smi="ok",
        gpu_sharing=settings.gpu_sharing,
        nvidia_runtime_default=settings.nvidia_runtime_default,
        settings=settings,
    )


# Control-plane settings, and the settings of the GPU nodes of the run.
PLUGIN_VARIANTS = {
    "no-sharing": ({}, [{}]),
    "time-slicing": (
        {
            "gpu_sharing": "time-slicing",
            "gpu_sharing_replicas": "10",
            "time_slicing_rename_by_default": "true",
            "time_slicing_fail_requests_greater_than_one": "true",
        },
        [{"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "10"}],
    ),
    "mps-runtimeclass": (
        {"gpu_sharing": "mps", "gpu_sharing_replicas": "4", "nvidia_runtime_default": "false"},
        [{"gpu_sharing": "mps", "nvidia_runtime_default": "false"}],
    ),
    "mig-single": ({"mig_strategy": "single"}, [{"mig_strategy": "single"}]),
    "mig-mixed": ({"mig_strategy": "mixed"}, [{"mig_strategy": "mixed"}]),
    "driver-root": ({"nvidia_driver_root": "/run/nvidia/driver"}, [{"nvidia_driver_root": "/run/nvidia/driver"}]),
    "cdi": (
        {"cdi": "true", "nvidia_driver_root": "/run/nvidia/driver"},
        [{"cdi": "true", "nvidia_driver_root": "/run/nvidia/driver"}],
    ),
    # one cluster, nodes sharing differently (one ConfigMap key each, the MPS daemon, a gpushare node)
    "mixed-nodes": (
        {},
        [
            {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": "4"},
            {"gpu_sharing": "mps"},
            {"mig_strategy": "mixed"},
            {"gpu_sharing": "gpushare"},
        ],
    ),
}


def plugin_inputs(variant: str):
    control_plane, nodes = PLUGIN_VARIANTS[variant]
    return parse_settings(control_plane), [gpu_node(f"gpu{i}", data) for i, data in enumerate(nodes)]


def applied(text: str, bundle: str) -> list[dict]:
    """The documents as apply_manifests sends them (with its bundle and digest annotations)."""
    return manifest_documents(stamp_manifest(text, bundle)[0])


def helm_values_as_objects(values_text: str) -> list[dict]:
    """
    Helm values are no Kubernetes object: the chart copies parts of them into objects. Those parts
    are checked as such: the pod-spec fields into a Pod, the config map into a ConfigMap's data.
    """
    values = yaml.safe_load(values_text)
    spec = {key: values[key] for key in HELM_POD_SPEC_VALUES if key in values}
    spec["containers"] = [{"name": "nvidia-device-plugin-ctr", "image": "placeholder.invalid/plugin:0"}]
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helm-values-pod-fields"}, "spec": spec},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "helm-values-config-map"},
            "data": values["config"]["map"],
        },
    ]


# Values keys the chart puts into its DaemonSet's pod spec as they are.
HELM_POD_SPEC_VALUES = ("affinity", "tolerations", "priorityClassName", "runtimeClassName", "nodeSelector")
# The other values keys gpu-node may set, as NVIDIA's chart (nvdp/nvidia-device-plugin) names them.
HELM_CHART_VALUES = {
    "config": {"name", "map", "default", "fallbackStrategies"},
    "nvidiaDriverRoot": None,
    "gfd": {"enabled"},
    "nfd": {"enabled"},
}


def helm_values_problems(values: dict) -> list[str]:
    """What the schema check cannot see: a key the chart does not read (ignored without a word)."""
    found = [
        f"values key {key!r}: not read by the chart"
        for key in values
        if key not in HELM_POD_SPEC_VALUES and key not in HELM_CHART_VALUES
    ]
    for key, known in HELM_CHART_VALUES.items():
        if known and isinstance(values.get(key), dict):
            found += [f"values key {key}.{sub!r}: not read by the chart" for sub in values[key] if sub not in known]
    config = values.get("config") or {}
    if config.get("default") not in (config.get("map") or {}):
        found.append(f"config.default {config.get('default')!r} is not a key of config.map")
    if not set(config.get("fallbackStrategies", [])) <= {"named", "single"}:
        found.append(f"config.fallbackStrategies {config['fallbackStrategies']!r}: only named and single exist")
    return found


LABELLED_NODES = {
    "a100": gpu_node("gpu-a100", {}),
    "t4-time-slicing": gpu_node("gpu-t4", {"gpu_sharing": "time-slicing"}, products=("Tesla T4",)),
    "mps": gpu_node("gpu-mps", {"gpu_sharing": "mps"}),
    "odd-product-name": gpu_node(
        "gpu-odd",
        {},
        products=("NVIDIA GeForce RTX 4090 Laptop GPU (Max-Q) / Engineering Sample #2 with a very long name",),
    ),
    "no-product-name": gpu_node("gpu-noname", {}, products=(), pci_gpus=2),
    "gpushare": gpu_node("gpu-share", {"gpu_sharing": "gpushare"}),
}


def node_label_objects(name: str) -> list[dict]:
    """``kubectl label node`` changes the Node's metadata.labels: the Node it leaves, as far as set."""
    node = LABELLED_NODES[name]
    labels = {key: value for key, value in node_labels(node).items() if value is not None}
    if node.gpu_sharing == "gpushare":
        labels[NODE_LABEL] = "true"  # deploy/tasks/gpushare.py's label
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.node_name, "labels": labels}}]


def edited_scheduler_pod() -> list[dict]:
    config_path = DEFAULTS["gpushare_scheduler_config_path"]
    text = edit_scheduler_manifest(SCHEDULER_POD.read_text(), config_path, "0" * 64)
    check_scheduler_manifest(text, config_path)  # the deploy's own check, before the schema's
    return [yaml.safe_load(text)]


# bundle name -> documents for a Kubernetes version (only the extender depends on it).
def template_bundles() -> dict:
    bundles = {"runtimeclass": lambda version: applied(render_runtime_class(), "runtimeclass")}
    for variant in PLUGIN_VARIANTS:
        bundles[f"device-plugin/{variant}"] = functools.partial(
            lambda variant, version: applied(render_device_plugin(*plugin_inputs(variant)), "nvidia-device-plugin"),
            variant,
        )
    for variant in ("no-sharing", "time-slicing", "mps-runtimeclass"):
        bundles[f"smoke-pod/{variant}"] = functools.partial(
            lambda variant, version: manifest_documents(render_smoke_pod(*plugin_inputs(variant))), variant
        )
    for interval in ("30s", "1h"):  # the bounds of gpu_health_monitor_interval
        bundles[f"gpu-health-monitor/{interval}"] = functools.partial(
            lambda interval, version: applied(
                health_monitor.render(
                    parse_settings({"gpu_health_monitor": "npd", "gpu_health_monitor_interval": interval})
                ),
                health_monitor.BUNDLE,
            ),
            interval,
        )
    bundles["gpushare-extender"] = lambda version: applied(
        extender_manifest(f"v{version}.0", DEFAULTS["gpushare_extender_image"]), "gpushare-extender"
    )
    for unit in ("GiB", "MiB"):
        bundles[f"gpushare-device-plugin/{unit}"] = functools.partial(
            lambda unit, version: applied(
                device_plugin_manifest(DEFAULTS["gpushare_device_plugin_image"], unit), "gpushare-device-plugin"
            ),
            unit,
        )
    return bundles


def other_bundles() -> dict:
    bundles = {}
    for variant in PLUGIN_VARIANTS:
        bundles[f"helm-values/{variant}"] = functools.partial(
            lambda variant, version: helm_values_as_objects(render_helm_values(*plugin_inputs(variant))), variant
        )
    for name in LABELLED_NODES:
        bundles[f"node-labels/{name}"] = functools.partial(lambda name, version: node_label_objects(name), name)
    bundles["kube-scheduler-static-pod"] = lambda version: edited_scheduler_pod()
    return bundles


TEMPLATE_BUNDLES = template_bundles()
BUNDLES = {**TEMPLATE_BUNDLES, **other_bundles()}


def test_the_matrix_runs_from_1_28_to_at_least_the_pinned_floor():
    """kubernetes-validate>=1.33 (pyproject.toml): its schemas must cover 1.28 up to 1.33 at least."""
    assert VERSIONS[0] == OLDEST
    assert Version(VERSIONS[-1]) >= Version("1.33")
    assert [f"1.{minor}" for minor in range(28, int(VERSIONS[-1].split(".")[1]) + 1)] == VERSIONS


@pytest.mark.parametrize(
    "bundle, version",
    [pytest.param(bundle, version, id=f"{bundle}@{version}") for bundle in BUNDLES for version in VERSIONS],
)
def test_rendered_objects_are_valid_for_the_release(bundle, version):
    documents = BUNDLES[bundle](version)
    assert documents, f"{bundle} rendered no object"
    found = problems(documents, version)
    assert not found, "\n".join(found)


# The checks can fail.


@pytest.mark.parametrize("version", VERSIONS)
def test_a_misspelt_field_is_refused_in_strict_mode(version):
    (daemonset,) = [
        d for d in applied(render_device_plugin(*plugin_inputs("no-sharing")), "x") if d["kind"] == "DaemonSet"
    ]
    daemonset["spec"]["template"]["spec"]["toleration"] = daemonset["spec"]["template"]["spec"].pop("tolerations")
    assert schema_problem(daemonset, version) == (
        f"DaemonSet nvidia-device-plugin (apps/v1) is invalid for Kubernetes {version} at spec.template.spec: "
        "Additional properties are not allowed ('toleration' was unexpected)"
    )


def test_a_wrong_type_is_refused():
    (deployment,) = [d for d in applied(extender_manifest("v1.30.0", "x/y:1"), "x") if d["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = "one"
    assert schema_problem(deployment, "1.30").startswith(
        "Deployment gpushare-schd-extender (apps/v1) is invalid for Kubernetes 1.30 at spec.replicas: "
        "'one' is not of type 'integer'"
    )


def test_a_misspelt_helm_values_pod_field_is_refused():
    values = yaml.safe_load(render_helm_values(*plugin_inputs("no-sharing")))
    values["tolerations"][0]["operater"] = values["tolerations"][0].pop("operator")
    found = problems(helm_values_as_objects(yaml.safe_dump(values)), "1.28")
    assert len(found) == 1 and "'operater' was unexpected" in found[0]


@pytest.mark.parametrize("variant", PLUGIN_VARIANTS)
def test_helm_values_set_only_what_the_chart_reads(variant):
    values = yaml.safe_load(render_helm_values(*plugin_inputs(variant)))
    assert helm_values_problems(values) == []


def test_a_helm_values_key_the_chart_does_not_read_is_refused():
    values = yaml.safe_load(render_helm_values(*plugin_inputs("no-sharing")))
    values["runtimeClasName"] = values.pop("priorityClassName")
    values["config"]["default"] = "absent"
    assert helm_values_problems(values) == [
        "values key 'runtimeClasName': not read by the chart",
        "config.default 'absent' is not a key of config.map",
    ]


def test_a_version_kubernetes_validate_lacks_is_named():
    """A minor newer than the package's schemas is an error, not a silent check against older ones."""
    newer = f"1.{int(VERSIONS[-1].split('.')[1]) + 1}"
    with pytest.raises(kubernetes_validate.utils.VersionNotSupportedError):
        schema_problem(applied(render_runtime_class(), "x")[0], newer)


# gpushare upstream's v0.3.0 device plugin shipped its DaemonSet as extensions/v1beta1, which
# Kubernetes stopped serving in 1.16. Written here (not upstream's file); valid as apps/v1.
# A bare DaemonSet in the API group gpushare's v0.3.0 release used, removed from Kubernetes in 1.16.
OLD_DAEMONSET = """\
apiVersion: extensions/v1beta1
kind: DaemonSet
metadata:
  name: old-api-example
  namespace: kube-system
spec:
  selector:
    matchLabels: {app: old-api-example}
  template:
    metadata:
      labels: {app: old-api-example}
    spec:
      containers:
      - name: example
        image: placeholder.invalid/example:1
"""


@pytest.mark.parametrize("version", VERSIONS)
def test_a_daemonset_in_extensions_v1beta1_is_refused_in_one_line(version):
    old = yaml.safe_load(OLD_DAEMONSET)
    assert schema_problem(old, version) == f"DaemonSet extensions/v1beta1 is not served by Kubernetes {version}"
    # the refusal is about the API version only: the same object in apps/v1 is valid
    assert schema_problem({**old, "apiVersion": "apps/v1"}, version) is None


# A removal inside the matrix: flowcontrol.apiserver.k8s.io/v1beta3 is served up to 1.31, removed in
# 1.32 (Kubernetes' deprecated API migration guide): the check really uses each release's own set.
FLOW_SCHEMA = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta3",
    "kind": "FlowSchema",
    "metadata": {"name": "gpu-node-example"},
    "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 1000},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_an_api_removed_inside_the_range_is_refused_from_its_removal_on(version):
    expected = (
        None
        if Version(version) < Version("1.32")
        else f"FlowSchema flowcontrol.apiserver.k8s.io/v1beta3 is not served by Kubernetes {version}"
    )
    assert schema_problem(FLOW_SCHEMA, version) == expected


# What the deploy could still name.

TEMPLATE_API = re.compile(r"^apiVersion:\s*(\S+)\s*\nkind:\s*(\S+)\s*$", re.MULTILINE)


def written_in_templates() -> set[tuple[str, str]]:
    pairs = set()
    for path in (REPO / "templates" / "k8s").rglob("*.j2"):
        if path.parent.name == "dra":
            continue  # from 1.34 only: test_dra_manifests.py renders and checks them
        pairs |= set(TEMPLATE_API.findall(path.read_text()))
    return pairs


def test_every_api_version_written_in_a_template_is_rendered_and_so_checked():
    """No template branch with an apiVersion escapes the matrix above (an old one kept behind an if)."""
    rendered = {
        (document["apiVersion"], document["kind"])
        for render in TEMPLATE_BUNDLES.values()
        for document in render(OLDEST)
    }
    written = written_in_templates()
    assert ("apps/v1", "DaemonSet") in written  # the scan reads the templates at all
    assert written == rendered


def test_no_removed_extensions_v1beta1_anywhere_in_deploy_or_templates():
    named = [
        str(path.relative_to(REPO))
        for folder in ("deploy", "templates")
        for path in (REPO / folder).rglob("*")
        if path.is_file() and path.suffix in (".py", ".j2", ".yaml") and "extensions/v1beta1" in path.read_text()
    ]
    assert named == []


@pytest.mark.parametrize("version", VERSIONS)
def test_the_scheduler_config_is_no_api_object_so_it_is_checked_elsewhere(version):
    """KubeSchedulerConfiguration is a file kube-scheduler reads, not an object the API server serves:
    kubernetes-validate has no schema for it; test_gpushare_scheduler_config.py checks it."""
    document = scheduler_config(f"v{version}.0")
    assert document["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert (
        schema_problem(document, version)
        == f"KubeSchedulerConfiguration kubescheduler.config.k8s.io/v1 is not served by Kubernetes {version}"
    )


# Labels: the schema types them only as strings; Kubernetes' label syntax (qualified-name key with an
# optional DNS-subdomain prefix, value of at most 63 characters) is checked from its documented rules.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def label_problem(key: str, value: str | None) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: prefix is not a DNS subdomain"
    if len(name) > 63 or not LABEL_NAME.match(name):
        return f"label key {key!r}: name is not a qualified name"
    if value is not None and value != "" and (len(value) > 63 or not LABEL_NAME.match(value)):
        return f"label {key}={value!r}: not a valid label value"
    return None


@pytest.mark.parametrize("name", LABELLED_NODES)
def test_node_labels_follow_kubernetes_label_syntax(name):
    node = LABELLED_NODES[name]
    labels = node_labels(node)
    assert labels, f"{name}: no label managed"
    found = [problem for problem in (label_problem(k, v) for k, v in labels.items()) if problem]
    assert DNS_SUBDOMAIN.match(node.node_name) and len(node.node_name) <= 253
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "key, value",
    [
        ("accelerator", "NVIDIA A100-SXM4-40GB"),  # a product name as nvidia-smi prints it
        ("accelerator", "nvidia-" + "x" * 60),
        ("accelerator", "nvidia-a100-"),
        ("Nvidia.com/gpu.present", "true"),
        ("nvidia.com/", "true"),
    ],
)
def test_an_invalid_label_is_refused(key, value):
    assert label_problem(key, value) is not None
