"""
Verify's steps as plan tests (pyinfra's @fake connector): given what a node's commands
print, which steps pass, fail or skip, which commands run (crictl's sequence), and that a
failing step fails the host while a passing verify yields no command (no change).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from plan import QUICK, Node, Output, Plan, assigned, run_pyinfra, settings_for
from pyinfra.api import Inventory
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from standin_libcuda import standin_libcuda  # noqa: F401 (the fixture)

from deploy.facts.containerd import ContainerdInstallations
from deploy.facts.cuda import CudaInit
from deploy.facts.installed_kernels import InstalledKernels
from deploy.facts.nvidia import NodeSurvey
from deploy.facts.verification import Executables, VerifyReadout
from deploy.operations.cdi import state_read as cdi_state_read
from deploy.operations.devices import links_read
from deploy.operations.probes import CrictlRun
from deploy.operations.verification import containerd_config_read, containerd_of, signing_read, verify_read
from deploy.reports.node_report import FAIL, PASS, SKIP
from deploy.tasks.verification import verify
from deploy.verification.options import VerifyOptions

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
INSTALLATION_READ = "/var/lib/rancher/k3s/agent/etc/containerd"  # in ContainerdInstallations's command
SMI = FIXTURES / "nvidia-smi"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def smi_output(name: str) -> str:
    return "\n".join(line for line in (SMI / name).read_text().splitlines() if not line.startswith("# "))


def containerd_dump(
    systemd_cgroup: bool = True, default: str = "nvidia", binary: str = "/usr/bin/nvidia-container-runtime"
) -> str:
    """A containerd 1.6 `config dump` (its default config) with the nvidia runtime wired."""
    base = (FIXTURES / "containerd" / "default-1.6.20.toml").read_text()
    base = base.replace('default_runtime_name = "runc"', f'default_runtime_name = "{default}"')
    # The wiring sets runc's SystemdCgroup with nvidia's.
    base = base.replace("SystemdCgroup = false", f"SystemdCgroup = {str(systemd_cgroup).lower()}")
    nvidia = f"""
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "{binary}"
    SystemdCgroup = {str(systemd_cgroup).lower()}
