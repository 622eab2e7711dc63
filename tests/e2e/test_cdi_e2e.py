"""
CDI end to end on real containerd from Debian: sid's 2.1.9 (CDI on by default) and bookworm's
1.6.20 (no CDI), with real systemd running the refresh units.

Stand-ins, named in every test: the toolkit (tests/toolkit_repo.py's STAND-IN packages, test id
``standin-toolkit``: its ``nvidia-ctk cdi generate`` writes a spec in the CDI format naming the
device nodes it finds, and its 1.20 package ships refresh units of ours) and the GPU: no GPU can be
had here, so the test makes ``/dev/nvidia0``, ``/dev/nvidia1`` and ``/dev/nvidiactl`` with NVIDIA's
major number (195) and puts a STAND-IN ``nvidia-smi`` that lists two GPUs. What this shows for real:
the deploy turns CDI on, enables the refresh, has the spec generated, and the real containerd
injects exactly the device a container asks for by its CDI name; the refresh regenerates the spec
when the toolkit changes. What it cannot show without a GPU: a CUDA program using the device.
"""

from __future__ import annotations

import json
import shlex
import time

import yaml
from harness import BOOT_SETTINGS_OP, assert_no_change, busybox_image_tar, run

SPEC = "/var/run/cdi/nvidia.yaml"
CONFIG = "/etc/containerd/config.toml"
IMAGE = "gpu-node-test/busybox:static"
STANDIN_SMI = """#!/bin/sh
# STAND-IN nvidia-smi (gpu-node tests): two GPUs, for `-L` only
echo "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-00000000-0000-4000-8000-000000000000)"
echo "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-11111111-1111-4111-8111-111111111111)"
"""


def standin_gpus(node) -> None:
    node.sh(
        "mknod -m 666 /dev/nvidia0 c 195 0 && mknod -m 666 /dev/nvidia1 c 195 1 "
        "&& mknod -m 666 /dev/nvidiactl c 195 255"
    )
    node.write("/usr/bin/nvidia-smi", STANDIN_SMI, mode="755")


def containerd_21_node(start_node, sid_containerd_image: str, own_defaults: bool = True):
    """A node with sid's real containerd 2.1.9 (in its image: its install is not the subject here) and
    stand-in GPUs; ``own_defaults``: its config file removed, so containerd runs on its own defaults."""
    node = start_node(image=sid_containerd_image)
    if own_defaults:
        node.sh(f"rm {CONFIG} && systemctl restart containerd")
    standin_gpus(node)
    return node


def spec_devices(node) -> list[str]:
    return [device["name"] for device in yaml.safe_load(node.read(SPEC))["devices"]]


def cdi_verified(node, data: dict, report) -> tuple[str, dict]:
    """deploy/verify.py's CDI summary and step for the node."""
    node.deploy(data={**data, "verify_report_path": str(report)}, deploy_file="deploy/verify.py")
    (record,) = json.loads(report.read_text())["nodes"]
    (step,) = [step for step in record["steps"] if step["name"] == "cdi"]
    return record["cdi"], step


