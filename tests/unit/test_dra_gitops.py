"""
deploy/render_cluster.py for DRA node groups: the DRA driver's manifests or its chart's values, the
DeviceClass and ResourceClaimTemplate, and the smoke pod, written as deploy/k8s_gpu.py sends them
(compared with what test_k8s_plan's FakeCluster was sent by a run at Kubernetes 1.34; no
kube-apiserver here), the same bytes, so the deploy applies nothing after the folder; refused in one
line, before any file, for a cluster the render is told is older than 1.34. The strict schema checks
of these files on 1.34-1.37 are test_dra_manifests.py's.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import pytest
from test_k8s_plan import A100, FakeCluster, gpu_identity_lines, run_plan, stdin_manifest
from test_render_cluster import (
    assert_the_gitops_tools_install_the_chart_helm_was_given,
    inventory_text,
    render,
    sent_text,
)

from deploy.k8s import dra
from deploy.tasks.gitops import EVERY_FILE

DRA = {"gpu_allocator": "dra"}


@dataclass
class DraCluster(FakeCluster):
    """FakeCluster at 1.34 whose DRA smoke pod passes (FakeCluster answers the device plugin's by name)."""

    version: tuple[str, str] = ("1", "34")

    def answer(self, command: str) -> tuple[bool, list[str]]:
        if dra.SMOKE_POD in command and " create -f - " in command:
            return True, self.smoke_lines
        return super().answer(command)


@dataclass(frozen=True)
class Case:
    data: dict
    host_data: dict
    gpu_hosts: tuple[str, ...] = ("@fake/gpu1",)


CASES = {
    "dra-static": Case(DRA, {}),
    "dra-helm-mps": Case({**DRA, "dra_driver_install_method": "helm", "gpu_sharing": "mps"}, {}),
    "dra-beside-the-device-plugin": Case(
        {"gpu_sharing": "time-slicing"},
        {"@fake/gpu2": {**DRA, "nvidia_driver_root": "/run/nvidia/driver"}},
        gpu_hosts=("@fake/gpu1", "@fake/gpu2"),
    ),
    "dra-no-smoke-test": Case({**DRA, "smoke_test": "false"}, {}),
}
HELM_NOT_YET = ["list-rc 0", "list-out []", "values-rc 1", "values-err Error: release: not found"]


def deploy_case(monkeypatch, case: Case, cluster: FakeCluster | None = None):
    cluster = cluster or DraCluster(
        nodes={"cp1": {}, **{name.removeprefix("@fake/"): {} for name in case.gpu_hosts}}, helm_lines=HELM_NOT_YET
    )
    gpu = {name: gpu_identity_lines(name.removeprefix("@fake/"), [A100]) for name in case.gpu_hosts}
    run = run_plan(monkeypatch, cluster, gpu, data=case.data, host_data=case.host_data)
    assert not run.failed
    return cluster, run


def render_case(monkeypatch, tmp_path, case: Case, **more):
    rendered = render(
        monkeypatch, tmp_path / "gitops", {**case.data, **more}, inventory_text(list(case.gpu_hosts), case.host_data)
    )
    assert rendered.error is None, rendered.error
    return rendered


@pytest.mark.parametrize("name", CASES)
def test_the_folder_holds_the_dra_objects_the_deploy_applies_no_real_cluster(monkeypatch, tmp_path, name):
    """Each bundle byte for byte as kubectl was sent it, the chart's values and release as the helm command
    has them, the smoke pod as the deploy created it."""
    case = CASES[name]
    cluster, run = deploy_case(monkeypatch, case)
    rendered = render_case(monkeypatch, tmp_path, case)

    assert rendered.objects() == cluster.objects
    applied = {
        f"manifests/{stdin_manifest(command)[0]['metadata']['annotations']['gpu-node.io/bundle']}.yaml": sent_text(
            command
        )
        for command in run.applies()
    }
    assert applied == {path: text.decode() for path, text in rendered.files.items() if path.startswith("manifests/")}
    assert {"manifests/dra-claims.yaml"} <= set(applied)

    [helm] = [c for c in run.control_plane_commands() if f" upgrade --install {dra.HELM_RELEASE} " in c] or [None]
    if case.data.get("dra_driver_install_method") == "helm":
        assert rendered.text("helm/dra-values.yaml") == sent_text(helm)
        assert_the_gitops_tools_install_the_chart_helm_was_given(rendered, "nvidia-dra-driver-gpu", helm)
        assert "manifests/nvidia-dra-driver-gpu.yaml" not in rendered.files
    else:
        assert helm is None and "helm/dra-values.yaml" not in rendered.files
        assert "manifests/nvidia-dra-driver-gpu.yaml" in rendered.files

    smoke = [c for c in run.control_plane_commands() if dra.SMOKE_POD in c and " create -f - " in c]
    if case.data.get("smoke_test") == "false":
        assert smoke == [] and "smoke/dra-smoke-pod.yaml" not in rendered.files
    else:
        assert rendered.text("smoke/dra-smoke-pod.yaml") == sent_text(smoke[0])


def test_after_the_folder_is_applied_the_deploy_applies_nothing_no_real_cluster(monkeypatch, tmp_path):
    case = CASES["dra-beside-the-device-plugin"]
    rendered = render_case(monkeypatch, tmp_path, case)
    cluster = DraCluster(nodes={"cp1": {}, "gpu1": {}, "gpu2": {}})
    for path in sorted((rendered.folder / "manifests").glob("*.yaml")):
        cluster.answer(f"printf '%s\\n' {shlex.quote(path.read_text())} | kubectl apply --server-side -f - ")
    assert {key[0] for key in cluster.objects} >= {"DeviceClass", "ResourceClaimTemplate", "DaemonSet"}
    _, run = deploy_case(monkeypatch, case, cluster)
    assert run.applies() == [] and run.diffs() == []


def test_the_readme_names_the_dra_files_and_the_dra_nodes_label(monkeypatch, tmp_path):
    readme = render_case(monkeypatch, tmp_path, CASES["dra-beside-the-device-plugin"]).text("README.md")
    assert "| `manifests/dra-claims.yaml` | the DeviceClass `gpu-node.nvidia.com`" in readme
    assert (
        "| `@fake/gpu2` | not named in `kube_node_names`: its hostname, in lower case; not labelled by this folder "
        "| `gpu-node.io/gpu-allocator=dra` |"
    ) in readme
    assert "`nvidia.com/device-plugin.config=time-slicing-4" in readme  # gpu1 stays on the device plugin
    assert "Kubernetes 1.34 or newer" in readme


@pytest.mark.parametrize("version", ["1.33", "1.28"])
def test_a_render_for_a_cluster_older_than_1_34_is_refused_in_one_line_before_any_file(monkeypatch, tmp_path, version):
    rendered = render(monkeypatch, tmp_path / "gitops", {**DRA, "manifests_kubernetes_version": version})
    assert str(rendered.error) == (
        f"gpu_allocator=dra needs Kubernetes 1.34 or newer (resource.k8s.io/v1), and "
        f"manifests_kubernetes_version is {version}: upgrade the cluster, or keep "
        "gpu_allocator=device-plugin"
    )
    assert not rendered.folder.exists()


def test_a_dra_node_in_the_inventory_is_refused_for_1_33_and_a_device_plugin_render_is_not(monkeypatch, tmp_path):
    case = CASES["dra-beside-the-device-plugin"]
    refused = render(
        monkeypatch,
        tmp_path / "gitops",
        {"manifests_kubernetes_version": "1.33"},
        inventory_text(list(case.gpu_hosts), case.host_data),
    )
    assert "manifests_kubernetes_version is 1.33" in str(refused.error) and not refused.folder.exists()
    device_plugin = render(monkeypatch, tmp_path / "other", {"manifests_kubernetes_version": "1.33"})
    assert device_plugin.error is None and "manifests/dra-claims.yaml" not in device_plugin.files


def test_the_dra_files_go_when_the_group_moves_back_to_the_device_plugin(monkeypatch, tmp_path):
    folder = tmp_path / "gitops"
    first = render(monkeypatch, folder, {**DRA, "dra_driver_install_method": "helm"})
    assert {
        "helm/dra-values.yaml",
        "flux/nvidia-dra-driver-gpu.yaml",
        "argocd/nvidia-dra-driver-gpu.yaml",
        "smoke/dra-smoke-pod.yaml",
        "manifests/dra-claims.yaml",
    } <= set(first.files)
    assert set(first.files) <= set(EVERY_FILE)
    back = render(monkeypatch, folder, {})
    assert back.error is None
    assert sorted(back.files) == ["README.md", "manifests/nvidia-device-plugin.yaml", "manifests/runtimeclass.yaml"]
