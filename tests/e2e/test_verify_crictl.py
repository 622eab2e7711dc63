"""
Verify's CRI step (``cri_handler``) with the REAL crictl (cri-tools' v1.36.0 release tarball in the
opt-in lab, env GPU_NODE_LAB, docs/lab.md) against the real containerd of a node container that
``deploy/gpu_node.py`` wired. crictl is installed where cri-tools puts it, the real pause image (the
lab's archive of registry.k8s.io/pause:3.9) is containerd's sandbox image. One node is shared by the
module: every test here only adds and removes CRI sandboxes and containers, which each test checks
are gone.

The toolkit is the REAL NVIDIA Container Toolkit 1.20.0 (``real_toolkit_repo``, tests/toolkit_repo.py):
its nvidia-container-runtime's debug log records each ``create`` it handled, the proof that a
sandbox went through the nvidia handler (a sandbox asks for no GPU, so it runs on a node without one).
"""

from __future__ import annotations

import json
import shlex
import uuid

import pytest
import tomlkit
from cluster_hosts import allow_sandboxes_without_cap_sys_resource
from harness import assert_no_change, run
from lab import assets
from lab_assets import lab_asset, needs_lab
from toolkit_repo import BUNDLE, RUNTIME_DEBUG_LOG, real_runtime_created, real_runtime_records

from deploy.operations.probes import CrictlRun
from deploy.verification.toolkit_runtimes import cri_step

CONFIG = "/etc/containerd/config.toml"
CRICTL = "/usr/local/bin/crictl"
PAUSE = "registry.k8s.io/pause:3.9"
BUSYBOX = "docker.io/gpu-node-test/verify-busybox:1"

pytestmark = needs_lab


def steps_of(report_path) -> dict:
    (node,) = json.loads(report_path.read_text())["nodes"]
    return {step["name"]: step for step in node["steps"]}


def install_crictl(node) -> None:
    binary = lab_asset(assets.crictl)
    run(["docker", "cp", str(binary), f"{node.id}:{CRICTL}"])
    node.sh(f"chmod 755 {CRICTL}")


