"""
Kubernetes facts: their commands run for real in a local shell where that is honest (kubectl
missing, kubeconfig unreadable, API server unreachable: a closed port on 127.0.0.1, and this
machine's own GPU identity: it has none), and their parsers on kubectl output fixtures.
No kube-apiserver exists on the test machines.
"""

from __future__ import annotations

import ctypes.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from lab import LabMissing, nvml_mock
from lab_assets import needs_lab
from pyinfra.api import StringCommand

from deploy.facts.gpu_node_identity import GpuNodeIdentity, accelerator_label, kube_node_name
from deploy.facts.k8s import (
    HelmRelease,
    KubeCluster,
    KubeLiveObjects,
    KubeNodes,
    KubeServerSideDiff,
    captured,
    kubectl,
    parse_captured,
)
from deploy.operations.kubectl import labels_to_change, stamp_manifest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: closed-port
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: closed-port
  context: {cluster: closed-port, user: nobody}
current-context: closed-port
users:
- name: nobody
  user: {token: not-a-token}
"""


def run(command, env=None) -> list[str]:
    text = command.get_raw_value() if isinstance(command, StringCommand) else command
    result = subprocess.run(["/bin/sh", "-c", text], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr  # facts always exit 0
    return result.stdout.splitlines()


def fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_captured_reports_exit_code_stdout_and_stderr_of_a_real_command():
    lines = run(captured(StringCommand("sh -c 'echo one; echo two; echo oops >&2; exit 3'")))
    assert parse_captured(lines) == (3, "one\ntwo", "oops")


def test_kube_cluster_kubectl_missing_real_shell():
    lines = run(KubeCluster().command("/etc/kubernetes/admin.conf"), env={"PATH": "/nonexistent"})
    assert KubeCluster().process(lines)["error"] == "kubectl is not installed (not on PATH)"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_kube_cluster_kubeconfig_missing_real_kubectl(tmp_path):
    state = KubeCluster().process(run(KubeCluster().command(str(tmp_path / "absent.conf"))))
    assert state["kubectl"] and not state["reachable"]
    assert state["error"] == "the kubeconfig does not exist or is not readable"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_kube_cluster_api_server_unreachable_real_kubectl_no_cluster(tmp_path):
    """No kube-apiserver here: a kubeconfig pointing at a closed port on 127.0.0.1."""
    kubeconfig = tmp_path / "closed-port.conf"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    state = KubeCluster().process(run(KubeCluster().command(str(kubeconfig))))
    assert not state["reachable"]
    assert state["error"].startswith(
        "the API server did not answer: The connection to the server 127.0.0.1:1 was refused"
    )


def test_kube_cluster_version_parsed():
    lines = [
        "kubeconfig /root/.kube/config",
        "rc 0",
        'out {"major": "1", "minor": "31+", "gitVersion": "v1.31.4+k3s1", "platform": "linux/amd64"}',
    ]
    state = KubeCluster().process(lines)
    assert state == {
        "kubectl": True,
        "kubeconfig_readable": True,
        "reachable": True,
        "kubeconfig": "/root/.kube/config",
        "version": "1.31",
        "git_version": "v1.31.4+k3s1",
        "error": None,
    }


# --- which kubeconfig kubectl reads where the setting is unset: the real kubectl, in a shell whose
# HOME and KUBECONFIG the test sets; each kubeconfig points at its own closed port on 127.0.0.1, so
# the port kubectl reports having tried names the file it read.


def closed_port_kubeconfig(path: Path, port: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(UNREACHABLE_KUBECONFIG.replace("127.0.0.1:1", f"127.0.0.1:{port}"))
    return str(path)


def kube_cluster_in(env_home: Path, kubeconfig: str | None = None, **env: str) -> dict:
    """KubeCluster read by a real shell with this HOME, PATH and ``env`` (KUBECONFIG) only."""
    shell_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(env_home), **env}
    return KubeCluster().process(run(KubeCluster().command(kubeconfig), env=shell_env))


def refused_port(state: dict) -> str:
    found = re.search(r"The connection to the server 127\.0\.0\.1:(\d+) was refused", state["error"] or "")
    assert found, state
    return found.group(1)


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")


@needs_kubectl
def test_unset_kubeconfig_reads_home_kube_config_real_kubectl(tmp_path):
    closed_port_kubeconfig(tmp_path / "home" / ".kube" / "config", 2)
    state = kube_cluster_in(tmp_path / "home")
    assert refused_port(state) == "2"
    assert state["kubeconfig"] == f"{tmp_path}/home/.kube/config"


@needs_kubectl
def test_unset_kubeconfig_reads_the_kubeconfig_variable_before_home_real_kubectl(tmp_path):
    closed_port_kubeconfig(tmp_path / "home" / ".kube" / "config", 2)
    named = closed_port_kubeconfig(tmp_path / "named.conf", 3)
    state = kube_cluster_in(tmp_path / "home", KUBECONFIG=named)
    assert refused_port(state) == "3"
    assert state["kubeconfig"] == f"KUBECONFIG={named}"


@needs_kubectl
def test_unset_kubeconfig_reads_a_kubeconfig_list_as_kubectl_merges_it_real_kubectl(tmp_path):
    """A KUBECONFIG list: kubectl skips the file that does not exist and reads the other."""
    named = closed_port_kubeconfig(tmp_path / "second.conf", 4)
    listed = f"{tmp_path}/absent.conf:{named}"
    state = kube_cluster_in(tmp_path / "home", KUBECONFIG=listed)
    assert refused_port(state) == "4"
    assert state["kubeconfig"] == f"KUBECONFIG={listed}"


@needs_kubectl
def test_a_set_kubeconfig_wins_over_the_variable_and_home_real_kubectl(tmp_path):
    closed_port_kubeconfig(tmp_path / "home" / ".kube" / "config", 2)
    named = closed_port_kubeconfig(tmp_path / "named.conf", 3)
    setting = closed_port_kubeconfig(tmp_path / "setting.conf", 5)
    state = kube_cluster_in(tmp_path / "home", setting, KUBECONFIG=named)
    assert refused_port(state) == "5"
    assert state["kubeconfig"] == setting


@needs_kubectl
def test_unset_kubeconfig_without_variable_or_home_config_falls_back_to_kubeadms_admin_conf_real_kubectl(tmp_path):
    """Neither KUBECONFIG nor ~/.kube/config: kubeadm's /etc/kubernetes/admin.conf, which this machine
    lacks (no control plane here): the fact names all three, and kubectl itself is pointed at admin.conf."""
    assert not Path("/etc/kubernetes/admin.conf").exists()
    state = kube_cluster_in(tmp_path / "home")
    assert state["kubectl"] and not state["kubeconfig_readable"]
    assert state["error"] == "KUBECONFIG is unset, and neither ~/.kube/config nor /etc/kubernetes/admin.conf exists"
    bare = subprocess.run(
        ["/bin/sh", "-c", kubectl(None, "get", "--raw", "/version").get_raw_value()],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode != 0 and "/etc/kubernetes/admin.conf" in bare.stderr, bare.stderr


@needs_kubectl
def test_a_kubeconfig_variable_naming_no_readable_file_is_named_real_shell(tmp_path):
    closed_port_kubeconfig(tmp_path / "home" / ".kube" / "config", 2)
    listed = f"{tmp_path}/a.conf:{tmp_path}/b.conf"
    state = kube_cluster_in(tmp_path / "home", KUBECONFIG=listed)
    assert state["error"] == f"KUBECONFIG={listed} names no readable file"


def test_gpu_node_identity_of_this_machine_real_shell_no_gpu():
    """This machine has no GPU, no nvidia-smi and no libnvidia-ml: zero GPUs, nothing to label."""
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command(driver_root="/")))
    assert state["hostname"] == subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert state["products"] == []
    assert state["nvidia_smi"] in ("missing",) or state["nvidia_smi"].startswith("exit ")
    if state["nvidia_smi"] == "missing":
        assert state["nvml"] == "no library"


def mock_driver_root(folder: Path, profile: str) -> Path:
    """A driver root as the lab lays out nvml-mock's (tests/lab/nvml_mock.py): NVIDIA's mock library
    from the lab's image, the profile from the corpus as its config."""
    try:
        return nvml_mock.lay_out(folder, profile)
    except LabMissing as missing:
        pytest.skip(str(missing))