def test_cdi_on_containerd_2_1_with_standin_gpus_and_standin_toolkit_spec_refresh_and_injection(
    start_node, sid_containerd_image, toolkit_repo, tmp_path
):
    """STAND-IN GPU device nodes and toolkit; real containerd 2.1.9 injects the CDI device asked for."""
    node = containerd_21_node(start_node, sid_containerd_image)
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert "CDI | Configure CDI (the spec and its refresh)" in first.changed_operations()
    assert spec_devices(node) == [
        "0",
        "GPU-00000000-0000-4000-8000-000000000000",
        "1",
        "GPU-11111111-1111-4111-8111-111111111111",
        "all",
    ]
    assert node.sh("systemctl is-enabled nvidia-cdi-refresh.path").stdout.strip() == "enabled"
    assert node.is_active("nvidia-cdi-refresh.path")
    # containerd 2.1 has CDI on by default: its own resolved config says so.
    assert "enable_cdi = true" in node.sh("containerd config dump").stdout

    # The real containerd reads the spec and injects exactly the device asked for by its CDI name.
    run(
        [
            "docker",
            "cp",
            str(busybox_image_tar(IMAGE, ("sh", "true", "echo", "cat"))),
            f"{node.id}:/tmp/busybox-image.tar",
        ]
    )
    node.sh("ctr -n k8s.io image import --all-platforms /tmp/busybox-image.tar")
    seen = node.sh(
        f"ctr -n k8s.io run --rm --device nvidia.com/gpu=1 docker.io/{IMAGE} cdi-one "
        "sh -c 'echo /dev/nvidia*; cat /usr/bin/nvidia-smi 2>/dev/null'",
        timeout=120,
    ).stdout
    devices, _, mounted = seen.partition("\n")
    assert devices.split() == ["/dev/nvidia1", "/dev/nvidiactl"], seen
    assert "STAND-IN nvidia-smi" in mounted, seen  # the spec's mount of the node's nvidia-smi

    assert_no_change(node.deploy(data=data))
    summary, step = cdi_verified(node, data, tmp_path / "report.json")
    assert (summary, step["status"]) == ("on, spec current", "pass"), step
    assert "nvidia-cdi-refresh.path active" in step["reason"]

    # The toolkit changes (a reinstall replaces nvidia-ctk): the refresh regenerates the spec, from
    # the device nodes there are now.
    before = node.sh(f"stat -c %Z {SPEC}").stdout.strip()
    node.sh("rm /dev/nvidia1 && sed -i '/^GPU 1/d' /usr/bin/nvidia-smi")
    node.sh(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall nvidia-container-toolkit-base", timeout=300
    )
    deadline = time.monotonic() + 60
    while node.sh(f"stat -c %Z {SPEC}").stdout.strip() == before and time.monotonic() < deadline:
        time.sleep(1)
    assert spec_devices(node) == ["0", "GPU-00000000-0000-4000-8000-000000000000", "all"], node.read(SPEC)
    assert_no_change(node.deploy(data=data))

    # With the refresh off, a toolkit change leaves the spec stale: verify says so, the deploy mends it.
    node.sh("systemctl disable --now nvidia-cdi-refresh.path")
    node.sh(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall nvidia-container-toolkit-base", timeout=300
    )
    summary, step = cdi_verified(node, data, tmp_path / "stale.json")
    assert step["status"] == "fail" and "nvidia-cdi-refresh.path is disabled" in step["reason"], step
    mended = node.deploy(data=data)
    assert "CDI | Configure CDI (the spec and its refresh)" in mended.changed_operations()
    summary, step = cdi_verified(node, data, tmp_path / "mended.json")
    assert (summary, step["status"]) == ("on, spec current", "pass"), step

    # A driver root a shell or systemd would misread (a space, quotes, $, a backtick): the real
    # systemd reads the refresh unit's environment file gpu-node wrote, and the spec the refresh
    # generates names the device node under exactly that root.
    root = '/run/gpu root/it\'s "a" $HOME `b`'
    node.sh(f"mkdir -p {shlex.quote(root + '/dev')} && mknod -m 666 {shlex.quote(root + '/dev/nvidia0')} c 195 0")
    rooted = node.deploy(data={**data, "nvidia_driver_root": root})
    assert rooted.returncode == 0, rooted.explain()
    node.sh(f"rm -f {SPEC} && systemctl start nvidia-cdi-refresh.service")
    edits = [
        edit
        for device in yaml.safe_load(node.read(SPEC))["devices"]
        for edit in device["containerEdits"]["deviceNodes"]
    ]
    assert {edit.get("hostPath") for edit in edits} == {f"{root}/dev/nvidia0"}, node.read(SPEC)


def test_cdi_true_on_containerd_1_6_is_refused_in_preflight_and_nothing_changes(node):
    """Bookworm's real containerd 1.6.20 has no CDI: cdi=true stops the host before any change."""
    runtimes = {"stages": "runtimes", "container_runtimes": "containerd"}
    assert node.deploy(data=runtimes).returncode == 0
    before = {"file": node.stat(CONFIG), "service": node.service("containerd")}
    refused = node.deploy(data={**runtimes, "cdi": "true"})
    assert refused.returncode != 0
    assert "cdi=true, but containerd 1.6.20~ds1 has no CDI" in refused.stderr, refused.explain()
    assert {"file": node.stat(CONFIG), "service": node.service("containerd")} == before


def test_a_provisioned_node_turned_to_cdi_and_back_changes_only_what_cdi_needs_standin_toolkit(
    start_node, sid_containerd_image, toolkit_repo
):
    """STAND-IN toolkit and GPU device nodes, real containerd 2.1.9 and systemd: a node provisioned
    with cdi=false, then cdi=true, then false again."""
    node = containerd_21_node(start_node, sid_containerd_image, own_defaults=False)
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}
    legacy = node.deploy(data={**data, "cdi": "false"})
    assert legacy.returncode == 0, legacy.explain()
    assert (
        not node.exists(SPEC)
        and node.sh("systemctl is-enabled nvidia-cdi-refresh.path", check=False).stdout.strip() == "disabled"
    )
    before = {"config": node.stat(CONFIG), "containerd": node.service("containerd")}

    turned_on = node.deploy(data={**data, "cdi": "true"})
    assert turned_on.returncode == 0, turned_on.explain()
    # the first-boot unit's settings record cdi (its check differs where CDI is off): rewritten, nothing restarted
    assert turned_on.changed_operations() == ["CDI | Configure CDI (the spec and its refresh)", BOOT_SETTINGS_OP]
    assert {"config": node.stat(CONFIG), "containerd": node.service("containerd")} == before
    assert node.exists(SPEC) and node.is_active("nvidia-cdi-refresh.path")
    assert_no_change(node.deploy(data={**data, "cdi": "true"}))

    turned_off = node.deploy(data={**data, "cdi": "false"})
    assert turned_off.changed_operations() == ["CDI | Configure CDI (the spec and its refresh)", BOOT_SETTINGS_OP]
    assert node.sh("systemctl is-enabled nvidia-cdi-refresh.path", check=False).stdout.strip() == "disabled"
    assert {"config": node.stat(CONFIG), "containerd": node.service("containerd")} == before
    assert_no_change(node.deploy(data={**data, "cdi": "false"}))