"""
    return base + nvidia


def node_lines(
    *,
    gpus: int = 0,
    smi: str | None = None,
    smi_exit: int = 0,
    smi_list: str | None = None,
    kmod: str | None = None,
    toolkit: str | None = "1.17.8",
    dump: str | None = None,
    kubelet: str | None = None,
    crictl: bool = False,
    ctr_image: bool = False,
    ctrd_version: str = "1.6.20~ds1",
    dump_exit: int = 0,
    runtime_executable: bool = True,
    switches: int = 0,
    persistenced: str = "active",
    fabric_manager: str = "not-found",
    cuda: list[str] | None = None,
) -> list[str]:
    """What the node's one read prints. Unless said otherwise, nvidia-persistenced runs, persistence
    mode is on where nvidia-smi answers, and cuInit answers as the GPUs nvidia-smi lists say
    (``cuda``: the CUDA read's own lines instead)."""
    lines = [f"pci 0000:0{index + 1}:00.0 0x20b0 0x030200" for index in range(gpus)]
    lines += [f"pci 0000:{index + 0x81:02x}:00.0 0x22a3 0x068000" for index in range(switches)]
    lines.append("kernel 6.1.0-18-amd64")
    if kmod:
        lines.append(f"kmod_version {kmod}")
    if smi is None:
        lines.append("smi_path ")
    else:
        lines += ["smi_path /usr/bin/nvidia-smi", f"smi_rc {smi_exit}", f"smi_out {b64(smi)}"]
        if smi_list:
            lines.append(f"smi_list {b64(smi_list)}")
        if smi_exit == 0:
            lines.append(f"smi_persistence {b64(''.join(f'{index}, Enabled' + chr(10) for index in range(gpus)))}")
    lines.append(
        f"unit nvidia-persistenced LoadState={'not-found' if persistenced == 'not-found' else 'loaded'} "
        f"ActiveState={'inactive' if persistenced == 'not-found' else persistenced}"
    )
    lines.append(
        f"unit nvidia-fabricmanager LoadState={'not-found' if fabric_manager == 'not-found' else 'loaded'} "
        f"ActiveState={'inactive' if fabric_manager == 'not-found' else fabric_manager}"
    )
    if cuda is None:
        cuda = (
            cuda_lines(0, devices=gpus)
            if smi is not None and smi_exit == 0 and gpus
            else ["cuda_load_error libcuda.so.1: cannot open shared object file: No such file or directory"]
        )
    lines += ["cuda_python /usr/bin/python3", *cuda, "cuda_exit 0"]
    if toolkit:
        lines.append(f"ctk_version NVIDIA Container Toolkit CLI version {toolkit}")
    lines.append("ncr_path /usr/bin/nvidia-container-runtime")
    if dump is not None:
        lines += [
            "ctrd_path /usr/bin/containerd",
            "ctrd_active active",
            # ContainerdConfig's lines (read in the same command)
            "binary_path /usr/bin/containerd",
            f"version containerd github.com/containerd/containerd {ctrd_version} {ctrd_version}-1",
            f"dump_exit_code {dump_exit}",
            f"dump {b64(dump)}",
            f"exec {int(runtime_executable)} /usr/bin/nvidia-container-runtime",
            f"ctr_image {1 if ctr_image else 0}",
        ]
    else:
        lines.append("ctrd_path ")
    if kubelet is not None:
        lines.append(f"kubelet_config {b64(kubelet)}")
    lines.append("docker_path ")
    lines.append(f"crictl_path {'/usr/bin/crictl' if crictl else ''}")
    return lines


LIBCUDA = "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.216.03"


def cuda_lines(result: int, devices: int = 0, name: str | None = None, text: str | None = None) -> list[str]:
    """What the CUDA read prints when cuInit returns ``result`` (names as the library gives them)."""
    lines = [f"cuda_library {LIBCUDA}", "cuda_driver_version 12020", f"cuda_init {result}"]
    if result == 0:
        return lines + [f"cuda_device_count 0 {devices}"]
    return lines + ([f"cuda_error_name {name}"] if name else []) + ([f"cuda_error_string {text}"] if text else [])


def crictl_lines(**steps: tuple[int, str]) -> list[str]:
    return [f"step {name} {code} {b64(text)}" for name, (code, text) in steps.items()]


SANDBOX_ID = "3f1a8c2b7d9e4f60a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718"
CONTAINER_ID = "9a8b7c6d5e4f30211a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"


def run_verify(tmp_path, lines, crictl=None, runs=None, facts=(), installation=(), driver_packages=(), **data):
    """
    The verify task on a node whose verify read prints ``lines`` and whose ContainerdInstallations read
    prints ``installation`` (nothing: a plain containerd), with ``facts`` besides; ``crictl`` and ``runs``
    answer the probes (by a fragment of their command); ``driver_packages``: the run's driver stage's.
    """
    report = tmp_path / "report.json"
    commands = {}
    if crictl is not None:
        commands["runp --runtime"] = crictl
    for key, value in (runs or {}).items():
        commands[key] = value
    settings = settings_for(verify_report_path=str(report), **data)
    # The node facts (PCI GPUs, kernel) and verify's read print their lines in the one command
    # they are read in: each fact takes its own kinds of line from them.
    node = Node(
        facts=[
            (ContainerdInstallations, installation),
            (NodeSurvey, lines),
            (verify_call(settings, installation), lines),
            (containerd_call(settings, installation), lines),
            (CudaInit, lines),
            (cdi_state_read(), lines),
            (links_read(settings.nvidia_driver_root), lines),
            (InstalledKernels, lines),
            (signing_read(VerifyOptions.from_settings(settings)), lines),
            *facts,
        ],
        commands=commands,
    )
    # tests/plan.py's run_plan, keeping the plan when the host fails (a failing step must fail it).
    inventory = Inventory(([("@fake/node", QUICK)], {}))
    state, error = run_pyinfra(
        inventory, lambda state: add_deploy(state, verify, settings, driver_packages), nodes={"@fake/node": node}
    )
    failed = error is not None
    if failed:
        assert isinstance(error, PyinfraError) and "No hosts remaining" in str(error), error
    host = inventory.get_host("@fake/node")
    plan = Plan(state=state, error=error)
    assert failed == (host in state.failed_hosts)
    record = json.loads(report.read_text())["nodes"][0]
    steps = {step["name"]: step for step in record["steps"]}
    return plan, record, steps, failed


def containerd_in(settings, installation: list[str]):
    """The containerd a node whose ContainerdInstallations read prints ``installation`` runs."""
    options = VerifyOptions.from_settings(settings)
    found = ContainerdInstallations().process(list(installation)) if installation else ContainerdInstallations.default()
    return options, containerd_of(options, found if "containerd" in options.runtimes else None)


def verify_call(settings, installation: list[str]):
    """Verify's read (deploy/operations/verification.py) of that containerd."""
    return verify_read(*containerd_in(settings, installation))


def containerd_call(settings, installation: list[str]):
    """The read of that containerd's version and config dump."""
    return containerd_config_read(containerd_in(settings, installation)[1])


def statuses(steps: dict) -> dict:
    return {name: step["status"] for name, step in steps.items()}


def test_node_without_gpu_wired_containerd_passes_runtime_steps_and_skips_gpu_steps(tmp_path):
    lines = node_lines(smi=smi_output("exit-9.txt"), smi_exit=9, dump=containerd_dump())
    plan, record, steps, failed = run_verify(tmp_path, lines)
    assert statuses(steps) == {
        "gpu_pci": SKIP,
        "kernel_module": SKIP,
        "nvidia_smi": SKIP,
        "driver_version": SKIP,
        "kernel_module_type": SKIP,
        "persistence": SKIP,
        "fabric_manager": SKIP,
        "cuda": SKIP,
        "boot_kernels": SKIP,
        "version_set": SKIP,
        "module_signing": SKIP,
        "driver_branch": SKIP,
        "toolkit": PASS,
        "runtime_binary": PASS,
        "containerd_config": PASS,
        "cgroup_driver": SKIP,
        "cdi": SKIP,
        "runtime_mode": SKIP,
        "dev_char": SKIP,
        "cri_handler": SKIP,
        "ctr_run": SKIP,
        "docker_config": SKIP,
        "docker_run": SKIP,
    }
    assert steps["nvidia_smi"]["reason"].startswith("no NVIDIA GPU (nvidia-smi: exit 9: NVIDIA driver is not loaded")
    assert steps["ctr_run"]["reason"] == "no NVIDIA GPU"
    assert steps["cri_handler"]["reason"].startswith("crictl not installed")
    assert record["ok"] is True and not failed
    assert record["gpus"] == [] and record["toolkit"] == "1.17.8" and record["runtime"] == "containerd 1.6.20~ds1"
    # Read-only: the only commands are the two reads (which containerd the node runs, then verify's
    # facts of that containerd) and nothing verify yields.
    assert len(plan.commands) == 2 and INSTALLATION_READ in plan.commands[0] and "kmod_version" in plan.commands[1]


def test_require_gpu_without_gpu_fails_the_host(tmp_path):
    lines = node_lines(dump=containerd_dump())
    _, record, steps, failed = run_verify(tmp_path, lines, require_gpu="true")
    assert steps["gpu_pci"] == {
        "name": "gpu_pci",
        "status": FAIL,
        "reason": "no NVIDIA GPU on the PCI bus, and require_gpu is true",
    }
    assert record["ok"] is False and failed


def test_gpu_node_with_mig_passes_and_runs_ctr_with_gpus(tmp_path):
    lines = node_lines(
        gpus=1,
        kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  450.80.02  Wed Sep 23 01:13:39 UTC 2020",
        smi=smi_output("mig-query.txt"),
        smi_list=smi_output("mig-list.txt"),
        dump=containerd_dump(),
        ctr_image=True,
    )
    runs = {"run --rm --gpus 0": ["rc 0", "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)"]}
    plan, record, steps, failed = run_verify(tmp_path, lines, runs=runs)
    assert statuses(steps)["nvidia_smi"] == PASS and "7 MIG device(s)" in steps["nvidia_smi"]["reason"]
    assert steps["driver_version"]["reason"] == "driver 450.80.02 >= 384.81 (lowest accepted)"
    assert steps["ctr_run"]["status"] == PASS
    (ctr,) = plan.matching("run --rm --gpus 0")
    assert "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04" in ctr and "nvidia-smi" in ctr
    assert record["driver"] == "450.80.02" and record["gpus"] == [
        "A100-SXM4-40GB (GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)"
    ]
    assert not failed


def test_gpu_with_version_mismatch_fails_naming_the_mismatch(tmp_path):
    lines = node_lines(
        gpus=2,
        kmod="NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build",
        smi=smi_output("version-mismatch.txt"),
        smi_exit=18,
        dump=containerd_dump(),
    )
    _, record, steps, failed = run_verify(tmp_path, lines)
    assert steps["gpu_pci"]["status"] == PASS and "2 NVIDIA GPU(s)" in steps["gpu_pci"]["reason"]
    assert steps["nvidia_smi"]["status"] == FAIL
    assert "Driver/library version mismatch" in steps["nvidia_smi"]["reason"]
    assert steps["driver_version"]["reason"] == "driver 570.124.06 >= 384.81 (lowest accepted)"
    assert steps["ctr_run"] == {"name": "ctr_run", "status": SKIP, "reason": "the GPU is not usable (see nvidia_smi)"}
    assert failed and record["ok"] is False


def test_gpu_on_the_bus_without_the_driver_fails_module_and_smi(tmp_path):
    lines = node_lines(gpus=1, dump=containerd_dump())
    _, _, steps, failed = run_verify(tmp_path, lines)
    assert (
        steps["kernel_module"]["status"] == FAIL and "/proc/driver/nvidia/version" in steps["kernel_module"]["reason"]
    )
    assert steps["nvidia_smi"] == {"name": "nvidia_smi", "status": FAIL, "reason": "nvidia-smi not installed"}
    assert failed


def test_old_driver_fails_the_minimum(tmp_path):
    old = "0, GPU-36c9561a-02ef-5c4d-3733-f0a56c42dc45, Tesla K80, 11441, 375.66"
    lines = node_lines(
        gpus=1,
        kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  375.66  Mon May  1 15:29:16 PDT 2017",
        smi=old,
        dump=containerd_dump(),
    )
    _, _, steps, _ = run_verify(tmp_path, lines)
    assert steps["driver_version"] == {
        "name": "driver_version",
        "status": FAIL,
        "reason": "driver 375.66 < 384.81 (lowest accepted)",
    }


def test_kubelet_systemd_with_systemd_cgroup_false_fails_naming_both(tmp_path):
    kubelet = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
    lines = node_lines(dump=containerd_dump(systemd_cgroup=False), kubelet=kubelet)
    _, _, steps, failed = run_verify(tmp_path, lines, systemd_cgroup="false")
    assert steps["containerd_config"]["status"] == PASS
    reason = steps["cgroup_driver"]["reason"]
    assert steps["cgroup_driver"]["status"] == FAIL
    assert "containerd runtime nvidia SystemdCgroup = false" in reason
    assert "kubelet cgroupDriver: systemd (/var/lib/kubelet/config.yaml)" in reason
    assert "set systemd_cgroup=true" in reason
    assert failed


def test_kubelet_without_cgroup_driver_means_cgroupfs(tmp_path):
    kubelet = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    lines = node_lines(dump=containerd_dump(systemd_cgroup=True), kubelet=kubelet)
    _, _, steps, _ = run_verify(tmp_path, lines)
    assert steps["cgroup_driver"]["status"] == FAIL
    assert "kubelet cgroupDriver: cgroupfs" in steps["cgroup_driver"]["reason"]


def test_containerd_config_mismatches_are_each_named(tmp_path):
    lines = node_lines(dump=containerd_dump(systemd_cgroup=False, default="runc", binary="/opt/nvidia/runtime"))
    # The binary the config names is checked in a second read: not there.
    second_read = ((Executables, {"paths": ("/opt/nvidia/runtime",)}), ["exec 0 /opt/nvidia/runtime"])
    _, _, steps, _ = run_verify(tmp_path, lines, facts=[second_read])
    reason = steps["containerd_config"]["reason"]
    assert steps["containerd_config"]["status"] == FAIL
    assert reason.startswith('plugins."io.containerd.grpc.v1.cri".containerd: ')
    assert (
        "runtimes.nvidia.options.BinaryName is '/opt/nvidia/runtime', not '/usr/bin/nvidia-container-runtime'" in reason
    )
    assert "runtimes.nvidia.options.SystemdCgroup is false, not true (systemd_cgroup)" in reason
    assert "runtimes.runc.options.SystemdCgroup is false, not true (systemd_cgroup)" in reason
    assert "default_runtime_name is 'runc', not 'nvidia'" in reason


def test_nvidia_runtime_missing_from_containerd_fails(tmp_path):
    dump = (FIXTURES / "containerd" / "default-1.6.20.toml").read_text()
    _, _, steps, _ = run_verify(tmp_path, node_lines(dump=dump))
    assert steps["containerd_config"]["status"] == FAIL
    assert 'no plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia' in steps["containerd_config"]["reason"]


def test_containerd_2_config_version_3_is_read_under_the_cri_runtime_plugin(tmp_path):
    base = (FIXTURES / "containerd" / "default-2.1.9.toml").read_text()
    dump = (
        base.replace("SystemdCgroup = false", "SystemdCgroup = true")
        + """
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
    BinaryName = '/usr/bin/nvidia-container-runtime'
    SystemdCgroup = true
"""
    )
    _, _, steps, _ = run_verify(tmp_path, node_lines(dump=dump), nvidia_runtime_default="false")
    assert steps["containerd_config"]["status"] == PASS, steps["containerd_config"]
    assert "io.containerd.cri.v1.runtime" in steps["containerd_config"]["reason"]


# A crictl STAND-IN (the GPU path cannot run here; tests/e2e/test_verify_crictl.py runs the same
# script with the real crictl v1.36.0 on a real containerd): it answers only the exact calls a
# real crictl is given in that sequence, with what a real one prints (the config warning on
# stderr first, as without /etc/crictl.yaml), and exits 1 on any other call. Every call is logged.
CRICTL_STANDIN = r"""#!__PYTHON__
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
answers = json.load(open(os.path.join(here, "answers.json")))
args = sys.argv[1:]
endpoint = ["--runtime-endpoint", "unix:///run/containerd/containerd.sock",
            "--image-endpoint", "unix:///run/containerd/containerd.sock"]
if args[:4] == endpoint:
    args = args[4:]
def spec(path, kind):
    # crictl reads the config file it is given: it must exist and be a JSON object
    if not (os.path.basename(path) == kind + ".json" and os.path.dirname(path).startswith("/tmp/gpu-node-verify.")):
        return None
    with open(path) as stream:
        return "<" + kind + ".json>" if isinstance(json.load(stream), dict) else None
call = [spec(arg, arg.rsplit("/", 1)[-1][:-5]) if arg.endswith(".json") else arg for arg in args]
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(json.dumps(call) + "\n")
sys.stderr.write('time="2026-11-23T14:34:14Z" level=warning msg="Config \\"/etc/crictl.yaml\\" does not exist, '
                 'trying next: \\"/usr/local/bin/crictl.yaml\\""\n')
for expected, code, output in answers:
    if call == expected:
        if output:
            print(output)
        sys.exit(code)
sys.stderr.write('time="2026-11-23T14:34:14Z" level=fatal msg="stand-in crictl: unexpected call %s"\n' % call)
sys.exit(1)
"""


def crictl_standin(tmp_path, answers: list[tuple[list[str], int, str]]) -> tuple[Callable[[str], Output], Path]:
    """verify's crictl script run by a real shell on this machine, with the stand-in as ``crictl``
    on PATH; its output goes back to verify through the @fake host. Returns the answer for the
    script's command (``run_verify``'s ``crictl``) and the call log."""
    bin_dir = tmp_path / "standin-bin"
    bin_dir.mkdir()
    (bin_dir / "answers.json").write_text(json.dumps(answers))
    crictl = bin_dir / "crictl"
    crictl.write_text(CRICTL_STANDIN.replace("__PYTHON__", sys.executable))
    crictl.chmod(0o755)

    def run(command: str) -> Output:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        result = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)
        return Output(stdout=result.stdout.splitlines(), success=result.returncode == 0)

    return run, bin_dir / "calls.log"


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