def import_pause(node) -> str:
    """The lab's pause image, also tagged as whatever sandbox image this containerd is configured with."""
    archive = lab_asset(assets.image_archive, "pause")
    run(["docker", "cp", str(archive), f"{node.id}:/tmp/pause.tar"])
    node.sh("ctr -n k8s.io images import /tmp/pause.tar && rm -f /tmp/pause.tar")
    dumped = tomlkit.parse(node.sh("containerd config dump").stdout).unwrap()
    configured = dumped["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]
    if configured != PAUSE:
        node.sh(f"ctr -n k8s.io images tag --force {PAUSE} {shlex.quote(configured)}")
    return configured


def crictl(node, args: str, check: bool = True):
    return node.sh(f"{CRICTL} --runtime-endpoint unix:///run/containerd/containerd.sock {args}", check=check)


def bundles(node) -> list[str]:
    """The container ids the real runtime was given a bundle for (its debug log), in order, once each."""
    ids = [
        record["msg"].rstrip("/").rsplit("/", 1)[-1]
        for record in real_runtime_records(node)
        if record.get("msg", "").startswith(BUNDLE)
    ]
    return list(dict.fromkeys(ids))


def sandboxes(node) -> list[str]:
    return crictl(node, "pods -q").stdout.split()


@pytest.fixture(scope="module")
def crictl_node(image, real_toolkit_repo, tmp_path_factory):
    from cri.images import import_into_node
    from harness import Node

    node = Node(image=image).start()
    try:
        report = tmp_path_factory.mktemp("verify-crictl") / "wire.json"
        data = {
            "stages": "toolkit,runtimes",
            "container_runtimes": "containerd",
            "nvidia_runtime_default": "false",
            "verify_report_path": str(report),
            **real_toolkit_repo.data(),
        }
        wired = node.deploy(data=data)
        assert wired.returncode == 0, wired.explain()
        install_crictl(node)
        import_pause(node)
        import_into_node(node, [])
        allow_sandboxes_without_cap_sys_resource(node)
        real_toolkit_repo.enable_runtime_log(node)
        node.data = {**data, "stages": "toolkit,runtimes,verify"}
        yield node
    finally:
        node.remove()


@pytest.mark.parametrize("default_mode", [False, True], ids=["-y", "default-mode"])
def test_verify_runs_a_sandbox_through_the_nvidia_handler_with_the_real_crictl(crictl_node, tmp_path, default_mode):
    """With ``-y`` and in pyinfra's default mode (change detection, then execution), the crictl
    probe runs exactly once: the real runtime is handed one sandbox."""
    node = crictl_node
    assert "crictl version 1.36.0" in node.sh(f"{CRICTL} --version").stdout
    node.sh(f"rm -f {RUNTIME_DEBUG_LOG}")
    before = sandboxes(node)
    report = tmp_path / "report.json"

    result = node.deploy(
        data={**node.data, "verify_report_path": str(report)}, deploy_file="deploy/verify.py", default_mode=default_mode
    )
    assert result.returncode == 0, result.explain()
    assert_no_change(result)
    step = steps_of(report)["cri_handler"]
    assert step["status"] == "pass", step
    assert step["reason"] == (
        "host-network sandbox ran through runtime handler 'nvidia' (no NVIDIA GPU: no nvidia-smi container)"
    )
    # The runtime saw the sandbox's create; the sandbox is gone again.
    (sandbox,) = bundles(node)
    assert real_runtime_created(node, sandbox), real_runtime_records(node)
    assert sandboxes(node) == before


def test_the_real_crictl_sequence_runs_a_container_in_the_nvidia_sandbox_and_cleans_up(crictl_node):
    """The script verify runs on a GPU node (create, start, wait, logs, rm, stopp, rmp), with a
    busybox command in place of nvidia-smi: every id crictl prints is passed on correctly."""
    node = crictl_node
    node.sh(f"rm -f {RUNTIME_DEBUG_LOG}")
    uid = uuid.uuid4().hex[:12]
    script = CrictlRun().command(
        uid=uid, handler="nvidia", image=BUSYBOX, command=["/bin/echo", "through-the-nvidia-handler"], timeout=30
    )
    steps = CrictlRun().process(node.sh(script).stdout.splitlines())
    assert list(steps) == ["runp", "create", "start", "state", "logs", "rm", "stopp", "rmp"], steps
    assert all(step["exit_code"] == 0 for step in steps.values()), steps
    assert steps["state"]["output"] == "CONTAINER_EXITED 0"
    assert "through-the-nvidia-handler" in steps["logs"]["output"]
    # crictl prints the id last (after a warning about the missing /etc/crictl.yaml)
    sandbox, container = (steps[name]["output"].splitlines()[-1] for name in ("runp", "create"))
    assert real_runtime_created(node, sandbox) and real_runtime_created(node, container), real_runtime_records(node)
    assert sandbox not in sandboxes(node)
    assert node.sh("ls -d /tmp/gpu-node-verify.* 2>/dev/null || true").stdout == ""


def test_a_missing_image_skips_the_container_and_still_removes_the_sandbox_real_crictl(crictl_node):
    node = crictl_node
    before = sandboxes(node)
    script = CrictlRun().command(uid=uuid.uuid4().hex[:12], handler="nvidia", image="docker.io/nobody/absent:1")
    steps = CrictlRun().process(node.sh(script).stdout.splitlines())
    assert list(steps) == ["runp", "image", "stopp", "rmp"], steps
    assert steps["image"]["exit_code"] == 1
    assert steps["stopp"]["exit_code"] == 0 and steps["rmp"]["exit_code"] == 0
    assert sandboxes(node) == before


def test_an_unknown_handler_fails_runp_with_containerds_message_and_removes_nothing_real_crictl(crictl_node):
    """What the step reports on a containerd that has no such handler: the real CRI error."""
    node = crictl_node
    before = sandboxes(node)
    script = CrictlRun().command(uid=uuid.uuid4().hex[:12], handler="not-wired", image=BUSYBOX)
    steps = CrictlRun().process(node.sh(script).stdout.splitlines())
    assert list(steps) == ["runp"], steps
    assert steps["runp"]["exit_code"] == 1
    step = cri_step(steps, gpu=False, image=BUSYBOX)
    assert step.status == "fail"
    assert step.reason == (
        "crictl runp --runtime nvidia (host-network sandbox) failed: run pod sandbox: rpc error: "
        'code = Unknown desc = failed to get sandbox runtime: no runtime for "not-wired" is configured'
    )
    assert sandboxes(node) == before


def test_a_sandbox_on_the_default_runc_handler_does_not_go_through_the_nvidia_runtime_real_crictl(crictl_node):
    """The log tells the handlers apart: nvidia_runtime_default=false leaves runc the default."""
    node = crictl_node
    node.sh(f"rm -f {RUNTIME_DEBUG_LOG}")
    script = CrictlRun().command(uid=uuid.uuid4().hex[:12], handler="")
    steps = CrictlRun().process(node.sh(script).stdout.splitlines())
    assert steps["runp"]["exit_code"] == 0, steps
    sandbox = steps["runp"]["output"].splitlines()[-1]
    assert (
        crictl(
            node, f"inspectp -o go-template --template '{{{{.status.runtimeHandler}}}}' {sandbox}", check=False
        ).returncode
        != 0
    ), "removed again"
    assert sandbox not in bundles(node), real_runtime_records(node)
