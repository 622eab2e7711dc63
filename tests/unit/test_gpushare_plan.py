"""
Plan tests of gpushare through deploy/k8s_gpu.py with pyinfra's @fake connector.

No real cluster or control-plane host exists on the test machines: ``GpushareHost`` extends the
Kubernetes layer's in-memory ``FakeCluster`` with the control plane's files (a kube-scheduler.yaml
in kubeadm's layout, what ``put_text`` installs through its staged uploads, what the checked
download installs) and a kubelet that swaps the scheduler's static pod when the swap script runs.
The commands are the real ones the deploy sends; the scripts themselves run for real in
test_gpushare_scripts.py and test_files.py.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from plan import staged_uploads
from pyinfra.connectors.fake import FakeConnector
from test_k8s_plan import FakeCluster, gpu_identity_lines, run_plan

from deploy.k8s.gpushare import CONFIG_CHECKSUM_ANNOTATION, GpushareError, scheduler_config_yaml
from deploy.settings import SettingsError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpushare"
SCHEDULER_POD = (FIXTURES / "kube-scheduler-static-pod.yaml").read_text()
MANIFEST = "/etc/kubernetes/manifests/kube-scheduler.yaml"
CONFIG = "/etc/kubernetes/gpushare/scheduler-config.yaml"
INSPECT = "/usr/local/bin/kubectl-inspect-gpushare"
INSPECT_SHA = "5" * 64
A100 = "NVIDIA A100-SXM4-40GB"
GPU = {"@fake/gpu1": gpu_identity_lines("gpu1", [A100])}
DATA = {"gpu_sharing": "gpushare", "smoke_test": "false", "gpushare_inspect_sha256": INSPECT_SHA}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# One shell word (quoted parts included), as the commands name a path: shlex reads it back.
WORD = r"""((?:'[^']*'|"(?:[^"\\]|\\.)*"|\\.|[^\s'"\\;])+)"""


def path_after(prefix: str, command: str) -> str | None:
    found = re.search(re.escape(prefix) + WORD, command)
    return shlex.split(found.group(1))[0] if found else None


@dataclass
class GpushareHost(FakeCluster):
    """The cluster plus control plane cp1's files and its kubelet's handling of static pods."""

    files: dict[str, bytes] = field(default_factory=lambda: {MANIFEST: SCHEDULER_POD.encode()})
    modes: dict[str, str] = field(default_factory=dict)  # octal, "644" when not given
    pinned: dict[str, str] = field(default_factory=dict)  # installed downloads: path -> SHA-256
    scheduler_becomes_ready: bool = True
    scheduler_restarts: int = 0

    def answer(self, command: str):
        self.place_uploads(command)
        if "nvidia-smi --query-gpu=name" in command:  # GpuNodeIdentity of the control plane
            return True, ["hostname cp1", "pci_gpus 0", "nvidia_smi missing"]
        if "kube-scheduler.yaml.new" in command and "sha256sum" in command:
            return self.swap(command)
        if ".kubectl-inspect-gpushare.download" in command:
            url_sha = re.search(r"!= ([0-9a-f]{64}) ", command).group(1)
            self.files[INSPECT] = b"(the downloaded release)"
            self.pinned[INSPECT] = url_sha  # the script installs only a file with this SHA-256
            return True, []
        if command.startswith("if [ -f") and "base64 -w0" in command:  # FileText
            path = path_after("if [ -f ", command)
            if path in self.files:
                return True, [f"text {base64.b64encode(self.files[path]).decode()}"]
            return True, []
        match = re.match(r"if \[ -f " + WORD + r" \]; then stat -L", command)  # FileDigest
        if match:
            path = shlex.split(match.group(1))[0]
            if path not in self.files:
                return True, ["absent"]
            return True, [f"{self.modes.get(path, '644')} root:root", f"{sha256(self.files[path])}  {path}"]
        match = re.search(r"chmod (\d+) " + WORD + r" .* mv -f " + WORD + " " + WORD + " ", command)
        if match and match.group(2).rstrip("'").endswith(".gpu-node-candidate"):  # put_text's swap
            mode, candidate, dest = match.group(1), shlex.split(match.group(2))[0], shlex.split(match.group(4))[0]
            self.files[dest] = self.files.pop(candidate)
            self.modes[dest] = mode
            return True, []
        if command.startswith("! (test -e"):  # File / Directory
            path = path_after("test -e ", command)
            if path in self.files:
                mode = "-rwxr-xr-x" if self.modes.get(path) == "755" else "-rw-r--r--"
                return True, [
                    f"user=root group=root mode={mode} atime=0 mtime=0 ctime=0 size={len(self.files[path])} '{path}'"
                ]
            if any(name.startswith(path.rstrip("/") + "/") for name in self.files):
                return True, [f"user=root group=root mode=drwxr-xr-x atime=0 mtime=0 ctime=0 size=0 '{path}'"]
            return True, []
        match = re.match(r"test -e " + WORD + r" && \( (sha1sum|sha256sum) ", command)
        if match:
            path, tool = shlex.split(match.group(1))[0], match.group(2)
            if path not in self.files:
                return True, []
            if tool == "sha256sum" and path in self.pinned:
                return True, [f"{self.pinned[path]}  {path}"]
            digest = (hashlib.sha1 if tool == "sha1sum" else hashlib.sha256)(self.files[path]).hexdigest()
            return True, [f"{digest}  {path}"]
        match = re.match(r"chmod (\d+) " + WORD + "$", command)
        if match:
            self.modes[shlex.split(match.group(2))[0]] = match.group(1)
            return True, []
        return super().answer(command)

    def place_uploads(self, command: str) -> None:
        """deploy/operations/upload.py's place script: each staged upload copied to its path."""
        for staged, path, _live in staged_uploads(command):
            self.files[path] = self.files.pop(staged)

    def swap(self, command: str):
        """The kubelet side: the staged manifest moved in restarts the scheduler pod."""
        # the staged path as sh reads it (quoted when it holds spaces and the like)
        staged = path_after("sha256sum ", command)
        expected = re.search(r'"\$_sha" != ([0-9a-f]{64})', command).group(1)
        assert sha256(self.files[staged]) == expected, "the staged copy is the validated one"
        if not self.scheduler_becomes_ready:
            del self.files[staged]
            return False, [
                "kube-scheduler pod kube-scheduler-cp1 was not Ready with the new manifest within 180s: restored"
            ]
        self.files[MANIFEST] = self.files.pop(staged)
        self.scheduler_restarts += 1
        return True, ["kube-scheduler pod kube-scheduler-cp1 is Ready with the gpushare scheduler config"]

    def scheduler_pod(self) -> dict:
        return yaml.safe_load(self.files[MANIFEST])


@pytest.fixture
def cluster(monkeypatch):
    host = GpushareHost(version=("1", "28"), nodes={"gpu1": {"kubernetes.io/hostname": "gpu1"}, "cp1": {}})

    def put_file(connector, filename_or_io, remote_filename, *args, **kwargs):
        if hasattr(filename_or_io, "read"):
            filename_or_io.seek(0)  # as pyinfra's real connectors do (its sha1 check read it)
            data = filename_or_io.read()
        else:
            data = Path(filename_or_io).read_bytes()
        host.files[remote_filename] = data.encode() if isinstance(data, str) else data
        return True

    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    return host


def uploads(run) -> list[str]:
    return [c for c in run.control_plane_commands() if "kube-scheduler.yaml.new" in c or ".download" in c]


def test_first_run_applies_extender_and_plugin_labels_node_configures_scheduler_no_real_cluster(monkeypatch, cluster):
    run = run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert not run.failed
    applies = run.applies()
    assert [("gpushare-schd-extender" in c, "gpushare-device-plugin" in c) for c in applies[1:]] == [
        (True, False),
        (False, True),
    ]
    assert "kind: RuntimeClass" in applies[0] and len(applies) == 3
    assert ("Deployment", "kube-system", "gpushare-schd-extender") in cluster.objects
    assert ("Service", "kube-system", "gpushare-schd-extender") in cluster.objects
    daemonset = cluster.objects[("DaemonSet", "kube-system", "gpushare-device-plugin-ds")]
    assert "--memory-unit=GiB" in daemonset["spec"]["template"]["spec"]["containers"][0]["command"]
    # no NVIDIA device plugin at all: every GPU node shares through gpushare
    assert not any(key[1] == "nvidia-device-plugin" for key in cluster.objects)
    assert cluster.nodes["gpu1"]["gpushare"] == "true"
    assert [c for c in run.labels() if "gpushare=true" in c] == [
        'kubectl $([ -n "${KUBECONFIG-}" ] || [ -e "${HOME-}/.kube/config" ] || echo --kubeconfig=/etc/kubernetes/admin.conf) '
        "--request-timeout=20s label node gpu1 --overwrite gpushare=true"
    ]
    # the scheduler config for 1.28, and the static pod pointing at it through a staged copy
    assert cluster.files[CONFIG].decode() == scheduler_config_yaml("1.28")
    pod = cluster.scheduler_pod()
    container = pod["spec"]["containers"][0]
    assert container["command"].count(f"--config={CONFIG}") == 1
    assert pod["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION] == sha256(cluster.files[CONFIG])
    assert cluster.scheduler_restarts == 1
    swap = [c for c in run.control_plane_commands() if "kube-scheduler.yaml.new" in c][0]
    assert "mv -f /etc/kubernetes/gpushare/staging/kube-scheduler.yaml.new " + MANIFEST in swap
    assert "get pod kube-scheduler-cp1" in swap
    # kubectl-inspect-gpushare: downloaded and checked against the pin
    download = [c for c in run.control_plane_commands() if ".download" in c]
    assert len(download) == 1 and f"!= {INSPECT_SHA} " in download[0]
    assert (
        "https://github.com/AliyunContainerService/gpushare-device-plugin/releases/download/v0.3.0/"
        "kubectl-inspect-gpushare" in download[0]
    )
    assert "--max-time 30 " in download[0]  # bounded by download_timeout (its default)


def test_second_run_applies_nothing_new_and_restarts_nothing_no_real_cluster(monkeypatch, cluster):
    run_plan(monkeypatch, cluster, GPU, data=DATA)
    files_after_first = dict(cluster.files)
    second = run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert not second.failed
    assert second.applies() == [] and second.labels() == [] and second.diffs() == []
    assert uploads(second) == []
    assert cluster.files == files_after_first
    assert cluster.scheduler_restarts == 1
    # only reads: no mkdir, chmod, mv or upload on the control plane
    assert not [c for c in second.control_plane_commands() if re.match(r"(mkdir|chmod|mv) ", c)]


def test_cluster_upgrade_rewrites_config_and_restarts_scheduler_once_no_real_cluster(monkeypatch, cluster):
    cluster.version = ("1", "24")
    run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert yaml.safe_load(cluster.files[CONFIG])["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"
    before = cluster.scheduler_pod()
    cluster.version = ("1", "25")
    run = run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert not run.failed
    assert yaml.safe_load(cluster.files[CONFIG])["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    after = cluster.scheduler_pod()
    assert after["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION] == sha256(cluster.files[CONFIG])
    after["metadata"]["annotations"] = before["metadata"]["annotations"]
    assert after == before  # only the checksum changed
    assert cluster.scheduler_restarts == 2
    # The config the scheduler ran with was kept for the swap's rollback before the new one was written.
    (keep,) = [c for c in run.control_plane_commands() if c.startswith("mkdir -p") and f"cp -p {CONFIG} " in c]
    assert "config.yaml.backup" in keep
    # 1.25 drops the old master label from the extender's placement: re-applied
    assert any("gpushare-schd-extender" in c for c in run.applies())


def test_cluster_older_than_1_23_is_refused_before_any_change(monkeypatch, cluster):
    cluster.version = ("1", "22")
    with pytest.raises(GpushareError, match=r"needs Kubernetes >= 1\.23 .* the cluster runs 1\.22"):
        run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert not any("gpushare" in key[2] for key in cluster.objects)
    assert cluster.files == {MANIFEST: SCHEDULER_POD.encode()}


def test_gpushare_node_without_nvidia_default_runtime_is_refused_naming_it(monkeypatch, cluster):
    """The node's own settings refuse it (deploy/settings/sections/gpushare.py): nothing applied, no file touched."""
    with pytest.raises(
        SettingsError,
        match=r"^invalid setting nvidia_runtime_default=false: allowed only true "
        r"with gpu_sharing=gpushare \(the gpushare device plugin drops",
    ):
        run_plan(monkeypatch, cluster, GPU, data=DATA, host_data={"@fake/gpu1": {"nvidia_runtime_default": False}})
    assert cluster.files == {MANIFEST: SCHEDULER_POD.encode()}
    assert not any("gpushare" in key[2] for key in cluster.objects)


def test_missing_checksum_pin_is_refused_before_any_change(monkeypatch, cluster):
    data = {key: value for key, value in DATA.items() if key != "gpushare_inspect_sha256"}
    with pytest.raises(GpushareError, match="gpushare_inspect_sha256 is not set"):
        run_plan(monkeypatch, cluster, GPU, data=data)
    assert cluster.files == {MANIFEST: SCHEDULER_POD.encode()}


def test_local_inspect_file_with_a_wrong_checksum_is_refused_before_any_change(monkeypatch, cluster, tmp_path):
    binary = tmp_path / "kubectl-inspect-gpushare"
    binary.write_bytes(b"#!/bin/sh\necho stand-in\n")
    data = {**DATA, "gpushare_inspect_source": str(binary)}  # pin is 555..., the file is not
    with pytest.raises(GpushareError, match=f"refusing {binary}: its SHA-256 is {sha256(binary.read_bytes())}"):
        run_plan(monkeypatch, cluster, GPU, data=data)
    assert INSPECT not in cluster.files and cluster.files == {MANIFEST: SCHEDULER_POD.encode()}


def test_local_inspect_file_with_the_pinned_checksum_is_installed_once(monkeypatch, cluster, tmp_path):
    binary = tmp_path / "kubectl-inspect-gpushare"
    binary.write_bytes(b"#!/bin/sh\necho stand-in\n")
    data = {**DATA, "gpushare_inspect_source": str(binary), "gpushare_inspect_sha256": sha256(binary.read_bytes())}
    run = run_plan(monkeypatch, cluster, GPU, data=data)
    assert not run.failed
    assert cluster.files[INSPECT] == binary.read_bytes() and cluster.modes[INSPECT] == "755"
    assert [c for c in run.control_plane_commands() if f"mv -f {INSPECT}.gpu-node-candidate {INSPECT}" in c]
    second = run_plan(monkeypatch, cluster, GPU, data=data)
    assert not [c for c in second.control_plane_commands() if INSPECT in c and not c.startswith("if [ -f")]


def test_scheduler_manifest_with_another_config_is_left_unchanged(monkeypatch, cluster, caplog):
    pod = yaml.safe_load(SCHEDULER_POD)
    pod["spec"]["containers"][0]["command"].append("--config=/etc/kubernetes/my-scheduler.yaml")
    original = yaml.safe_dump(pod, sort_keys=False).encode()
    cluster.files[MANIFEST] = original
    run = run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert run.failed
    assert (
        "gpu-node: /etc/kubernetes/manifests/kube-scheduler.yaml: kube-scheduler already runs with "
        "--config=/etc/kubernetes/my-scheduler.yaml: refusing to replace another scheduler config"
    ) in caplog.text
    assert cluster.files[MANIFEST] == original
    assert not [name for name in cluster.files if "staging" in name]


def test_scheduler_that_does_not_come_back_fails_the_run(monkeypatch, cluster):
    cluster.scheduler_becomes_ready = False
    run = run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert run.failed
    assert cluster.files[MANIFEST] == SCHEDULER_POD.encode()
    assert not [c for c in run.control_plane_commands() if ".download" in c]  # the run stopped there


def test_host_without_a_kube_scheduler_static_pod_fails_clearly(monkeypatch, cluster, caplog):
    del cluster.files[MANIFEST]
    run = run_plan(monkeypatch, cluster, GPU, data=DATA)
    assert run.failed
    assert (
        "gpu-node: /etc/kubernetes/manifests/kube-scheduler.yaml does not exist: not a kubeadm control-plane"
        in caplog.text
    )


def test_mib_memory_unit_reaches_the_device_plugin(monkeypatch, cluster):
    run_plan(monkeypatch, cluster, GPU, data={**DATA, "gpushare_memory_unit": "MiB"})
    daemonset = cluster.objects[("DaemonSet", "kube-system", "gpushare-device-plugin-ds")]
    assert "--memory-unit=MiB" in daemonset["spec"]["template"]["spec"]["containers"][0]["command"]