POD, CONTAINER = "<pod.json>", "<container.json>"
STATE_TEMPLATE = ["inspect", "-o", "go-template", "--template", "{{.status.state}} {{.status.exitCode}}"]
NVIDIA_SMI_L = "GPU 0: A100-SXM4-40GB (UUID: GPU-36c9561a-02ef-5c4d-3733-f0a56c42dc45)"


def test_crictl_sequence_without_gpu_runs_a_host_network_sandbox_through_nvidia_and_removes_it(tmp_path):
    lines = node_lines(dump=containerd_dump(), crictl=True)
    crictl, log = crictl_standin(
        tmp_path,
        [
            (["runp", "--runtime", "nvidia", POD], 0, SANDBOX_ID),
            (["stopp", SANDBOX_ID], 0, f"Stopped sandbox {SANDBOX_ID}"),
            (["rmp", SANDBOX_ID], 0, f"Removed sandbox {SANDBOX_ID}"),
        ],
    )
    plan, _, steps, failed = run_verify(tmp_path, lines, crictl=crictl)
    assert calls(log) == [["runp", "--runtime", "nvidia", POD], ["stopp", SANDBOX_ID], ["rmp", SANDBOX_ID]]
    (script,) = plan.matching("runp --runtime")
    pod = json.loads(assigned(script, "pod_json"))
    assert pod["linux"]["security_context"]["namespace_options"]["network"] == 2  # NODE: host network
    assert pod["linux"]["cgroup_parent"] == "gpunodeverify.slice"  # the systemd driver wants a slice
    assert steps["cri_handler"]["status"] == PASS
    assert steps["cri_handler"]["reason"].startswith("host-network sandbox ran through runtime handler 'nvidia'")
    assert not failed
    assert not list(Path("/tmp").glob("gpu-node-verify.*")), "the script removes its folder"