@needs_lab
@pytest.mark.parametrize("profile", ["a100", "t4"])
def test_gpu_node_identity_reads_nvml_from_a_driver_root_without_nvidia_smi_real_mock_library(tmp_path, profile):
    """A driver root with NVIDIA's real mock libnvidia-ml (nvml-mock, from the lab) and no
    nvidia-smi, as on a lab node: the fact reads the products through NVML with python3; the
    profile's name, once per device."""
    if shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi is on PATH here: the fact reads it first")
    root = mock_driver_root(tmp_path / "driver", profile)
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command(driver_root=str(root))))
    assert state["nvidia_smi"] == "missing" and state["nvml"] == "ok"
    assert state["products"] == nvml_mock.products(profile)


# Answers no query: prints version lines whatever it is asked, as a driver root's fallback script may.
STANDIN_NVIDIA_SMI = """#!/bin/sh
echo "NVIDIA-SMI stand-in, version lines only"
echo "Driver Version: 550.163.01"
"""


@needs_lab
def test_gpu_node_identity_reads_nvml_past_a_nvidia_smi_that_answers_no_query_standin_nvidia_smi_real_mock_library(
    tmp_path,
):
    """The mock's driver root with a STAND-IN nvidia-smi (written here) that ignores the query and
    prints version lines: they are no product names, so the fact reads the real mock libnvidia-ml
    through NVML instead."""
    if shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi is on PATH here: the fact reads it first")
    root = mock_driver_root(tmp_path / "driver", "a100")
    (root / "usr" / "bin").mkdir()
    (root / "usr" / "bin" / "nvidia-smi").write_text(STANDIN_NVIDIA_SMI)
    (root / "usr" / "bin" / "nvidia-smi").chmod(0o755)
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command(driver_root=str(root))))
    assert (state["nvidia_smi"], state["nvml"]) == ("unexpected output", "ok")
    assert state["products"] == nvml_mock.products("a100")


