"""
Verify's CRI probe on a CDI node with the REAL crictl (cri-tools' v1.36.0 from the opt-in lab, env
GPU_NODE_LAB, docs/lab.md) against sid's REAL containerd 2.1.9 (CDI on by default) that
``deploy/gpu_node.py`` wired, with the lab's toolkit (tests/toolkit_repo.py: NVIDIA's own in the lab).

Stand-ins: the GPUs (``/dev/nvidia0``, ``/dev/nvidia1``, ``/dev/nvidiactl`` made with mknod, as
tests/e2e/test_cdi_e2e.py does) and the CDI spec naming them, a STAND-IN written by this test in the
CDI format (NVIDIA's generator needs a GPU behind NVML). What this shows for real: the probe's second
container asks for a device through the CRI's ``CDI_devices``, the real containerd injects what the
spec gives that device and nothing else, and verify reads the real output.
"""

from __future__ import annotations

import uuid

import pytest
import tomlkit
from harness import run, sid_containerd_deb, wait_for
from lab import assets
from lab_assets import lab_asset, needs_lab
from test_verify_crictl import BUSYBOX, PAUSE, install_crictl, sandboxes

from deploy.operations.probes import CrictlRun
from deploy.verification.cdi import CdiProbe
from deploy.verification.toolkit_runtimes import cri_step

CONFIG = "/etc/containerd/config.toml"
STANDIN_SPEC = "/etc/cdi/gpu-node-test-standin.yaml"
SPEC_TEXT = """\
# STAND-IN CDI spec (gpu-node tests): the device nodes the test made with mknod
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}
- name: "1"
  containerEdits: {deviceNodes: [{path: /dev/nvidia1}]}
containerEdits:
  deviceNodes: [{path: /dev/nvidiactl}]
"""

pytestmark = needs_lab


def import_pause_2x(node) -> None:
    """The lab's pause image, also tagged as the sandbox image containerd 2.x pins."""
    archive = lab_asset(assets.image_archive, "pause")
    run(["docker", "cp", str(archive), f"{node.id}:/tmp/pause.tar"])
    node.sh("ctr -n k8s.io images import /tmp/pause.tar && rm -f /tmp/pause.tar")
    dumped = tomlkit.parse(node.sh("containerd config dump").stdout).unwrap()
    pinned = dumped["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
    if pinned != PAUSE:
        node.sh(f"ctr -n k8s.io images tag --force {PAUSE} {pinned}")


def restrict_oom_score_adj_2x(node) -> None:
    """As tests/cluster_hosts.py's for 1.x: node containers lack CAP_SYS_RESOURCE (2.x keeps the key
    in its CRI runtime plugin)."""
    config = tomlkit.parse(node.read(CONFIG))
    config["plugins"]["io.containerd.cri.v1.runtime"]["restrict_oom_score_adj"] = True
    node.write(CONFIG, tomlkit.dumps(config))
    node.sh("systemctl restart containerd")
    wait_for(lambda: node.is_active("containerd"), timeout=30, what="containerd after the restart")


@pytest.fixture(scope="module")
def cdi_crictl_node(image, real_toolkit_repo, tmp_path_factory):
    from cri.images import import_into_node
    from harness import Node

    node = Node(image=image).start()
    try:
        run(["docker", "cp", str(sid_containerd_deb()), f"{node.id}:/tmp/containerd-sid.deb"])
        node.sh(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/containerd-sid.deb",
            timeout=600,
        )
        node.sh(f"rm {CONFIG} && systemctl restart containerd")
        data = {
            "stages": "toolkit,runtimes",
            "container_runtimes": "containerd",
            "nvidia_runtime_default": "false",
            **real_toolkit_repo.data(),
        }
        wired = node.deploy(data=data)
        assert wired.returncode == 0, wired.explain()
        install_crictl(node)
        import_pause_2x(node)
        import_into_node(node, [])
        restrict_oom_score_adj_2x(node)
        node.sh(
            "mknod -m 666 /dev/nvidia0 c 195 0 && mknod -m 666 /dev/nvidia1 c 195 1 "
            "&& mknod -m 666 /dev/nvidiactl c 195 255"
        )
        node.write(STANDIN_SPEC, SPEC_TEXT)
        yield node
    finally:
        node.remove()


def probe(node, cdi: CdiProbe) -> dict:
    script = CrictlRun().command(
        uid=uuid.uuid4().hex[:12],
        handler="nvidia",
        image=BUSYBOX,
        command=["/bin/echo", "through-the-nvidia-handler"],
        timeout=30,
        cdi=cdi,
    )
    return CrictlRun().process(node.sh(script).stdout.splitlines())


def test_the_cdi_container_gets_exactly_the_device_the_spec_gives_with_the_real_crictl_and_standin_gpus(
    cdi_crictl_node,
):
    """STAND-IN device nodes and spec; real crictl and containerd 2.1.9."""
    node = cdi_crictl_node
    before = sandboxes(node)
    asked = CdiProbe("nvidia.com/gpu=1", ("/dev/nvidia1", "/dev/nvidiactl"))
    steps = probe(node, asked)
    assert [name for name in steps if name.startswith("cdi_")] == [
        "cdi_create",
        "cdi_start",
        "cdi_state",
        "cdi_logs",
        "cdi_rm",
    ], steps
    assert all(step["exit_code"] == 0 for step in steps.values()), steps
    step = cri_step(steps, gpu=True, image=BUSYBOX, cdi=asked)
    assert step.status == "pass", step
    assert "CDI device nvidia.com/gpu=1 through the CRI: /dev/nvidia1, /dev/nvidiactl in the container" in step.reason
    # nvidia0 is not the device asked for: verify reading the same output names it missing.
    wider = CdiProbe("nvidia.com/gpu=1", ("/dev/nvidia0", "/dev/nvidia1"))
    assert cri_step(steps, gpu=True, image=BUSYBOX, cdi=wider).reason.endswith(
        "lacks /dev/nvidia0 (the spec gives them): containerd did not inject it"
    )
    assert sandboxes(node) == before


def test_a_device_no_spec_names_fails_the_cdi_containers_create_with_containerds_message_real_crictl(cdi_crictl_node):
    """STAND-IN spec; the real containerd refuses a CDI name it cannot resolve."""
    node = cdi_crictl_node
    before = sandboxes(node)
    asked = CdiProbe("nvidia.com/gpu=7", ("/dev/nvidia7",))
    steps = probe(node, asked)
    assert steps["cdi_create"]["exit_code"] != 0, steps
    step = cri_step(steps, gpu=True, image=BUSYBOX, cdi=asked)
    assert step.status == "fail" and step.reason.startswith("crictl create with CDI device nvidia.com/gpu=7 failed: ")
    assert "nvidia.com/gpu=7" in step.reason.split("failed: ", 1)[1], step
    assert sandboxes(node) == before
