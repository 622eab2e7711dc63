"""
deploy/render_cluster.py, the GitOps files: run for real on @local (this machine, into a temporary
folder; no cluster and no GPU node is reached, none exists here), and compared with what
deploy/k8s_gpu.py sends in its plan tests, where no real cluster exists either: test_k8s_plan.py's
FakeCluster keeps what ``kubectl apply --server-side`` was sent and the helm command's values,
test_gpushare_plan.py's GpushareHost the files the control plane was given. The objects the folder
holds are checked strictly against the Kubernetes OpenAPI schemas of every supported minor with
kubernetes-validate (test_k8s_schemas.py's check).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyinfra
import pytest
import yaml
from plan import run_pyinfra
from pyinfra.api import Inventory
from pyinfra.connectors.fake import FakeConnector
from pyinfra_cli.util import load_deploy_file
from test_gpushare_plan import CONFIG as SCHEDULER_CONFIG_PATH
from test_gpushare_plan import GpushareHost
from test_hostile_values_run import PWNED, STYLES, accepted, hostile_value
from test_k8s_plan import A100, FakeCluster, gpu_identity_lines, object_key, run_plan, stdin_manifest
from test_k8s_schemas import (
    HELM_POD_SPEC_VALUES,
    VERSIONS,
    helm_values_as_objects,
    helm_values_problems,
    problems,
    schema_files_read_once,  # noqa: F401 (its schema cache, for this module too)
)

from deploy.operations import controller_files
from deploy.operations.controller_files import ControllerFile
from deploy.operations.kubectl import manifest_documents
from deploy.settings import parse_settings
from deploy.tasks.gitops import RenderError, cluster_files, settings_only_node

REPO = Path(__file__).resolve().parents[2]
RENDER = str(REPO / "deploy" / "render_cluster.py")
INSPECT_SHA = "5" * 64


def read_tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``: relative path -> bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@dataclass
class Rendered:
    folder: Path
    error: Exception | None
    state: object = None

    def operations(self) -> list[str]:
        """The names of the operations the run planned, in order (without the deploy's name before them)."""
        return [", ".join(self.state.op_meta[op_hash].names).split(" | ")[-1] for op_hash in self.state.get_op_order()]

    @property
    def files(self) -> dict[str, bytes]:
        return read_tree(self.folder) if self.folder.exists() else {}

    def text(self, relative: str) -> str:
        return (self.folder / relative).read_text()

    def documents(self) -> list[dict]:
        return [
            doc
            for path in sorted((self.folder / "manifests").glob("*.yaml"))
            for doc in manifest_documents(path.read_text())
        ]

    def objects(self) -> dict[tuple[str, str, str], dict]:
        """What ``kubectl apply -f manifests/`` creates: one object per kind, namespace and name."""
        found = {}
        for document in self.documents():
            assert object_key(document) not in found, f"{object_key(document)} twice in the folder"
            found[object_key(document)] = document
        return found


def inventory_text(gpu_hosts: list[str], host_data: dict[str, dict]) -> str:
    """An inventory file for the render with plan test's hosts: control plane @fake/cp1 and the GPU nodes."""
    control_plane = [("@fake/cp1", host_data.get("@fake/cp1", {}))]
    gpu_nodes = [(name, host_data.get(name, {})) for name in gpu_hosts]
    return f"control_plane = {control_plane!r}\ngpu_nodes = {gpu_nodes!r}\n"


def render(monkeypatch, folder: Path, data: dict, inventory: str | None = None, host_name: str = "@local") -> Rendered:
    """``pyinfra -y @local deploy/render_cluster.py --data ...`` in ``folder``'s parent (its working directory),
    through pyinfra's API in this process; ``inventory``: the text of the file manifests_inventory names."""
    monkeypatch.chdir(folder.parent)
    data = {"manifests_dir": folder.name, **data}
    if inventory is not None:
        (folder.parent / "inventory.py").write_text(inventory)
        data["manifests_inventory"] = "inventory.py"
    monkeypatch.setattr(pyinfra, "is_cli", True)
    hosts = Inventory(([(host_name, {})], {}), override_data=data)
    state, error = run_pyinfra(hosts, lambda state: load_deploy_file(state, RENDER))
    return Rendered(folder, error, state)


# --- what the deploy sends, what the folder holds ------------------------------------------------


@dataclass(frozen=True)
class Case:
    data: dict
    host_data: dict
    gpu_hosts: tuple[str, ...] = ("@fake/gpu1",)
    gpushare_version: tuple[str, str] | None = None  # the cluster's version where gpushare runs


CASES = {
    "static-no-sharing": Case({}, {}),
    "static-sharing-per-node": Case(
        {"smoke_test": "false"},
        {
            "@fake/cp1": {"gpu_sharing": "time-slicing", "gpu_sharing_replicas": 4},
            "@fake/gpu1": {"gpu_sharing": "mps", "gpu_sharing_replicas": 8},
            "@fake/gpu2": {
                "gpu_sharing": "time-slicing",
                "gpu_sharing_replicas": 10,
                "time_slicing_rename_by_default": True,
                "nvidia_runtime_default": False,
            },
            "@fake/gpu3": {"mig_strategy": "mixed"},
        },
        gpu_hosts=("@fake/gpu1", "@fake/gpu2", "@fake/gpu3"),
    ),
    "static-cdi-driver-root": Case(
        {"smoke_test": "false", "cdi": "true", "nvidia_driver_root": "/run/nvidia/driver"}, {}
    ),
    "helm-no-sharing": Case({"device_plugin_install_method": "helm", "smoke_test": "false"}, {}),
    "health-monitor": Case(
        {"gpu_health_monitor": "npd", "gpu_health_monitor_interval": "90s", "smoke_test": "false"}, {}
    ),
    "helm-sharing": Case(
        {
            "device_plugin_install_method": "helm",
            "smoke_test": "false",
            "gpu_sharing": "time-slicing",
            "gpu_sharing_replicas": "6",
        },
        {"@fake/gpu2": {"gpu_sharing": "mps"}},
        gpu_hosts=("@fake/gpu1", "@fake/gpu2"),
    ),
    "gpushare": Case(
        {"gpu_sharing": "gpushare", "smoke_test": "false", "gpushare_inspect_sha256": INSPECT_SHA},
        {},
        gpushare_version=("1", "28"),
    ),
    "gpushare-1.23-beside-time-slicing": Case(
        {"smoke_test": "false", "gpushare_inspect_sha256": INSPECT_SHA, "gpushare_memory_unit": "MiB"},
        {"@fake/gpu1": {"gpu_sharing": "gpushare"}, "@fake/gpu2": {"gpu_sharing": "time-slicing"}},
        gpu_hosts=("@fake/gpu1", "@fake/gpu2"),
        gpushare_version=("1", "23"),
    ),
}
HELM_NOT_YET = ["list-rc 0", "list-out []", "values-rc 1", "values-err Error: release: not found"]


def stood_in_cluster(monkeypatch, case: Case) -> FakeCluster:
    """The control plane's cluster for the case (no real one here); gpushare's keeps the files it is given."""
    nodes = {name.removeprefix("@fake/"): {} for name in case.gpu_hosts}
    if not case.gpushare_version:
        return FakeCluster(nodes={**nodes, "cp1": {}}, helm_lines=HELM_NOT_YET)
    cluster = GpushareHost(version=case.gpushare_version, nodes={**nodes, "cp1": {}})

    def kept(connector, filename_or_io, remote_filename, *args, **kwargs):
        filename_or_io.seek(0)  # as pyinfra's real connectors do (its sha1 check read it)
        data = filename_or_io.read()
        cluster.files[remote_filename] = data.encode() if isinstance(data, str) else data
        return True

    monkeypatch.setattr(FakeConnector, "put_file", kept)
    return cluster


def deploy_plan(monkeypatch, case: Case, cluster: FakeCluster | None = None):
    """deploy/k8s_gpu.py's plan run for the case; the stood-in cluster then holds what it was sent."""
    cluster = cluster or stood_in_cluster(monkeypatch, case)
    gpu = {name: gpu_identity_lines(name.removeprefix("@fake/"), [A100]) for name in case.gpu_hosts}
    run = run_plan(monkeypatch, cluster, gpu, data=case.data, host_data=case.host_data)
    assert not run.failed
    return cluster, run


def render_case(monkeypatch, tmp_path: Path, case: Case) -> Rendered:
    data = dict(case.data)
    if case.gpushare_version:
        data["manifests_kubernetes_version"] = ".".join(case.gpushare_version)
    rendered = render(monkeypatch, tmp_path / "gitops", data, inventory_text(list(case.gpu_hosts), case.host_data))
    assert rendered.error is None, rendered.error
    return rendered


def sent_text(command: str) -> str:
    """The text a ``printf '%s\\n' TEXT | ...`` command feeds its program (less printf's newline)."""
    words = shlex.split(command)
    return words[words.index("printf") + 2]


@pytest.mark.parametrize("name", CASES)
def test_the_folder_holds_the_objects_the_deploy_applies_no_real_cluster(monkeypatch, tmp_path, name):
    """Compared as objects (kind, namespace, name, every field), and byte for byte with the text kubectl
    was sent for each bundle; the Helm values and chart as the helm command has them; gpushare's
    scheduler config as the control plane was given it."""
    case = CASES[name]
    cluster, run = deploy_plan(monkeypatch, case)
    rendered = render_case(monkeypatch, tmp_path, case)

    assert rendered.objects() == cluster.objects
    applied = {
        stdin_manifest(command)[0]["metadata"]["annotations"]["gpu-node.io/bundle"]: sent_text(command)
        for command in run.applies()
    }
    assert {f"manifests/{bundle}.yaml": text for bundle, text in applied.items()} == {
        path: text.decode() for path, text in rendered.files.items() if path.startswith("manifests/")
    }

    helm = [command for command in run.control_plane_commands() if " upgrade --install nvdp " in command]
    if case.data.get("device_plugin_install_method") == "helm":
        assert rendered.text("helm/values.yaml") == sent_text(helm[0])
        assert_the_gitops_tools_install_the_chart_helm_was_given(rendered, "nvidia-device-plugin", helm[0])
    else:
        assert helm == [] and "helm/values.yaml" not in rendered.files

    if case.gpushare_version:
        assert rendered.files["control-plane/kube-scheduler-config.yaml"] == cluster.files[SCHEDULER_CONFIG_PATH]
    else:
        assert "control-plane/kube-scheduler-config.yaml" not in rendered.files


def helm_command_chart(command: str) -> dict[str, str]:
    """What ``helm upgrade --install RELEASE CHART [--repo URL] --version V --namespace NS ...`` installs."""
    words = shlex.split(command)
    release, reference = words[words.index("--install") + 1 : words.index("--install") + 3]
    if "--repo" in words:
        repository, chart = words[words.index("--repo") + 1], reference
    else:  # an oci:// reference names the chart's repository and the chart
        repository, _, chart = reference.rpartition("/")
    return {
        "release": release,
        "repository": repository,
        "chart": chart,
        "version": words[words.index("--version") + 1],
        "namespace": words[words.index("--namespace") + 1],
        "values": yaml.safe_load(sent_text(command)),
        "create_namespace": "--create-namespace" in words,
    }


def expected_flux_objects(chart: dict) -> list[dict]:
    """Flux's HelmRepository and HelmRelease (source.toolkit.fluxcd.io/v1, helm.toolkit.fluxcd.io/v2) of the
    chart the helm command installs, every field as Flux's API documents it: built here from the command, not
    by the code under test."""
    labels = {"app.kubernetes.io/managed-by": "gpu-node"}
    name = chart["release"]
    repository = {"url": chart["repository"], "interval": "1h"}
    if chart["repository"].startswith("oci://"):
        repository["type"] = "oci"
    return [
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "HelmRepository",
            "metadata": {"name": name, "namespace": "flux-system", "labels": labels},
            "spec": repository,
        },
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": "flux-system", "labels": labels},
            "spec": {
                "interval": "1h",
                "releaseName": name,
                "targetNamespace": chart["namespace"],
                "storageNamespace": chart["namespace"],
                "install": {"createNamespace": chart["create_namespace"]},
                "chart": {
                    "spec": {
                        "chart": chart["chart"],
                        "version": chart["version"],
                        "sourceRef": {"kind": "HelmRepository", "name": name, "namespace": "flux-system"},
                    }
                },
                "values": chart["values"],
            },
        },
    ]


