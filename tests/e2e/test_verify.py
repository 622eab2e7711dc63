"""
Verify on real bookworm node containers (no GPU on these machines).

The toolkit is the one tests/toolkit_repo.py serves: the STAND-IN packages (test id
`standin-toolkit`), or NVIDIA's own debs from the opt-in lab (`real-toolkit`); verify reads its
`nvidia-ctk --version`, and the runtime's log proves which containers went through it. containerd is Debian's, in
the node image (its install is tests/e2e/test_containerd_e2e.py's subject), wired by the runtimes stage. The
CRI path (runtime handler `nvidia`, the kubelet's path) with the real crictl is tests/e2e/test_verify_crictl.py.
"""

from __future__ import annotations

import json

import tomlkit
from harness import assert_no_change

CONFIG = "/etc/containerd/config.toml"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# What a deploy leaves that verification must not touch.
WATCHED = [
    CONFIG,
    "/usr/bin/nvidia-container-runtime",
    "/usr/bin/nvidia-ctk",
    "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
    "/var/lib/dpkg/status",
]
RUNTIME_STEPS = ("toolkit", "runtime_binary", "containerd_config")
GPU_STEPS = ("gpu_pci", "kernel_module", "nvidia_smi", "driver_version", "ctr_run")


def deploy_data(toolkit_repo, report, **extra) -> dict:
    return {
        "stages": "toolkit,runtimes,verify",
        "container_runtimes": "containerd",
        "verify_report_path": str(report),
        **toolkit_repo.data(),
        **extra,
    }


def read_report(path) -> dict:
    return json.loads(path.read_text())


def steps_of(report: dict) -> dict:
    (node,) = report["nodes"]
    return {step["name"]: step for step in node["steps"]}


def dry_run_plan(node, data) -> list:
    """What a --dry run of the whole deploy would do: every operation and whether it would change."""
    result = node.deploy(data=data, extra_args=["--dry"])
    assert result.returncode == 0, result.explain()
    plan = json.loads(result.stdout)["plan"]
    return json.loads(json.dumps(plan, sort_keys=True).replace(node.id, "NODE"))