def test_the_read_and_the_crictl_probe_run_once_per_run_in_both_modes(tmp_path):
    """Under both_modes: with -y and in the default mode (change detection, then execution)."""
    lines = node_lines(dump=containerd_dump(), crictl=True)
    crictl = crictl_lines(runp=(0, SANDBOX_ID), stopp=(0, "stopped"), rmp=(0, "removed"))
    plan, _, steps, failed = run_verify(tmp_path, lines, crictl=crictl)
    assert len(plan.matching("kmod_version")) == 1 and len(plan.matching("runp --runtime")) == 1
    assert len(plan.commands) == 3  # the two reads and the probe: a passing verify yields nothing
    assert steps["cri_handler"]["status"] == PASS and not failed


def test_crictl_sequence_on_a_gpu_node_runs_nvidia_smi_in_the_sandbox(tmp_path):
    lines = node_lines(
        gpus=1,
        kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  450.203.03  x",
        smi=smi_output("one-gpu.txt"),
        dump=containerd_dump(),
        crictl=True,
    )
    image = "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    sequence = [
        (["runp", "--runtime", "nvidia", POD], 0, SANDBOX_ID),
        (["inspecti", image], 0, json.dumps({"status": {"repoTags": [image]}})),
        (["create", SANDBOX_ID, CONTAINER, POD], 0, CONTAINER_ID),
        (["start", CONTAINER_ID], 0, CONTAINER_ID),
        ([*STATE_TEMPLATE, CONTAINER_ID], 0, "CONTAINER_EXITED 0"),
        (["logs", CONTAINER_ID], 0, NVIDIA_SMI_L),
        (["rm", "-f", CONTAINER_ID], 0, CONTAINER_ID),
        (["stopp", SANDBOX_ID], 0, f"Stopped sandbox {SANDBOX_ID}"),
        (["rmp", SANDBOX_ID], 0, f"Removed sandbox {SANDBOX_ID}"),
    ]
    crictl, log = crictl_standin(tmp_path, sequence)
    plan, _, steps, failed = run_verify(tmp_path, lines, crictl=crictl)
    assert calls(log) == [call for call, _, _ in sequence]
    (script,) = plan.matching("runp --runtime")
    container = json.loads(assigned(script, "container_json"))
    assert container["command"] == ["nvidia-smi", "-L"]
    assert container["image"]["image"] == image
    assert steps["cri_handler"]["status"] == PASS and "GPU-36c9561a" in steps["cri_handler"]["reason"], steps[
        "cri_handler"
    ]
    assert not failed


def test_crictl_sandbox_cgroup_parent_is_a_path_with_the_cgroupfs_driver(tmp_path):
    lines = node_lines(dump=containerd_dump(systemd_cgroup=False), crictl=True)
    plan, _, _, _ = run_verify(tmp_path, lines, crictl=crictl_lines(runp=(0, SANDBOX_ID)), systemd_cgroup="false")
    (script,) = plan.matching("runp --runtime")
    pod = json.loads(assigned(script, "pod_json"))
    assert pod["linux"]["cgroup_parent"] == "/gpu-node-verify"


def test_the_table_is_printed_once_to_stderr_when_verification_ends(tmp_path, capsys):
    run_verify(tmp_path, node_lines(dump=containerd_dump()))
    err = capsys.readouterr().err
    assert err.count("--> GPU node verification (1 node)") == 1
    assert "@fake/node: OK  GPUs: none  driver: -  toolkit: 1.17.8  runtime: containerd 1.6.20~ds1" in err
    assert "  containerd_config   pass  containerd 1.6.20~ds1" in err


def test_crictl_on_a_gpu_node_without_the_image_passes_the_handler_and_says_what_was_skipped(tmp_path):
    lines = node_lines(
        gpus=1,
        kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  450.203.03  x",
        smi=smi_output("one-gpu.txt"),
        dump=containerd_dump(),
        crictl=True,
    )
    crictl = crictl_lines(runp=(0, SANDBOX_ID), image=(1, "image not present"), stopp=(0, ""), rmp=(0, ""))
    plan, _, steps, failed = run_verify(tmp_path, lines, crictl=crictl)
    (script,) = plan.matching("runp --runtime")
    assert assigned(script, "image") == "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    assert steps["cri_handler"]["status"] == PASS
    assert (
        "nvidia-smi container skipped: image docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04 not on the node"
        in steps["cri_handler"]["reason"]
    )
    assert not failed


CRICTL_OUTPUT = Path(__file__).parents[1] / "fixtures" / "crictl"


@pytest.mark.parametrize(
    "fixture, message",
    [
        (
            "runp-no-nvidia-handler.txt",
            'run pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" '
            "is configured",
        ),
        (
            "runp-sandbox-image-missing.txt",
            'run pod sandbox: rpc error: code = Unknown desc = failed to get sandbox image "registry.k8s.io/pause:3.6": '
            'failed to pull image "registry.k8s.io/pause:3.6": ',
        ),
    ],
)
def test_crictl_runp_failure_is_a_fail_with_crictls_fatal_message_without_its_log_noise(tmp_path, fixture, message):
    """Real crictl v1.36.0 output (tests/fixtures/crictl): a warning about /etc/crictl.yaml, a klog
    line and the logrus fatal line; the reason is the fatal message, unquoted (cut at 300 characters)."""
    lines = node_lines(dump=containerd_dump(), crictl=True)
    output = (CRICTL_OUTPUT / fixture).read_text().strip()
    _, _, steps, failed = run_verify(tmp_path, lines, crictl=crictl_lines(runp=(1, output)))
    step = steps["cri_handler"]
    assert step["status"] == FAIL
    assert step["reason"].startswith("crictl runp --runtime nvidia (host-network sandbox) failed: " + message)
    assert "level=" not in step["reason"] and "remote_runtime.go" not in step["reason"]
    assert len(step["reason"]) <= len("crictl runp --runtime nvidia (host-network sandbox) failed: ") + 300
    assert failed


def test_crictl_fact_parses_its_step_lines():
    lines = crictl_lines(runp=(0, SANDBOX_ID), stopp=(0, "ok"))
    assert CrictlRun().process(lines) == {
        "runp": {"exit_code": 0, "output": SANDBOX_ID},
        "stopp": {"exit_code": 0, "output": "ok"},
    }


def test_verify_state_command_is_one_command_that_always_exits_zero():
    command = VerifyReadout().command(image="x/y:1")
    assert command.rstrip().endswith("true")
    assert "nvidia-smi" in command and "/var/lib/kubelet/config.yaml" in command
    # containerd's version and dump are ContainerdConfig's, read once with the runtimes stage's
    assert "config dump" not in command and '"$ctrd" --version' not in command