def expected_argocd_objects(chart: dict) -> list[dict]:
    """Argo CD's Application (argoproj.io/v1alpha1) of the same chart, as Argo CD's Helm guide writes one (an
    OCI repository without its oci:// prefix), the values as valuesObject."""
    return [
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {
                "name": chart["release"],
                "namespace": "argocd",
                "labels": {"app.kubernetes.io/managed-by": "gpu-node"},
            },
            "spec": {
                "project": "default",
                "source": {
                    "repoURL": chart["repository"].removeprefix("oci://"),
                    "chart": chart["chart"],
                    "targetRevision": chart["version"],
                    "helm": {"releaseName": chart["release"], "valuesObject": chart["values"]},
                },
                "destination": {"server": "https://kubernetes.default.svc", "namespace": chart["namespace"]},
                "syncPolicy": {
                    "syncOptions": [
                        *(["CreateNamespace=true"] if chart["create_namespace"] else []),
                        "ServerSideApply=true",
                    ]
                },
            },
        },
    ]


def assert_the_gitops_tools_install_the_chart_helm_was_given(rendered: Rendered, name: str, command: str) -> None:
    """flux/NAME.yaml and argocd/NAME.yaml hold exactly the fields of the expected objects (no field the test
    does not read: no registry package here checks these CRDs' schemas, see docs/cluster.md), with the chart,
    version, release, namespace and values of the helm command, the values as YAML."""
    chart = helm_command_chart(command)
    assert manifest_documents(rendered.text(f"flux/{name}.yaml")) == expected_flux_objects(chart)
    assert manifest_documents(rendered.text(f"argocd/{name}.yaml")) == expected_argocd_objects(chart)
    assert isinstance(chart["values"], dict)