def test_verify_without_gpu_reports_runtime_pass_gpu_skip_and_changes_nothing(containerd_node, toolkit_repo, tmp_path):
    """No GPU here: GPU steps skip with "no NVIDIA GPU"; the runtime steps pass on the real node."""
    node = containerd_node
    report = tmp_path / "report.json"
    data = deploy_data(toolkit_repo, report)

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    json.loads(first.stdout)  # --json stdout stays pure JSON with the table on stderr
    assert "--> GPU node verification (1 node)" in first.stderr
    steps = steps_of(read_report(report))
    for name in RUNTIME_STEPS:
        assert steps[name]["status"] == "pass", steps[name]
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skip", steps[name]
        assert "no NVIDIA GPU" in steps[name]["reason"], steps[name]
    assert steps["containerd_config"]["reason"].startswith("containerd 1.6.")
    assert "BinaryName=/usr/bin/nvidia-container-runtime SystemdCgroup=true" in steps["containerd_config"]["reason"]
    assert steps["cri_handler"]["status"] == "skip" and "crictl not installed" in steps["cri_handler"]["reason"]
    assert steps["cgroup_driver"]["status"] == "skip"
    (record,) = read_report(report)["nodes"]
    assert steps["toolkit"]["reason"] == "NVIDIA container toolkit 1.20.0 (nvidia-ctk)", steps["toolkit"]
    assert record["toolkit"] == toolkit_repo.version.split("-")[0]
    assert record["runtime"].startswith("containerd 1.6.") and record["gpus"] == []

    # Read-only: the standalone verify changes no file, restarts nothing, and a dry run of the
    # whole deploy plans the same before and after it.
    before = {path: node.stat(path) for path in WATCHED}
    service = node.service("containerd")
    dry_before = dry_run_plan(node, data)
    standalone_report = tmp_path / "standalone.json"
    standalone = node.deploy(
        data={**data, "verify_report_path": str(standalone_report)}, deploy_file="deploy/verify.py"
    )
    assert standalone.returncode == 0, standalone.explain()
    assert_no_change(standalone)
    assert {path: node.stat(path) for path in WATCHED} == before
    assert node.service("containerd") == service
    assert dry_run_plan(node, data) == dry_before
    assert steps_of(read_report(standalone_report)) == steps

    # A re-run of the whole deploy, verification included, is still change-free.
    rerun = node.deploy(data=data)
    assert_no_change(rerun)
    assert "Verify | Verify the node can run GPU containers (read-only)" in [
        op["name"] for op in rerun.results()["operations"]
    ]

    # require_gpu: the same node now fails, with the report still written.
    strict_report = tmp_path / "strict.json"
    strict = node.deploy(
        data={**data, "require_gpu": "true", "verify_report_path": str(strict_report)},
        deploy_file="deploy/verify.py",
        json_output=False,
    )
    assert strict.returncode != 0
    strict_steps = steps_of(read_report(strict_report))
    assert strict_steps["gpu_pci"] == {
        "name": "gpu_pci",
        "status": "fail",
        "reason": "no NVIDIA GPU on the PCI bus, and require_gpu is true",
    }
    assert "verification failed: gpu_pci" in strict.stderr

    # A kubelet that wants the systemd cgroup driver, a containerd wired with SystemdCgroup = false.
    node.write(
        KUBELET_CONFIG, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
    )
    mismatch_report = tmp_path / "mismatch.json"
    mismatch = node.deploy(
        data={**data, "systemd_cgroup": "false", "verify_report_path": str(mismatch_report)}, json_output=False
    )
    assert mismatch.returncode != 0, mismatch.explain()
    assert "SystemdCgroup = false" in node.read(CONFIG)
    cgroup = steps_of(read_report(mismatch_report))["cgroup_driver"]
    assert cgroup["status"] == "fail"
    assert "containerd runtime nvidia SystemdCgroup = false" in cgroup["reason"]
    assert "kubelet cgroupDriver: systemd (/var/lib/kubelet/config.yaml)" in cgroup["reason"]
    assert "verification failed: cgroup_driver" in mismatch.stderr


def test_docker_and_containerd_with_nvidia_as_a_handler_only_report_their_wiring(
    containerd_node, toolkit_repo, tmp_path
):
    """containerd and Docker on one node, nvidia_runtime_default=false: both steps pass with runc
    still the default (a real dockerd's `docker info`, a real `containerd config dump`). The CRI
    path with the real crictl is tests/e2e/test_verify_crictl.py."""
    node = containerd_node
    node.write("/etc/docker/daemon.json", '{"bridge": "none", "iptables": false}\n')
    report = tmp_path / "report.json"
    first = node.deploy(
        data=deploy_data(
            toolkit_repo,
            report,
            nvidia_runtime_default="false",
            container_runtimes="containerd,docker",
            docker_install="true",
        )
    )
    assert first.returncode == 0, first.explain()
    steps = steps_of(read_report(report))
    assert steps["containerd_config"]["status"] == "pass"
    assert steps["docker_config"]["status"] == "pass", steps["docker_config"]
    assert steps["docker_config"]["reason"].startswith(
        "runtime nvidia (/usr/bin/nvidia-container-runtime), default runtime runc"
    )
    assert steps["docker_run"] == {"name": "docker_run", "status": "skip", "reason": "no NVIDIA GPU"}
    assert steps["runtime_binary"]["status"] == "pass"

    dumped = tomlkit.parse(node.sh("containerd config dump").stdout).unwrap()
    cri_plugin = dumped["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri_plugin["containerd"]["default_runtime_name"] == "runc", "only a RuntimeClass handler here"