@pytest.mark.parametrize("runtimes", ["docker"])
def test_docker_wired_but_not_installed_fails_and_containerd_skips(tmp_path, runtimes):
    lines = node_lines(dump=None)
    _, _, steps, failed = run_verify(tmp_path, lines, container_runtimes=runtimes)
    assert steps["containerd_config"]["status"] == SKIP
    assert steps["docker_config"] == {"name": "docker_config", "status": FAIL, "reason": "Docker is not installed"}
    assert failed


def test_containerd_config_failure_names_the_imported_files_that_override_config_toml(tmp_path):
    """containerd 1.6 lists the files it read in its dump's `imports`: the failure names them."""
    dump = containerd_dump(default="runc").replace(
        "imports = []", 'imports = ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]'
    )
    assert "/etc/containerd/conf.d/99-nvidia.toml" in dump
    _, _, steps, _ = run_verify(tmp_path, node_lines(dump=dump))
    reason = steps["containerd_config"]["reason"]
    assert steps["containerd_config"]["status"] == FAIL
    assert "default_runtime_name is 'runc', not 'nvidia'" in reason
    assert (
        "containerd also reads /etc/containerd/conf.d/99-nvidia.toml: the last of them holding this "
        "section overrides /etc/containerd/config.toml"
    ) in reason


def test_a_sandbox_the_kubelet_removed_first_counts_as_cleaned_up_but_a_real_cleanup_failure_does_not(tmp_path):
    """On a kubelet node the kubelet can remove verify's sandbox before verify does."""
    lines = node_lines(dump=containerd_dump(), crictl=True)
    gone = (
        'E1123 12:00:00.000000 1 remote_runtime.go:222] "StopPodSandbox from runtime service failed" '
        'err="rpc error: code = NotFound desc = an error occurred when try to find sandbox: not found"\n'
        'time="2026-11-23T12:00:00Z" level=fatal msg="stopping the pod sandbox: rpc error: code = NotFound"'
    )
    crictl = crictl_lines(runp=(0, SANDBOX_ID), stopp=(1, gone), rmp=(1, gone))
    _, _, steps, _ = run_verify(tmp_path / "gone", lines, crictl=crictl)
    assert steps["cri_handler"]["status"] == PASS, steps["cri_handler"]
    stuck = crictl_lines(runp=(0, SANDBOX_ID), stopp=(1, "context deadline exceeded"), rmp=(0, "Removed"))
    _, _, steps, _ = run_verify(tmp_path / "stuck", lines, crictl=stuck)
    assert steps["cri_handler"]["status"] == FAIL and "cleanup failed: stopp" in steps["cri_handler"]["reason"]


@pytest.mark.parametrize("suite", ["bookworm", "trixie", "sid"])
def test_each_real_containerds_dump_of_the_wired_config_passes_runtime_binary_and_containerd_config(tmp_path, suite):
    """Debian's containerd 1.6, 1.7 and 2.1 (tests/containerd_releases.py) wire their own default
    config and dump it: 2.x writes TOML literal strings (``BinaryName = '...'``), which the one
    reader of the dump (a TOML parser) reads like 1.x's double quotes. The binary's check is asked
    by that parsed path, so runtime_binary passes on every version, and fails when it is gone."""
    from containerd_releases import config_dump, release

    from deploy.runtimes.cdi import for_containerd
    from deploy.runtimes.containerd.cri import merge_containerd_config
    from deploy.runtimes.wiring import RuntimeWiring

    containerd = release(suite)
    default = subprocess.run([str(containerd.binary), "config", "default"], capture_output=True, text=True, check=True)
    config = tmp_path / "config.toml"
    # What the runtimes stage writes for this containerd with the default settings (cdi=auto: on in 1.7).
    wiring = for_containerd(RuntimeWiring(), *containerd.minor, containerd.version).wiring
    config.write_text(merge_containerd_config(default.stdout, wiring).text)
    dumped = config_dump(containerd.binary, config)
    assert dumped.returncode == 0, dumped.stderr
    quote = "'" if containerd.major >= 2 else '"'
    assert f"BinaryName = {quote}/usr/bin/nvidia-container-runtime{quote}" in dumped.stdout

    lines = node_lines(smi=smi_output("exit-9.txt"), smi_exit=9, dump=dumped.stdout, ctrd_version=containerd.version)
    plan, _, steps, failed = run_verify(tmp_path / "wired", lines)
    assert (steps["runtime_binary"]["status"], steps["containerd_config"]["status"]) == (PASS, PASS), steps
    assert steps["runtime_binary"]["reason"] == "/usr/bin/nvidia-container-runtime executable"
    assert not failed and len(plan.commands) == 2, "the settings' binary is checked in verify's one read"

    gone = node_lines(
        smi=smi_output("exit-9.txt"),
        smi_exit=9,
        dump=dumped.stdout,
        ctrd_version=containerd.version,
        runtime_executable=False,
    )
    _, _, steps, failed = run_verify(tmp_path / "gone", gone)
    assert steps["runtime_binary"] == {
        "name": "runtime_binary",
        "status": FAIL,
        "reason": "configured runtime binary not executable: /usr/bin/nvidia-container-runtime",
    }
    assert failed


@pytest.mark.parametrize("executable", [True, False])
def test_a_binary_the_config_names_elsewhere_is_checked_by_its_parsed_path_in_a_second_read(tmp_path, executable):
    """A config that points the nvidia runtime elsewhere (the GPU Operator's toolkit path, written
    as a TOML literal string): the path the parsed dump names is the one checked; the config still
    fails, naming both paths, since the deploy wires the toolkit's own."""
    elsewhere = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    dump = containerd_dump().replace('BinaryName = "/usr/bin/nvidia-container-runtime"', f"BinaryName = '{elsewhere}'")
    second_read = ((Executables, {"paths": (elsewhere,)}), [f"exec {int(executable)} {elsewhere}"])
    plan, _, steps, failed = run_verify(tmp_path, node_lines(dump=dump), facts=[second_read])
    assert len(plan.matching(f"set -- {elsewhere}\n")) == 1  # Executables' one read of it
    if executable:
        assert steps["runtime_binary"] == {
            "name": "runtime_binary",
            "status": PASS,
            "reason": f"{elsewhere} executable",
        }
    else:
        assert steps["runtime_binary"]["reason"] == f"configured runtime binary not executable: {elsewhere}"
    assert steps["containerd_config"]["status"] == FAIL
    assert (
        f"BinaryName is '{elsewhere}', not '/usr/bin/nvidia-container-runtime'" in steps["containerd_config"]["reason"]
    )
    assert failed


def test_a_k3s_node_is_verified_through_k3s_own_containerd_unit_socket_and_generated_config(tmp_path):
    """k3s runs its own containerd (not on the PATH) under its own unit, on the config.toml it
    generates from the template the deploy writes, behind its own socket: verify asks that one."""
    installation = (FIXTURES / "containerd" / "installations" / "k3s-agent-v3.txt").read_text().splitlines()
    lines = node_lines(dump=containerd_dump())
    plan, _, steps, failed = run_verify(tmp_path, lines, installation=installation)
    verify_command = plan.commands[1]
    for expected in (
        "containerd_binary=/var/lib/rancher/k3s/data/current/bin/containerd\n",
        "containerd_service=k3s-agent\n",
        "--config /var/lib/rancher/k3s/agent/etc/containerd/config.toml config dump",
        "containerd_socket=/run/k3s/containerd/containerd.sock\n",
    ):
        assert expected in verify_command, expected
    assert "containerd_service=containerd\n" not in verify_command
    assert steps["containerd_config"]["status"] == PASS and not failed