@pytest.mark.parametrize(
    "name", ["static-sharing-per-node", "static-cdi-driver-root", "gpushare-1.23-beside-time-slicing", "health-monitor"]
)
def test_after_the_folder_is_applied_the_deploy_applies_nothing_no_real_cluster(monkeypatch, tmp_path, name):
    """``kubectl apply --server-side -f manifests/`` into the stood-in cluster, then deploy/k8s_gpu.py with
    the same settings: every bundle is at its digest, no apply and no diff; it labels the nodes."""
    case = CASES[name]
    rendered = render_case(monkeypatch, tmp_path, case)
    cluster = stood_in_cluster(monkeypatch, case)
    for path in sorted((rendered.folder / "manifests").glob("*.yaml")):
        cluster.answer(f"printf '%s\\n' {shlex.quote(path.read_text())} | kubectl apply --server-side -f - ")
    assert len(cluster.objects) == len(rendered.objects())
    _, run = deploy_plan(monkeypatch, case, cluster)
    assert run.applies() == [] and run.diffs() == []
    assert run.labels()


def test_the_readme_names_the_labels_the_deploy_sets_from_each_nodes_settings_no_real_cluster(monkeypatch, tmp_path):
    case = CASES["static-sharing-per-node"]
    cluster, _ = deploy_plan(monkeypatch, case)
    readme = render_case(monkeypatch, tmp_path, case).text("README.md")
    for host in case.gpu_hosts:
        labels = cluster.nodes[host.removeprefix("@fake/")]
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{host}` |"))
        for key in ("nvidia.com/device-plugin.config", "nvidia.com/mps.capable"):
            assert (f"`{key}={labels.get(key)}`" in row) == (key in labels), (row, labels)
    assert "gets the config `time-slicing-4`" in readme


# --- strict schemas, for every supported minor ------------------------------------------------------


def case_files(name: str, minor: str) -> dict[str, str]:
    """What the render writes for the case on a cluster of ``minor`` (the pure function the task writes)."""
    case = CASES[name]
    control_plane = parse_settings({**case.data, **case.host_data.get("@fake/cp1", {})})
    nodes = [
        settings_only_node(host, parse_settings({**case.host_data.get(host, {}), **case.data}))
        for host in case.gpu_hosts
    ]
    return cluster_files(control_plane, nodes, minor)


def test_the_render_writes_the_files_the_pure_function_gives(monkeypatch, tmp_path):
    """What the schema matrix below checks (cluster_files) is what the command writes."""
    rendered = render_case(monkeypatch, tmp_path, CASES["gpushare-1.23-beside-time-slicing"])
    expected = case_files("gpushare-1.23-beside-time-slicing", "1.23")
    assert rendered.files == {path: text.encode() for path, text in expected.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_of_every_folder_is_valid_for_the_release(version):
    found, values = [], []
    folders = {name: case_files(name, version) for name in CASES}
    folders["node-labels"] = node_labels_files(version)
    assert "manifests/node-labels.yaml" in folders["node-labels"]
    for name, written in folders.items():
        for path, text in written.items():
            if path.startswith("manifests/"):
                documents = manifest_documents(text)
                assert documents, path
                found += [f"{name}: {problem}" for problem in problems(documents, version)]
        if "helm/values.yaml" in written:
            values.append(written["helm/values.yaml"])
            found += [
                f"{name}: {problem}"
                for problem in problems(helm_values_as_objects(written["helm/values.yaml"]), version)
            ]
            found += [
                f"{name}: {problem}" for problem in helm_values_problems(yaml.safe_load(written["helm/values.yaml"]))
            ]
    assert values and not found, "\n".join(found)


def node_labels_files(version: str) -> dict[str, str]:
    """A folder with the GPU nodes' Node objects: the device plugin's nodes and gpushare's, each named."""
    nodes = [
        settings_only_node(host, parse_settings({**settings, "gpushare_inspect_sha256": INSPECT_SHA}))
        for host, (_, settings) in SYNC_NODES.items()
        if host != "@fake/dra"
    ]
    control_plane = parse_settings(
        {key: value for key, value in SYNC_DATA.items() if key != "manifests_kubernetes_version"}
    )
    return cluster_files(control_plane, nodes, version)


def api_objects(written: dict[str, str]) -> list[tuple[str, dict]]:
    """Every API object of a folder's files (a document with metadata: no Helm values, no scheduler config)."""
    return [
        (path, document)
        for path, text in written.items()
        if path.endswith(".yaml")
        for document in manifest_documents(text)
        if "metadata" in document
    ]


DRA_FOLDERS = {
    "dra-static": {"gpu_allocator": "dra"},
    "dra-helm": {"gpu_allocator": "dra", "dra_driver_install_method": "helm"},
}


def every_folder(version: str = "1.34") -> dict[str, dict[str, str]]:
    """The files of every case's folder, the DRA ones too, on a cluster of ``version``."""
    folders = {name: case_files(name, version) for name in CASES}
    folders.update({name: cluster_files(parse_settings(data), [], version) for name, data in DRA_FOLDERS.items()})
    folders["node-labels"] = node_labels_files(version)
    return folders


def test_every_object_of_every_folder_says_gpu_node_manages_it():
    unlabelled = [
        f"{name}: {path}: {document['kind']} {document['metadata']['name']}"
        for name, written in every_folder().items()
        for path, document in api_objects(written)
        if (document["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") != "gpu-node"
    ]
    assert not unlabelled, "\n".join(unlabelled)
    assert {document["kind"] for written in every_folder().values() for _, document in api_objects(written)} >= {
        "RuntimeClass",
        "Namespace",
        "ConfigMap",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "Deployment",
        "Service",
        "DeviceClass",
        "ResourceClaimTemplate",
        "Pod",
    }


def test_the_helm_values_are_yaml_the_config_files_blocks_of_it():
    """config.map's config files as YAML block scalars, as an operator reads and diffs them, not one JSON string
    with escaped newlines; the same text as the static manifests' ConfigMap holds for the same settings."""
    text = case_files("helm-no-sharing", VERSIONS[0])["helm/values.yaml"]
    assert "\\n" not in text
    configs = yaml.safe_load(text)["config"]["map"]
    assert configs and all(f"    {json.dumps(key)}: |\n" in text for key in configs)
    static = parse_settings({"smoke_test": "false"})
    (configmap,) = [
        doc
        for doc in manifest_documents(cluster_files(static, [], None)["manifests/nvidia-device-plugin.yaml"])
        if doc["kind"] == "ConfigMap"
    ]
    assert configs == configmap["data"]


def test_the_schema_check_sees_the_folders_objects():
    """The check above can fail: a misspelt field in a rendered DaemonSet is refused."""
    text = case_files("static-no-sharing", VERSIONS[0])["manifests/nvidia-device-plugin.yaml"]
    (daemonset,) = [doc for doc in manifest_documents(text) if doc["kind"] == "DaemonSet"]
    daemonset["spec"]["template"]["spec"]["nodeSelectr"] = {}
    assert problems([daemonset], VERSIONS[0])


# --- the command as an operator runs it ------------------------------------------------------------


def pyinfra_cli(cwd: Path, *data: str, seed: str = "0") -> subprocess.CompletedProcess:
    arguments = [part for item in data for part in ("--data", item)]
    return subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "@local", RENDER, *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": seed},
    )


def test_the_command_writes_the_same_bytes_every_time_and_a_second_run_changes_nothing(tmp_path):
    """The real CLI twice into two folders under different hash seeds (set and dict order would show),
    then again into the first: the same bytes, and pyinfra reports no change."""
    (tmp_path / "inventory.py").write_text(
        inventory_text(
            ["@fake/gpu1", "@fake/gpu2"],
            {
                "@fake/cp1": {"gpu_sharing": "time-slicing"},
                "@fake/gpu1": {"gpu_sharing": "gpushare"},
                "@fake/gpu2": {"gpu_sharing": "mps"},
            },
        )
    )
    common = ("manifests_inventory=inventory.py", "manifests_kubernetes_version=1.30")
    first = pyinfra_cli(tmp_path, "manifests_dir=one", *common, seed="1")
    second = pyinfra_cli(tmp_path, "manifests_dir=two", *common, seed="2")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert read_tree(tmp_path / "one") == read_tree(tmp_path / "two")
    assert sorted(read_tree(tmp_path / "one")) == [
        "README.md",
        "control-plane/kube-scheduler-config.yaml",
        "manifests/gpushare-device-plugin.yaml",
        "manifests/gpushare-extender.yaml",
        "manifests/nvidia-device-plugin.yaml",
        "manifests/runtimeclass.yaml",
    ]
    again = pyinfra_cli(tmp_path, "manifests_dir=one", *common, seed="3")
    assert again.returncode == 0, again.stderr
    total = next(line for line in again.stderr.splitlines() if "Grand total" in line).split()
    written = len(read_tree(tmp_path / "one"))
    assert total[-4:] == [str(written), "-", "-", str(written)]  # one operation a file, none a change


def test_dry_with_diff_shows_the_change_and_writes_nothing(tmp_path):
    first = pyinfra_cli(tmp_path, "manifests_dir=gitops")
    assert first.returncode == 0, first.stderr
    before = read_tree(tmp_path / "gitops")
    arguments = ["--dry", "--diff", "--data", "manifests_dir=gitops", "--data", "gpu_sharing=mps"]
    dry = subprocess.run(
        [sys.executable, "-m", "pyinfra", "@local", RENDER, *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr
    assert f"Will modify {tmp_path}/gitops/manifests/nvidia-device-plugin.yaml" in dry.stderr
    assert "+   mps-4: |" in dry.stderr and "-   no-sharing: |" in dry.stderr
    assert read_tree(tmp_path / "gitops") == before


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"gpu_sharing": "gpushare"},
            "manifests_kubernetes_version is not set: gpushare's scheduler config and extender "
            "depend on the cluster's Kubernetes minor",
        ),
        (
            {"gpu_sharing": "gpushare", "manifests_kubernetes_version": "1.22"},
            "manifests_kubernetes_version=1.22: gpushare needs Kubernetes >= 1.23",
        ),
        (
            {"manifests_kubernetes_version": "2.1"},
            "invalid setting manifests_kubernetes_version='2.1': allowed: a Kubernetes version such as 1.30",
        ),
        ({"manifests_inventory": "absent.py"}, "manifests_inventory=absent.py: no such file"),
    ],
)
def test_what_cannot_be_rendered_stops_in_one_line_before_any_file(monkeypatch, tmp_path, data, expected):
    rendered = render(monkeypatch, tmp_path / "gitops", data)
    assert rendered.error is not None and expected in str(rendered.error) and "\n" not in str(rendered.error)
    assert not rendered.folder.exists()


def test_control_planes_whose_settings_render_differently_are_refused(monkeypatch, tmp_path):
    inventory = "control_plane = [('cp1', {}), ('cp2', {'gpu_sharing': 'mps'})]\ngpu_nodes = [('gpu1', {})]\n"
    rendered = render(monkeypatch, tmp_path / "gitops", {}, inventory)
    assert isinstance(rendered.error, RenderError)
    assert str(rendered.error) == (
        "control_plane hosts cp1 and cp2 have settings that render different files "
        "(README.md, manifests/nvidia-device-plugin.yaml): give them the same "
        "Kubernetes settings"
    )
    assert not rendered.folder.exists()


def test_an_invalid_setting_of_an_inventory_host_names_the_host(monkeypatch, tmp_path):
    inventory = "gpu_nodes = [('gpu1', {'gpu_sharing': 'sometimes'})]\n"
    rendered = render(monkeypatch, tmp_path / "gitops", {}, inventory)
    assert "invalid setting gpu_sharing='sometimes'" in str(rendered.error)
    assert "(host gpu1 of inventory.py)" in str(rendered.error)


def test_only_on_the_controller(monkeypatch, tmp_path):
    rendered = render(monkeypatch, tmp_path / "gitops", {}, host_name="@fake/cp1")
    assert str(rendered.error) == (
        "deploy/render_cluster.py writes on the controller, not on @fake/cp1: "
        "run it as pyinfra @local deploy/render_cluster.py"
    )


def test_the_release_files_of_earlier_renders_are_removed(monkeypatch, tmp_path):
    """helm/release.yaml and helm/dra-release.yaml, our own shape before flux/ and argocd/: a sync would not read
    them, an operator might."""
    folder = tmp_path / "gitops"
    (folder / "helm").mkdir(parents=True)
    for name in ("release.yaml", "dra-release.yaml"):
        (folder / "helm" / name).write_text("chart: nvidia-device-plugin\n")
    rendered = render(monkeypatch, folder, {"device_plugin_install_method": "helm"})
    assert rendered.error is None
    assert sorted(path for path in rendered.files if path.startswith("helm/")) == ["helm/values.yaml"]


@pytest.mark.parametrize("data", [{}, {"device_plugin_install_method": "helm"}, {"gpu_allocator": "dra"}])
def test_a_render_into_an_empty_folder_plans_only_writes(monkeypatch, tmp_path, data):
    """No "Remove ... (not rendered)" where nothing is there to remove: one operation a file written."""
    rendered = render(monkeypatch, tmp_path / "gitops", data)
    assert rendered.error is None
    assert rendered.operations() == [f"Write gitops/{relative}" for relative in sorted(rendered.files)]


def test_a_file_the_new_settings_do_not_render_is_removed_and_others_kept(monkeypatch, tmp_path):
    folder = tmp_path / "gitops"
    helm = render(monkeypatch, folder, {"device_plugin_install_method": "helm"})
    assert {"helm/values.yaml", "flux/nvidia-device-plugin.yaml", "argocd/nvidia-device-plugin.yaml"} <= set(helm.files)
    (folder / "kustomization.yaml").write_text("resources: []\n")  # the operator's own file
    static = render(monkeypatch, folder, {})
    assert static.error is None
    assert sorted(static.files) == [
        "README.md",
        "kustomization.yaml",
        "manifests/nvidia-device-plugin.yaml",
        "manifests/runtimeclass.yaml",
    ]


# --- hostile paths: pyinfra's files operations quote them; a real run on this machine's shell -----

# the styles the settings take (the others are refused in one line: test_hostile_values_run.py)
TAKEN_STYLES = [style for style in STYLES if accepted("manifests_dir", hostile_value("manifests_dir", style))]


@pytest.mark.parametrize("style", TAKEN_STYLES)
def test_a_hostile_folder_name_is_written_exactly_there(monkeypatch, tmp_path, style):
    value = hostile_value("manifests_dir", style)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    inventory_name = hostile_value("manifests_inventory", style)
    inventory_path = work / inventory_name
    inventory_path.parent.mkdir(parents=True, exist_ok=True)
    inventory_path.write_text("gpu_nodes = [('gpu1', {'gpu_sharing': 'mps'})]\n")
    hosts = Inventory((["@local"], {}), override_data={"manifests_dir": value, "manifests_inventory": inventory_name})
    _, error = run_pyinfra(hosts, lambda state: load_deploy_file(state, RENDER))
    assert error is None, error
    assert not [path for path in tmp_path.rglob("*") if path.name == PWNED]
    written = read_tree(work / value)
    assert "manifests/runtimeclass.yaml" in written and b"mps-4" in written["manifests/nvidia-device-plugin.yaml"]


@pytest.mark.parametrize(
    "given, minor", [("1.30", "1.30"), ("1.20", "1.20"), ("1.31", "1.31"), ("v1.30", "1.30"), ("v1.29.4", "1.29")]
)
def test_a_minor_given_with_data_is_read_as_written(given, minor):
    """pyinfra reads ``--data manifests_kubernetes_version=1.30`` as JSON, the number 1.3 (its own parser here)."""
    from pyinfra_cli.util import parse_cli_arg

    assert parse_settings({"manifests_kubernetes_version": parse_cli_arg(given)}).manifests_kubernetes_version == minor


# --- links in the folder: GitOps repositories carry them; none is followed ---------------------------


@dataclass(frozen=True)
class Victim:
    """A file outside the folder a link points at: its bytes and mode must not change."""

    path: Path

    @classmethod
    def made(cls, folder: Path, name: str = "victim") -> Victim:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_bytes(b"the operator's own file\n")
        path.chmod(0o600)
        return cls(path)

    def unchanged(self) -> bool:
        return self.path.read_bytes() == b"the operator's own file\n" and (self.path.stat().st_mode & 0o777) == 0o600


def refused_naming(rendered: Rendered, link: str, target: Path) -> bool:
    message = str(rendered.error)
    return (
        isinstance(rendered.error, RenderError)
        and "\n" not in message
        and message.startswith(f"{link} is a symbolic link (to {target}): no file is written or removed")
    )


def test_a_link_at_a_rendered_file_is_refused_and_its_target_kept(monkeypatch, tmp_path):
    folder = tmp_path / "gitops"
    assert render(monkeypatch, folder, {}).error is None
    before = read_tree(folder)
    victim = Victim.made(tmp_path / "home")
    (folder / "manifests" / "runtimeclass.yaml").unlink()
    (folder / "manifests" / "runtimeclass.yaml").symlink_to(victim.path)
    rendered = render(monkeypatch, folder, {"gpu_sharing": "mps"})  # README and the plugin would change
    assert refused_naming(rendered, "gitops/manifests/runtimeclass.yaml", victim.path), rendered.error
    assert victim.unchanged() and (folder / "manifests" / "runtimeclass.yaml").is_symlink()
    # nothing else written either (read_tree reads the link's target)
    assert read_tree(folder) == {**before, "manifests/runtimeclass.yaml": victim.path.read_bytes()}


def test_a_linked_folder_is_refused_and_what_it_points_at_kept(monkeypatch, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    victim = Victim.made(elsewhere / "manifests", "runtimeclass.yaml")
    (tmp_path / "gitops").symlink_to(elsewhere)
    rendered = render(monkeypatch, tmp_path / "gitops", {})
    assert refused_naming(rendered, "gitops", elsewhere), rendered.error
    assert victim.unchanged() and sorted(read_tree(elsewhere)) == ["manifests/runtimeclass.yaml"]


def test_a_linked_subfolder_is_refused_and_what_it_points_at_kept(monkeypatch, tmp_path):
    folder = tmp_path / "gitops"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    victim = Victim.made(elsewhere, "nvidia-device-plugin.yaml")
    (folder / "manifests").symlink_to(elsewhere)
    rendered = render(monkeypatch, folder, {})
    assert refused_naming(rendered, "gitops/manifests", elsewhere), rendered.error
    assert victim.unchanged() and sorted(read_tree(elsewhere)) == ["nvidia-device-plugin.yaml"]
    assert read_tree(folder) == {}


def test_a_link_in_a_folder_on_the_way_to_the_folder_is_refused(monkeypatch, tmp_path):
    """manifests_dir=repo/gitops with repo a link: every folder of the setting's path is opened without following."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "repo").symlink_to(elsewhere)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    _, error = run_pyinfra(
        Inventory((["@local"], {}), override_data={"manifests_dir": "repo/gitops"}),
        lambda state: load_deploy_file(state, RENDER),
    )
    assert str(error).startswith(f"repo is a symbolic link (to {elsewhere}):"), error
    assert list(elsewhere.iterdir()) == []


def test_a_stale_file_behind_a_link_is_not_removed(monkeypatch, tmp_path):
    """The Helm files a static render no longer writes: their folder a link elsewhere, or the file itself a link."""
    folder = tmp_path / "gitops"
    assert render(monkeypatch, folder, {"device_plugin_install_method": "helm"}).error is None
    elsewhere = tmp_path / "elsewhere"
    victim = Victim.made(elsewhere, "values.yaml")
    for path in sorted((folder / "helm").iterdir()):
        path.unlink()
    (folder / "helm").rmdir()
    (folder / "helm").symlink_to(elsewhere)
    rendered = render(monkeypatch, folder, {})
    assert refused_naming(rendered, "gitops/helm", elsewhere), rendered.error
    assert victim.unchanged()

    (folder / "helm").unlink()
    (folder / "helm").mkdir()
    (folder / "helm" / "values.yaml").symlink_to(victim.path)
    rendered = render(monkeypatch, folder, {})
    assert refused_naming(rendered, "gitops/helm/values.yaml", victim.path), rendered.error
    assert victim.unchanged() and (folder / "helm" / "values.yaml").is_symlink()


def test_a_link_made_after_the_plan_is_refused_when_the_file_is_written(monkeypatch, tmp_path):
    """The write itself opens each folder without following and refuses a link at the file: a link put
    there between the plan and the run fails the run in one line, its target unchanged."""
    folder = tmp_path / "gitops"
    assert render(monkeypatch, folder, {}).error is None
    victim = Victim.made(tmp_path / "home")
    link = folder / "manifests" / "nvidia-device-plugin.yaml"

    def plan_then_link(state):
        load_deploy_file(state, RENDER)
        link.unlink()
        link.symlink_to(victim.path)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    failures: list[str] = []
    _, error = run_pyinfra(
        Inventory((["@local"], {}), override_data={"manifests_dir": "gitops", "gpu_sharing": "mps"}),
        plan_then_link,
        failures=failures,
    )
    assert failures == [
        f"gitops/manifests/nvidia-device-plugin.yaml is a symbolic link (to {victim.path}): no file "
        "is written or removed through a link; make it a folder or file of its own, or write elsewhere"
    ]
    assert victim.unchanged() and link.is_symlink()


def test_each_file_is_replaced_by_a_rename_and_is_0644_whatever_the_umask(monkeypatch, tmp_path):
    """A reader holding the old file keeps the old bytes (a new file renamed over it, no write in place); no
    temporary file is left; the mode is 0644 under umask 077."""
    folder = tmp_path / "gitops"
    assert render(monkeypatch, folder, {}).error is None
    plugin = folder / "manifests" / "nvidia-device-plugin.yaml"
    with plugin.open("rb") as reader:
        old = plugin.read_bytes()
        previous = os.umask(0o077)
        try:
            assert render(monkeypatch, folder, {"gpu_sharing": "mps"}).error is None
        finally:
            os.umask(previous)
        assert reader.read() == old and plugin.read_bytes() != old
    assert {path.stat().st_mode & 0o777 for path in folder.rglob("*") if path.is_file()} == {0o644}
    assert not [path for path in folder.rglob(".*")]


class StoodInHost:
    """What a FunctionCommand's body gets as its host: its name, and the lines it logs."""

    name = "@local"
    executing_op_hash = "write"

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log_styled(self, message: str, **_) -> None:
        self.lines.append(message)


class StoodInState:
    """A run's State, as far as the failure notes need it (one per test)."""


@pytest.mark.parametrize("command", ["write", "remove"])
def test_the_command_itself_refuses_a_link_at_the_file(tmp_path, command):
    """A link made after the operation looked and before its command ran: the command fails in one line and
    leaves the link and its target as they were (the rename would replace a link, never follow it)."""
    victim = Victim.made(tmp_path / "home")
    (tmp_path / "gitops" / "manifests").mkdir(parents=True)
    link = tmp_path / "gitops" / "manifests" / "runtimeclass.yaml"
    link.symlink_to(victim.path)
    target = ControllerFile(str(tmp_path), "gitops", "manifests/runtimeclass.yaml")
    host = StoodInHost()
    if command == "write":
        result = controller_files._write(StoodInState(), host, target, b"kind: RuntimeClass\n")
    else:
        result = controller_files._remove(StoodInState(), host, target)
    assert result is False and host.lines == [
        f"gpu-node: gitops/manifests/runtimeclass.yaml is a symbolic link (to {victim.path}): no file is written or "
        "removed through a link; make it a folder or file of its own, or write elsewhere"
    ]
    assert link.is_symlink() and victim.unchanged()


# --- the folder synced as is: every GPU workload finds its nodes -------------------------------------

SYNC_NODES = {  # inventory host -> (its Kubernetes name, its own settings)
    "@fake/plain": ("gpu-plain", {}),
    "@fake/mps": ("gpu-mps", {"gpu_sharing": "mps"}),
    "@fake/share": ("gpu-share", {"gpu_sharing": "gpushare"}),
    "@fake/dra": ("gpu-dra", {"gpu_allocator": "dra"}),
}
SYNC_DATA = {
    "smoke_test": "false",
    "gpushare_inspect_sha256": INSPECT_SHA,
    "manifests_kubernetes_version": "1.34",
    "kube_node_names": ",".join(f"{host}={name}" for host, (name, _) in SYNC_NODES.items()),
}
# Which workload each kind of node must run, from its settings alone (not from the code under test)
EXPECTED_WORKLOADS = {
    "gpu-plain": {"nvidia-device-plugin"},
    "gpu-mps": {"nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon"},
    "gpu-share": {"gpushare-device-plugin-ds"},
    "gpu-dra": {"nvidia-dra-driver-gpu-kubelet-plugin"},
}


def expression_holds(expression: dict, labels: dict[str, str]) -> bool:
    """One matchExpressions entry of a node selector term, as the scheduler reads it (the operators these
    folders use; no library here evaluates node affinity)."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    return {
        "In": lambda: labels.get(key) in values,
        "NotIn": lambda: labels.get(key) not in values,
        "Exists": lambda: key in labels,
        "DoesNotExist": lambda: key not in labels,
    }[operator]()


def runs_on(pod: dict, labels: dict[str, str], runtime_classes: dict[str, dict]) -> bool:
    """Whether a pod spec fits an untainted node with ``labels``: its nodeSelector, the RuntimeClass's
    nodeSelector (merged into the pod's by its admission; an unknown RuntimeClass rejects the pod) and the
    required node affinity."""
    selector = dict(pod.get("nodeSelector") or {})
    if pod.get("runtimeClassName"):
        if pod["runtimeClassName"] not in runtime_classes:
            return False
        selector.update(runtime_classes[pod["runtimeClassName"]].get("scheduling", {}).get("nodeSelector", {}))
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    required = (pod.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return not required or any(
        all(expression_holds(expression, labels) for expression in term["matchExpressions"])
        for term in required["nodeSelectorTerms"]
    )


@dataclass
class Synced:
    """A cluster after a directory source (Argo CD) or a Flux Kustomization applied the folder's manifests/
    server-side to GPU nodes that carry none of gpu-node's labels: every document of every YAML file there."""

    nodes: dict[str, dict[str, str]]  # name -> labels
    workloads: dict[str, dict]  # DaemonSet name (or the Helm chart's release) -> its pod spec
    runtime_classes: dict[str, dict]
    configs: dict[str, str]  # the device plugin's configs by name

    @classmethod
    def of(cls, rendered: Rendered) -> Synced:
        documents = rendered.documents()
        nodes = {
            doc["metadata"]["name"]: dict(doc["metadata"].get("labels", {}))
            for doc in documents
            if doc["kind"] == "Node"
        }
        workloads = {
            doc["metadata"]["name"]: doc["spec"]["template"]["spec"] for doc in documents if doc["kind"] == "DaemonSet"
        }
        configs = {
            key: value
            for doc in documents
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "nvidia-device-plugin-configs"
            for key, value in doc["data"].items()
        }
        flux = rendered.folder / "flux" / "nvidia-device-plugin.yaml"
        if flux.exists():  # the chart's DaemonSets take these values into their pod spec (HELM_POD_SPEC_VALUES)
            (release,) = [doc for doc in manifest_documents(flux.read_text()) if doc["kind"] == "HelmRelease"]
            values = release["spec"]["values"]
            workloads["nvidia-device-plugin"] = {key: values[key] for key in HELM_POD_SPEC_VALUES if key in values}
            configs = values["config"]["map"]
        runtime_classes = {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == "RuntimeClass"}
        return cls(nodes, workloads, runtime_classes, configs)

    def running(self, node: str) -> set[str]:
        return {name for name, pod in self.workloads.items() if runs_on(pod, self.nodes[node], self.runtime_classes)}


@pytest.mark.parametrize("method", ["static", "helm"])
def test_the_synced_folder_runs_each_gpu_nodes_plugin_with_no_hand_step(monkeypatch, tmp_path, method):
    """With kube_node_names naming the GPU nodes, manifests/ alone (plus flux/ for the Helm method) labels them,
    and each node's plugin then fits it: NVIDIA's device plugin (and the MPS daemon where it shares by MPS) on
    the device plugin's nodes, gpushare's on its node, the DRA kubelet plugin on the DRA node, each nowhere else;
    the config label names a config of the plugin's; a pod of the nvidia RuntimeClass fits the GPU nodes the
    runtime class serves. A plan test: no Argo CD, Flux or cluster runs here (the lab's is in
    tests/e2e/test_cluster_e2e.py)."""
    data = {**SYNC_DATA, **({"device_plugin_install_method": "helm"} if method == "helm" else {})}
    inventory = inventory_text(list(SYNC_NODES), {host: settings for host, (_, settings) in SYNC_NODES.items()})
    rendered = render(monkeypatch, tmp_path / "gitops", data, inventory)
    assert rendered.error is None, rendered.error
    synced = Synced.of(rendered)

    assert set(synced.nodes) == set(EXPECTED_WORKLOADS)
    for node, expected in EXPECTED_WORKLOADS.items():
        if method == "helm":  # the chart's own MPS daemon is placed by the chart, which is not in the folder
            expected = expected - {"nvidia-device-plugin-mps-control-daemon"}
        assert synced.running(node) == expected, (node, synced.nodes[node])
    for node in ("gpu-plain", "gpu-mps"):
        assert synced.nodes[node]["nvidia.com/device-plugin.config"] in synced.configs
    mps_config = yaml.safe_load(synced.configs[synced.nodes["gpu-mps"]["nvidia.com/device-plugin.config"]])
    assert "mps" in mps_config["sharing"]
    gpu_pod = {"runtimeClassName": "nvidia"}
    assert {node for node in synced.nodes if runs_on(gpu_pod, synced.nodes[node], synced.runtime_classes)} == {
        "gpu-plain",
        "gpu-mps",
        "gpu-share",
    }


def test_the_placement_check_can_fail():
    """runs_on refuses what the scheduler refuses: a missing label, a NotIn label, an unknown RuntimeClass."""
    plugin = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
                                {"key": "gpushare", "operator": "NotIn", "values": ["true"]},
                            ]
                        }
                    ]
                }
            }
        }
    }
    assert runs_on(plugin, {"nvidia.com/gpu.present": "true"}, {})
    assert not runs_on(plugin, {}, {})
    assert not runs_on(plugin, {"nvidia.com/gpu.present": "true", "gpushare": "true"}, {})
    assert not runs_on({"runtimeClassName": "nvidia"}, {"nvidia.com/gpu.present": "true"}, {})


def test_a_gpu_node_without_a_kubernetes_name_is_not_labelled_and_the_readme_says_so(monkeypatch, tmp_path, caplog):
    """No Node object for a name guessed from the inventory (one no kubelet registers would become an empty Node);
    the run says so in one line."""
    rendered = render(
        monkeypatch,
        tmp_path / "gitops",
        {"kube_node_names": "@fake/plain=gpu-plain"},
        inventory_text(["@fake/plain", "@fake/mps"], {"@fake/mps": {"gpu_sharing": "mps"}}),
    )
    assert rendered.error is None
    assert set(Synced.of(rendered).nodes) == {"gpu-plain"}
    assert (
        "| `@fake/mps` | not named in `kube_node_names`: its hostname, in lower case; not labelled by this folder "
        "| `nvidia.com/device-plugin.config=mps-4`, `nvidia.com/gpu.present=true`, `nvidia.com/mps.capable=true` |"
    ) in rendered.text("README.md")
    assert [record.getMessage() for record in caplog.records if "kube_node_names" in record.getMessage()] == [
        "[@local] kube_node_names does not name the GPU nodes @fake/mps: manifests/node-labels.yaml does not label them"
    ]


def test_two_gpu_nodes_given_one_kubernetes_name_are_refused(monkeypatch, tmp_path):
    rendered = render(
        monkeypatch,
        tmp_path / "gitops",
        {"kube_node_names": "@fake/a=gpu,@fake/b=gpu"},
        inventory_text(["@fake/a", "@fake/b"], {}),
    )
    assert (
        str(rendered.error)
        == "kube_node_names gives several GPU nodes the Kubernetes name gpu: each node needs its own"
    )
    assert not rendered.folder.exists()


@pytest.mark.parametrize("name", ["static-sharing-per-node", "gpushare-1.23-beside-time-slicing"])
def test_the_folders_node_labels_are_the_ones_the_deploy_sets_no_real_cluster(monkeypatch, tmp_path, name):
    """Each Node object's labels (but gpu-node's managed-by) are labels deploy/k8s_gpu.py gives that node from its
    facts, with the same values; the deploy adds only what the facts alone know (accelerator)."""
    case = CASES[name]
    names = ",".join(f"{host}={host.removeprefix('@fake/')}" for host in case.gpu_hosts)
    case = Case({**case.data, "kube_node_names": names}, case.host_data, case.gpu_hosts, case.gpushare_version)
    cluster, _ = deploy_plan(monkeypatch, case)
    synced = Synced.of(render_case(monkeypatch, tmp_path, case))
    assert set(synced.nodes) == {host.removeprefix("@fake/") for host in case.gpu_hosts}
    for node, labels in synced.nodes.items():
        assert labels.pop("app.kubernetes.io/managed-by") == "gpu-node"
        deployed = cluster.nodes[node]
        assert {key: deployed.get(key) for key in labels} == labels
        assert set(deployed) - set(labels) == {"accelerator"}


def test_the_readme_names_the_health_monitor_bundle_where_it_is_rendered():
    with_monitor = case_files("health-monitor", VERSIONS[0])
    assert "manifests/gpu-health-monitor.yaml" in with_monitor
    assert "| `manifests/gpu-health-monitor.yaml` | node-problem-detector" in with_monitor["README.md"]
    without = case_files("static-no-sharing", VERSIONS[0])
    assert "manifests/gpu-health-monitor.yaml" not in without and "node-problem-detector" not in without["README.md"]