def tool_path(folder: Path, *, without: str) -> str:
    """A PATH holding this machine's sh, hostname, cat, sed and python3 (minus ``without``) only."""
    folder.mkdir()
    for tool in ("sh", "hostname", "cat", "sed", "python3"):
        if tool != without:
            (folder / tool).symlink_to(shutil.which(tool))
    return str(folder)


def test_gpu_node_identity_without_python3_says_so_real_shell(tmp_path):
    """A driver root with a libnvidia-ml but no nvidia-smi, on a host without python3: no product,
    and the fact says why (the report names it)."""
    root = tmp_path / "driver"
    (root / "usr" / "lib64").mkdir(parents=True)
    (root / "usr" / "lib64" / "libnvidia-ml.so.1").write_bytes(b"not read")
    env = {"PATH": tool_path(tmp_path / "bin", without="python3")}
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command(driver_root=str(root)), env=env))
    assert (state["nvidia_smi"], state["nvml"], state["products"]) == ("missing", "no python3", [])


def test_gpu_node_identity_library_that_is_not_nvml_is_one_clear_line_real_python(tmp_path):
    """A libnvidia-ml.so.1 that is another library (this machine's libz): NVML cannot be read,
    one line says why, no product."""
    libz = ctypes.util.find_library("z")
    if not libz:
        pytest.skip("no libz on this machine")
    root = tmp_path / "driver"
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    source = next(
        Path(d) / libz
        for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib")
        if (Path(d) / libz).exists()
    )
    shutil.copy(source, root / "usr" / "lib" / "x86_64-linux-gnu" / "libnvidia-ml.so.1")
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command(driver_root=str(root))))
    assert state["nvml"].startswith("failed cannot load NVML from ") and "nvmlErrorString" in state["nvml"]
    assert state["products"] == []