def docker_lines(cgroup_driver: str) -> list[str]:
    runtimes = {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}, "runc": {"path": "runc"}}
    info = f"{json.dumps(runtimes)}|nvidia|{cgroup_driver}"
    lines = [line for line in node_lines() if not line.startswith("docker_path")]
    return lines + [
        "docker_path /usr/bin/docker",
        "docker_active active",
        "docker_info_rc 0",
        f"docker_info {b64(info)}",
        "docker_image 0",
        "exec 1 /usr/bin/nvidia-container-runtime",
    ]


@pytest.mark.parametrize("driver, status", [("systemd", PASS), ("cgroupfs", FAIL)])
def test_docker_with_another_cgroup_driver_than_systemd_cgroup_asks_fails_naming_it(tmp_path, driver, status):
    _, _, steps, failed = run_verify(tmp_path, docker_lines(driver), container_runtimes="docker")
    assert steps["docker_config"]["status"] == status, steps["docker_config"]
    if status == FAIL:
        assert steps["docker_config"]["reason"] == "cgroup driver is 'cgroupfs', not 'systemd' (systemd_cgroup=true)"
    assert failed == (status == FAIL)


# ----------------------------------------------------------------------------------------------
# Data-center steps: the module's installation, persistence, Fabric Manager and CUDA's own start

OPEN_KMOD = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.216.03  Release Build  (dvs-builder@U16-T02-35-3)"
)
PROPRIETARY_KMOD = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.216.03  Fri Oct 11 00:00:00 UTC 2024"
# nvidia-smi's query answer on a node whose loaded module is the 535.216.03 above
SMI_535 = "0, GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77, NVIDIA H100 80GB HBM3, 81559, 535.216.03"
ONE_GPU = dict(gpus=1, smi=SMI_535, dump=containerd_dump())


@pytest.mark.parametrize(
    "kmod, license_, setting, status, reason",
    [
        (
            OPEN_KMOD,
            "Dual MIT/GPL",
            "auto",
            PASS,
            "open kernel module loaded (/proc/driver/nvidia/version; nvidia_kernel_modules = auto)",
        ),
        (
            PROPRIETARY_KMOD,
            "NVIDIA",
            "proprietary",
            PASS,
            "proprietary kernel module loaded (/proc/driver/nvidia/version; nvidia_kernel_modules = proprietary)",
        ),
        (
            PROPRIETARY_KMOD,
            "NVIDIA",
            "open",
            FAIL,
            "the proprietary nvidia kernel module is loaded but nvidia_kernel_modules = open: run the driver stage, then reboot",
        ),
        (
            PROPRIETARY_KMOD,
            "Dual MIT/GPL",
            "auto",
            FAIL,
            "the proprietary nvidia kernel module is loaded but the open one is installed "
            "(modinfo license Dual MIT/GPL): reboot to load it",
        ),
        (
            None,
            "Dual MIT/GPL",
            "auto",
            SKIP,
            "nvidia kernel module not loaded; the installed one is open (modinfo license Dual MIT/GPL)",
        ),
        (
            None,
            "NVIDIA",
            "open",
            FAIL,
            "the proprietary nvidia kernel module is installed (modinfo license NVIDIA) but nvidia_kernel_modules = open: "
            "run the driver stage",
        ),
    ],
)
def test_kernel_module_type_is_read_from_the_loaded_module_then_modinfo_and_checked_against_the_setting(
    tmp_path, kmod, license_, setting, status, reason
):
    lines = node_lines(kmod=kmod, **ONE_GPU) + [f"kmod_license {license_}"]
    _, record, steps, _ = run_verify(tmp_path, lines, nvidia_kernel_modules=setting)
    assert steps["kernel_module_type"] == {"name": "kernel_module_type", "status": status, "reason": reason}
    installed = {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}[license_]
    expected = ("open" if "Open" in kmod else "proprietary") if kmod else f"{installed} (installed, not loaded)"
    assert record["kernel_module_type"] == expected


def test_persistence_passes_with_nvidia_persistenced_active_and_the_mode_on_every_gpu(tmp_path):
    _, record, steps, failed = run_verify(tmp_path, node_lines(kmod=PROPRIETARY_KMOD, **ONE_GPU))
    assert steps["persistence"] == {
        "name": "persistence",
        "status": PASS,
        "reason": "nvidia-persistenced active; persistence mode Enabled on 1 GPU(s)",
    }
    assert record["persistence"] == "nvidia-persistenced active, mode on 1/1 GPU(s)" and not failed


@pytest.mark.parametrize(
    "persistenced, reason",
    [
        (
            "not-found",
            "nvidia-persistenced not installed: the driver is set up and torn down with every CUDA client; "
            "systemctl enable --now nvidia-persistenced",
        ),
        (
            "failed",
            "nvidia-persistenced failed: the driver is set up and torn down with every CUDA client; "
            "systemctl enable --now nvidia-persistenced",
        ),
    ],
)
def test_persistence_fails_on_a_gpu_node_without_nvidia_persistenced_running(tmp_path, persistenced, reason):
    lines = node_lines(kmod=PROPRIETARY_KMOD, persistenced=persistenced, **ONE_GPU)
    _, _, steps, failed = run_verify(tmp_path, lines)
    assert steps["persistence"] == {"name": "persistence", "status": FAIL, "reason": reason}
    assert failed


def test_persistence_fails_naming_the_gpus_whose_mode_is_off(tmp_path):
    lines = node_lines(kmod=PROPRIETARY_KMOD, **ONE_GPU)
    lines = [line for line in lines if not line.startswith("smi_persistence")] + [
        f"smi_persistence {b64('0, Disabled' + chr(10))}"
    ]
    _, record, steps, _ = run_verify(tmp_path, lines)
    assert steps["persistence"]["status"] == FAIL
    assert (
        steps["persistence"]["reason"] == "nvidia-persistenced active but persistence mode is off on GPU 0 (nvidia-smi)"
    )
    assert record["persistence"] == "nvidia-persistenced active, mode on 0/1 GPU(s)"


def test_persistence_skips_without_a_gpu_and_when_the_setting_is_off(tmp_path):
    _, _, steps, _ = run_verify(tmp_path / "no-gpu", node_lines(dump=containerd_dump(), persistenced="failed"))
    assert steps["persistence"] == {
        "name": "persistence",
        "status": SKIP,
        "reason": "no NVIDIA GPU (nvidia-persistenced failed)",
    }
    lines = node_lines(kmod=PROPRIETARY_KMOD, persistenced="not-found", **ONE_GPU)
    _, _, steps, failed = run_verify(tmp_path / "off", lines, nvidia_persistenced="false")
    assert steps["persistence"] == {
        "name": "persistence",
        "status": SKIP,
        "reason": "nvidia_persistenced is false (nvidia-persistenced not installed)",
    }
    assert not failed


@pytest.mark.parametrize("fabric_manager, status", [("active", PASS), ("inactive", FAIL), ("not-found", FAIL)])
def test_fabric_manager_is_checked_only_where_the_pci_bus_shows_nvswitches(tmp_path, fabric_manager, status):
    cuda = cuda_lines(0, devices=1)
    lines = node_lines(kmod=PROPRIETARY_KMOD, switches=4, fabric_manager=fabric_manager, cuda=cuda, **ONE_GPU)
    _, record, steps, failed = run_verify(tmp_path, lines)
    evidence = "4 NVSwitch device(s) (HGX H100/H200, NVLink 4) on the PCI bus"
    state = {"not-found": "not installed"}.get(fabric_manager, fabric_manager)
    assert steps["fabric_manager"]["status"] == status
    if status == PASS:
        assert steps["fabric_manager"]["reason"] == f"nvidia-fabricmanager active ({evidence})" and not failed
    else:
        assert steps["fabric_manager"]["reason"].startswith(
            f"nvidia-fabricmanager {state} on a node with {evidence}: CUDA cannot start without it; "
        )
        assert failed
    assert record["fabric_manager"] == state

    _, record, steps, _ = run_verify(tmp_path / "pcie", node_lines(kmod=PROPRIETARY_KMOD, cuda=cuda, **ONE_GPU))
    assert steps["fabric_manager"] == {
        "name": "fabric_manager",
        "status": SKIP,
        "reason": "no NVSwitch or NVLink5 switch-management bridge on the PCI bus: Fabric Manager not needed",
    }
    assert record["fabric_manager"] == "not needed"


SYSTEM_NOT_READY = cuda_lines(802, name="CUDA_ERROR_SYSTEM_NOT_READY", text="system not yet initialized")
NO_DEVICE = cuda_lines(100, name="CUDA_ERROR_NO_DEVICE", text="no CUDA-capable device is detected")


def test_cuda_passes_naming_the_devices_cuinit_counts(tmp_path):
    lines = node_lines(kmod=PROPRIETARY_KMOD, cuda=cuda_lines(0, devices=8), **ONE_GPU)
    _, record, steps, failed = run_verify(tmp_path, lines)
    assert steps["cuda"] == {
        "name": "cuda",
        "status": PASS,
        "reason": f"cuInit: 8 CUDA device(s), the driver supports CUDA 12.2 ({LIBCUDA})",
    }
    assert record["cuda"] == "ok, 8 device(s), CUDA 12.2" and not failed


def test_cuda_error_802_on_an_nvswitch_node_is_fabric_manager_not_running(tmp_path):
    lines = node_lines(kmod=PROPRIETARY_KMOD, switches=4, fabric_manager="inactive", cuda=SYSTEM_NOT_READY, **ONE_GPU)
    _, record, steps, failed = run_verify(tmp_path, lines)
    assert steps["cuda"] == {
        "name": "cuda",
        "status": FAIL,
        "reason": "Fabric Manager not running (CUDA error 802 CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized; "
        "4 NVSwitch device(s) (HGX H100/H200, NVLink 4) on the PCI bus, nvidia-fabricmanager inactive): "
        "systemctl enable --now nvidia-fabricmanager",
    }
    assert record["cuda"] == "error 802 CUDA_ERROR_SYSTEM_NOT_READY" and failed


def test_cuda_error_802_without_nvswitches_is_named_as_the_library_names_it(tmp_path):
    lines = node_lines(kmod=PROPRIETARY_KMOD, cuda=SYSTEM_NOT_READY, **ONE_GPU)
    _, _, steps, failed = run_verify(tmp_path, lines)
    assert steps["cuda"] == {
        "name": "cuda",
        "status": FAIL,
        "reason": f"cuInit: CUDA error 802 CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized ({LIBCUDA})",
    }
    assert "Fabric Manager" not in steps["cuda"]["reason"] and failed


def test_cuda_error_the_library_cannot_name_is_still_reported_by_its_code(tmp_path):
    lines = node_lines(kmod=PROPRIETARY_KMOD, cuda=cuda_lines(4242), **ONE_GPU)
    _, _, steps, _ = run_verify(tmp_path, lines)
    assert steps["cuda"]["reason"] == f"cuInit: CUDA error 4242 (the library gives it no name) ({LIBCUDA})"


@pytest.mark.parametrize(
    "require_gpu, status, reason",
    [
        (
            "false",
            SKIP,
            f"no NVIDIA GPU (cuInit: CUDA error 100 CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected "
            f"({LIBCUDA}))",
        ),
        ("true", FAIL, f"cuInit: CUDA error 100 CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected ({LIBCUDA})"),
    ],
)
def test_cuda_failure_without_a_gpu_is_reported_beside_no_gpu_and_fails_with_require_gpu(
    tmp_path, require_gpu, status, reason
):
    _, record, steps, _ = run_verify(
        tmp_path, node_lines(dump=containerd_dump(), cuda=NO_DEVICE), require_gpu=require_gpu
    )
    assert steps["cuda"] == {"name": "cuda", "status": status, "reason": reason}
    assert record["cuda"] == "error 100 CUDA_ERROR_NO_DEVICE"


def test_cuda_on_a_gpu_node_without_libcuda_fails_naming_the_loader_error(tmp_path):
    missing = ["cuda_load_error libcuda.so.1: cannot open shared object file: No such file or directory"]
    _, record, steps, failed = run_verify(tmp_path, node_lines(kmod=PROPRIETARY_KMOD, cuda=missing, **ONE_GPU))
    assert steps["cuda"] == {
        "name": "cuda",
        "status": FAIL,
        "reason": "the driver's CUDA library does not load: libcuda.so.1: cannot open shared object file: "
        "No such file or directory",
    }
    assert record["cuda"] == "no libcuda.so.1" and failed


def test_cuda_that_hangs_fails_after_the_timeout(tmp_path):
    lines = [
        line
        for line in node_lines(kmod=PROPRIETARY_KMOD, cuda=[f"cuda_library {LIBCUDA}"], **ONE_GPU)
        if line != "cuda_exit 0"
    ] + ["cuda_exit 124"]
    _, record, steps, _ = run_verify(tmp_path, lines)
    assert steps["cuda"] == {"name": "cuda", "status": FAIL, "reason": f"cuInit did not return within 60 s ({LIBCUDA})"}
    assert record["cuda"] == "cuInit timed out"


def test_cuda_without_python_on_the_node_is_not_checked_never_passed(tmp_path):
    lines = [line for line in node_lines(kmod=PROPRIETARY_KMOD, **ONE_GPU) if not line.startswith("cuda_")]
    _, record, steps, _ = run_verify(tmp_path, lines + ["cuda_python "])
    assert steps["cuda"] == {
        "name": "cuda",
        "status": SKIP,
        "reason": "not checked: no python3 (nor /usr/libexec/platform-python) on the node to call cuInit through "
        "libcuda.so.1 with ctypes",
    }
    assert record["cuda"] == "not checked (no python3)"


def test_the_cuda_read_joins_verifys_one_read_and_the_table_shows_the_new_fields(tmp_path, capsys):
    """cuInit adds no remote command: the no-op stays at the installation's read and verify's."""
    plan, _, _, failed = run_verify(tmp_path, node_lines(kmod=OPEN_KMOD, cuda=cuda_lines(0, devices=1), **ONE_GPU))
    assert len(plan.commands) == 2 and "cuInit" in plan.commands[1] and "kmod_version" in plan.commands[1]
    assert not failed
    err = capsys.readouterr().err
    assert (
        "module: open  persistence: nvidia-persistenced active, mode on 1/1 GPU(s)  fabric manager: not needed  "
        "CUDA: ok, 1 device(s), CUDA 12.2"
    ) in err