def test_gpu_node_identity_runs_the_driver_roots_nvidia_smi_with_its_library_standin_nvidia_smi(tmp_path):
    """nvidia-smi off PATH but in the driver root (a driver container's root): the fact runs that one
    with the root's library folder as LD_LIBRARY_PATH. STAND-IN nvidia-smi (a script: no GPU or driver
    here) that answers only when given that library folder."""
    root = tmp_path / "driver"
    (root / "usr" / "lib64").mkdir(parents=True)
    (root / "usr" / "lib64" / "libnvidia-ml.so.1").write_bytes(b"not read")
    (root / "usr" / "bin").mkdir()
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
[ "$LD_LIBRARY_PATH" = "{root}/usr/lib64" ] || exit 9
[ "$*" = "--query-gpu=name,index --format=csv,noheader" ] || exit 2
echo 'NVIDIA H100 80GB HBM3, 0'
echo 'NVIDIA H100 80GB HBM3, 1'
""")
    smi.chmod(0o755)
    env = {"PATH": tool_path(tmp_path / "bin", without="")}
    state = GpuNodeIdentity().process(run(GpuNodeIdentity().command(driver_root=str(root)), env=env))
    assert state == {
        "hostname": state["hostname"],
        "pci_gpus": state["pci_gpus"],
        "nvidia_smi": "ok",
        "nvml": None,
        "products": ["NVIDIA H100 80GB HBM3"] * 2,
        "cdi_spec": state["cdi_spec"],
    }


def test_gpu_node_identity_parsed_from_fixtures():
    assert GpuNodeIdentity().process(fixture("identity-a100x2.txt")) == {
        "hostname": "GPU-Node-1",
        "pci_gpus": 2,
        "nvidia_smi": "ok",
        "nvml": None,
        "products": ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"],
        "cdi_spec": False,
    }
    assert GpuNodeIdentity().process(["hostname gpu-1", "pci_gpus 1", "cdi_spec 1"])["cdi_spec"] is True
    assert GpuNodeIdentity().process(fixture("identity-driver-down.txt"))["products"] == []
    mock = GpuNodeIdentity().process(fixture("identity-nvml-mock-t4.txt"))
    assert (mock["nvidia_smi"], mock["nvml"], mock["products"]) == ("missing", "ok", ["NVIDIA T4"] * 4)
    failed = GpuNodeIdentity().process(fixture("identity-nvml-failed.txt"))
    assert failed["nvml"] == "failed nvmlInit_v2: Driver Not Loaded" and failed["products"] == []


def test_nodes_and_labels_parsed():
    state = KubeNodes().process(fixture("nodes.txt"))
    assert state["error"] is None
    assert state["nodes"]["gpu1"]["nvidia.com/gpu.present"] == "true"
    assert set(state["nodes"]) == {"gpu1", "cp1"}
    assert KubeNodes().process(["rc 1", "err error: You must be logged in to the server (Unauthorized)"]) == {
        "nodes": None,
        "error": "error: You must be logged in to the server (Unauthorized)",
    }


def test_live_objects_parsed_from_a_kubectl_list():
    objects = KubeLiveObjects().process(fixture("live-objects-list.txt"))["objects"]
    assert objects[("RuntimeClass", "", "nvidia")]["gpu-node.io/digest"] == "0123456789abcdef0123"
    assert objects[("ConfigMap", "nvidia-device-plugin", "nvidia-device-plugin-configs")] == {}
    assert KubeLiveObjects().process(["rc 0"]) == {"objects": {}, "error": None}


def test_server_side_diff_exit_codes():
    assert KubeServerSideDiff().process(["rc 0"])["changed"] is False
    assert KubeServerSideDiff().process(["rc 1", "out -  replicas: 4", "out +  replicas: 8"])["changed"] is True
    failed = KubeServerSideDiff().process(["rc 2", 'err error: unable to recognize "STDIN": no matches for kind'])
    assert failed["changed"] is None and failed["error"].startswith("error: unable to recognize")


def test_helm_release_parsed():
    assert HelmRelease().process(["helm-missing"])["error"] == "helm is not installed (not on PATH)"
    state = HelmRelease().process(
        [
            "list-rc 0",
            'list-out [{"name":"nvdp","namespace":"nvidia-device-plugin","revision":"2",'
            '"status":"deployed","chart":"nvidia-device-plugin-0.17.0","app_version":"0.17.0"}]',
            "values-rc 0",
            'values-out {"config":{"default":"no-sharing"}}',
        ]
    )
    assert (state["exists"], state["chart"], state["status"]) == (True, "nvidia-device-plugin-0.17.0", "deployed")
    assert state["values"] == {"config": {"default": "no-sharing"}}


@pytest.mark.parametrize(
    "product, label",
    [
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
        ("Tesla P100-PCIE-16GB", "nvidia-tesla-p100-pcie-16gb"),
        ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090"),
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("", None),
        (None, None),
    ],
)
def test_accelerator_label_normalised(product, label):
    assert accelerator_label(product) == label


def test_accelerator_label_fits_a_label_value():
    value = accelerator_label("NVIDIA " + "X" * 100)
    assert len(value) <= 63 and value[-1].isalnum()


def test_kube_node_name_mapping_then_hostname_then_inventory_name():
    assert kube_node_name({"10.0.0.5": "gpu-a"}, "10.0.0.5", "whatever") == "gpu-a"
    assert kube_node_name({}, "10.0.0.6", "GPU-Node-1") == "gpu-node-1"
    assert kube_node_name({}, "gpu3", None) == "gpu3"


def test_labels_to_change_only_differences_and_removals():
    current = {"nvidia.com/gpu.present": "true", "accelerator": "nvidia-t4", "nvidia.com/mps.capable": "true"}
    wanted = {
        "nvidia.com/gpu.present": "true",
        "accelerator": "nvidia-a100",
        "nvidia.com/mps.capable": None,
        "nvidia.com/device-plugin.config": None,
    }
    assert labels_to_change(current, wanted) == {"accelerator": "nvidia-a100", "nvidia.com/mps.capable": None}


def test_stamp_digest_depends_on_content_only():
    first, digest = stamp_manifest("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n", "ns")
    again, same = stamp_manifest("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n", "ns")
    _, other = stamp_manifest("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n", "ns")
    assert digest == same != other and first == again
    assert f"gpu-node.io/digest: {digest}" in first