def test_the_cuda_reads_real_command_against_the_802_standin_names_fabric_manager_on_an_nvswitch_node(
    tmp_path,
    standin_libcuda,  # noqa: F811
):
    """The CUDA read answered by its own command run in a real shell here, with the STAND-IN
    libcuda that answers 802 where the loader looks (tests/standin_libcuda)."""
    library = standin_libcuda("standin-cuda-system-not-ready-802")

    def cuda_read() -> list[str]:
        env = {**os.environ, "LD_LIBRARY_PATH": str(library.parent)}
        return subprocess.run(
            ["sh", "-c", CudaInit().command()], env=env, capture_output=True, text=True, check=True, timeout=120
        ).stdout.splitlines()

    lines = [line for line in node_lines(kmod=PROPRIETARY_KMOD, switches=4, **ONE_GPU) if not line.startswith("cuda_")]
    _, record, steps, failed = run_verify(tmp_path, lines, facts=[(CudaInit, cuda_read)])
    assert steps["cuda"]["status"] == FAIL and failed
    assert steps["cuda"]["reason"].startswith(
        "Fabric Manager not running (CUDA error 802 CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized; "
        "4 NVSwitch device(s)"
    )
    assert record["cuda"] == "error 802 CUDA_ERROR_SYSTEM_NOT_READY"


def test_the_fleet_row_carries_what_verify_found_of_the_driver(tmp_path):
    from deploy.reports.fleet_report import fleet_rows

    lines = node_lines(kmod=OPEN_KMOD, switches=4, fabric_manager="active", cuda=cuda_lines(0, devices=1), **ONE_GPU)
    plan, _, _, failed = run_verify(tmp_path, lines)
    (row,) = fleet_rows(plan.state)
    assert (row.kernel_module_type, row.persistence, row.fabric_manager, row.cuda) == (
        "open",
        "nvidia-persistenced active, mode on 1/1 GPU(s)",
        "active",
        "ok, 1 device(s), CUDA 12.2",
    )
    assert not failed


def test_a_failed_containerd_dump_fails_the_step_with_what_containerd_printed(tmp_path):
    """The dump is ContainerdConfig's (one read with the runtimes stage): its failure reaches verify."""
    error = 'containerd: failed to load TOML from /etc/containerd/config.toml: toml: line 3: expected "="'
    lines = node_lines(smi=smi_output("exit-9.txt"), smi_exit=9, dump=error, dump_exit=1)
    _, _, steps, failed = run_verify(tmp_path, lines)
    assert steps["containerd_config"]["status"] == FAIL and failed
    assert steps["containerd_config"]["reason"].startswith(
        "`containerd config dump` failed: containerd: failed to load"
    )


ONE_GPU_UUID = "GPU-36c9561a-02ef-5c4d-3733-f0a56c42dc45"  # one-gpu.txt's
CDI_GPU_NODE = dict(
    gpus=1,
    kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  450.203.03  Release Build",
    smi=smi_output("one-gpu.txt"),
    dump=containerd_dump(),
    ctrd_version="2.1.9",
)


def cdi_lines(spec: str | None, spec_changed: int = 300, inputs_changed: int = 200, refresh: str = "enabled active"):
    """What the CDI read prints: the toolkit's refresh unit (enabled, active) and the spec."""
    enabled, active = refresh.split()
    lines = [
        "ctk /usr/bin/nvidia-ctk",
        "refresh_unit /usr/lib/systemd/system/nvidia-cdi-refresh.path",
        f"refresh_enabled {enabled}",
        f"refresh_active {active}",
        f"inputs_changed {inputs_changed}",
    ]
    if spec is not None:
        lines += [f"spec_changed {spec_changed}", f"spec {b64(spec)}"]
    return lines


def spec_naming(*names: str) -> str:
    devices = "".join(
        f'- name: "{name}"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n' for name in names
    )
    return f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{devices}"


def test_cdi_on_containerd_2_passes_with_a_current_spec_naming_every_gpu(tmp_path):
    lines = node_lines(**CDI_GPU_NODE) + cdi_lines(spec_naming("0", ONE_GPU_UUID, "all"))
    _, record, steps, _ = run_verify(tmp_path, lines)
    assert steps["cdi"]["status"] == PASS, steps["cdi"]
    assert "names every GPU the driver sees (1 by UUID)" in steps["cdi"]["reason"]
    assert record["cdi"] == "on, spec current"


@pytest.mark.parametrize(
    ("cdi", "why"),
    [
        (cdi_lines(None), "no CDI spec at /var/run/cdi/nvidia.yaml: regenerate it"),
        (cdi_lines(spec_naming("0", "all"), spec_changed=100), "is older than the driver's module index or nvidia-ctk"),
        (cdi_lines(spec_naming("0", "all")), f"does not name {ONE_GPU_UUID}, which the driver sees: regenerate it"),
        (cdi_lines("devices: [unclosed"), "/var/run/cdi/nvidia.yaml is not YAML"),
        (
            cdi_lines(spec_naming("0", ONE_GPU_UUID), refresh="disabled inactive"),
            "nvidia-cdi-refresh.path is disabled and inactive",
        ),
    ],
)
def test_a_missing_stale_incomplete_or_unrefreshed_spec_fails_saying_what_to_do(tmp_path, cdi, why):
    lines = node_lines(**CDI_GPU_NODE) + cdi
    _, _, steps, failed = run_verify(tmp_path, lines)
    assert steps["cdi"]["status"] == FAIL and why in steps["cdi"]["reason"], steps["cdi"]
    assert failed


def test_cdi_without_a_gpu_expects_no_spec(tmp_path):
    lines = node_lines(smi=smi_output("exit-9.txt"), smi_exit=9, dump=containerd_dump(), ctrd_version="2.1.9")
    _, record, steps, failed = run_verify(tmp_path, lines + cdi_lines(None))
    assert steps["cdi"]["status"] == SKIP and "no CDI spec until the driver answers" in steps["cdi"]["reason"]
    assert record["cdi"] == "on, no spec"


@pytest.mark.parametrize(
    ("links", "status", "reason"),
    [
        ([], SKIP, "no NVIDIA device nodes under /dev"),
        (
            ["node 195:0 /dev/nvidia0 /dev/nvidia0", "node 195:255 /dev/nvidiactl /dev/nvidiactl"],
            PASS,
            "2 NVIDIA device node(s) linked in /dev/char",
        ),
        (
            ["node 195:0 /dev/nvidia0 /dev/nvidia0", "node 195:255 /dev/nvidiactl"],
            FAIL,
            "no /dev/char link for /dev/nvidiactl (195:255): a systemd daemon-reload takes it from running containers",
        ),
    ],
)
def test_dev_char_links_are_checked_for_every_nvidia_device_node(tmp_path, links, status, reason):
    lines = node_lines(smi=smi_output("exit-9.txt"), smi_exit=9, dump=containerd_dump()) + links
    _, _, steps, _ = run_verify(tmp_path, lines)
    assert steps["dev_char"]["status"] == status and reason in steps["dev_char"]["reason"], steps["dev_char"]


def test_dev_char_is_not_checked_without_the_systemd_cgroup_driver(tmp_path):
    lines = node_lines(smi=smi_output("exit-9.txt"), smi_exit=9, dump=containerd_dump(systemd_cgroup=False))
    _, _, steps, _ = run_verify(tmp_path, lines + ["node 195:0 /dev/nvidia0"], systemd_cgroup="false")
    assert steps["dev_char"]["status"] == SKIP
