"""
The whole deploy, every stage with the default settings, from a plain clone by the README's main
command: ``git clone`` into an empty folder with nothing beside it (no ``shared/``, no
``GPU_NODE_LAB``, no ``GPU_NODE_CORPUS``), then ``./scripts/demo`` as the README writes it, with
its ``--keep`` (the node is left for this test to read, then removed by id) and one ``--data``
(verify's report file).

The clone sets itself up (its own virtualenv from PyPI, Debian's packages) and provisions a
throwaway bookworm node container: Debian's own NVIDIA packages from contrib / non-free (DKMS
building the module for the Debian kernel headers it installs), the toolkit from the STAND-IN
repository (no registry ships NVIDIA's), containerd wired, verify; then the same run again, which
changes nothing. What is cloned is the committed HEAD: CI runs on a fresh clone of it.

One node does both: the demo is the default full deploy, and DKMS is most of its cost (minutes of
CI's two cores per build), so the suite builds this driver once.

There is no GPU here: the test proves the honest no-GPU outcome, that nvidia-smi cannot reach a
driver, and that "reboot required" is reported because the module cannot be loaded; what a GPU
would add (the module loading) cannot be had on this machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from harness import REPO, DeployResult, Node, run

SETTINGS_FROM_OUTSIDE = ("GPU_NODE_LAB", "GPU_NODE_CORPUS", "GPU_NODES", "CONTROL_PLANE", "VIRTUAL_ENV")
BLACKLIST_PATH = "/etc/modprobe.d/gpu-node-blacklist-nouveau.conf"
# The exact text (tests/fixtures/kernel/README.md: its source).
BLACKLIST = (
    Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "gpu-node-blacklist-nouveau.conf"
).read_text()
SOURCES = "/etc/apt/sources.list.d/debian.sources"
HELD = {"nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi"}
SECOND_RUN = "==> The same run again"


def test_full_deploy_from_a_plain_clone_by_the_readme_main_command_holds_the_driver_wires_containerd_reports_no_gpu_and_reruns_unchanged_standin_toolkit(
    image, tmp_path
):
    clone = tmp_path / "gpu-node"
    run(["git", "clone", "--quiet", str(REPO), str(clone)])
    assert [path.name for path in tmp_path.iterdir()] == ["gpu-node"], "nothing may stand beside the clone"
    readme = (clone / "README.md").read_text()
    assert re.search(r"^\./scripts/demo\b", readme, re.M), "the README's main command is ./scripts/demo"
    assert "`--keep` leaves it running" in readme

    report_path = tmp_path / "report.json"
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_FROM_OUTSIDE}
    # one stream, in order: the runs' warnings (stderr) stay with the run that printed them
    demo = run(
        ["./scripts/demo", "--keep", "--data", f"verify_report_path={report_path}"],
        cwd=clone,
        env=env,
        check=False,
        timeout=3600,
        stderr=subprocess.STDOUT,
    )
    output = demo.stdout
    kept = re.search(r"^==> Node left running: docker rm -f -v (\w+)$", output, re.M)
    node = Node(image=image, share_apt_cache=False, id=kept.group(1) if kept else "")
    try:
        assert demo.returncode == 0, output[-8000:]
        assert kept, output[-4000:]
        check_demo_output(output)
        check_node(node, image)
        check_report(json.loads(report_path.read_text()))
    finally:
        node.remove()


def check_demo_output(output: str) -> None:
    toolkit_lines = [line for line in output.splitlines() if line.startswith("==> Toolkit: ")]
    assert len(toolkit_lines) == 1, toolkit_lines
    assert "STAND-IN NVIDIA Container Toolkit 1.20.0-1: no package registry ships the toolkit" in toolkit_lines[0]
    first, _, second = output.partition(SECOND_RUN)
    first = first.partition(" -m pyinfra -y @docker/")[2]  # from the first run's command line on
    assert first, output[-8000:]
    changed = DeployResult(0, first, "", []).changed_operations()
    for operation in (
        "NVIDIA driver | Enable contrib non-free non-free-firmware for bookworm",
        "NVIDIA driver | Install the NVIDIA driver",
        "NVIDIA driver | Install kernel headers for the driver's module",
    ):
        assert operation in changed, (operation, changed)
    # No GPU: the run says so, and says a reboot is due; the second run still does (nothing rebooted).
    for run_output in (first, second):
        assert "no NVIDIA GPU on the PCI bus" in run_output
        assert "reboot required: the NVIDIA driver changed" in run_output
    assert "==> The second run changed nothing" in second, second[-8000:]
    # verify's report and the fleet report, from the second run: the node OK (no GPU here) and converged.
    assert re.search(r"^@docker/\w+: OK  GPUs: none  .*toolkit: 1\.20\.0  runtime: containerd ", second, re.M), second
    assert re.search(r"^  runtime_binary +pass ", second, re.M) and re.search(
        r"^  containerd_config +pass ", second, re.M
    )
    assert "--> Fleet report: 1 node: 1 converged" in second, second
    # The node as the demo shows it: Debian's driver installed and held, the toolkit installed, containerd up.
    packages = output.rpartition("--- packages")[2]
    assert re.search(r"^nvidia-driver \S+ hold ok installed$", packages, re.M), packages
    assert re.search(r"^nvidia-container-toolkit 1\.20\.0-1 install ok installed$", packages, re.M), packages
    held = packages.partition("--- held")[2].partition("--- containerd")[0].split()
    assert "nvidia-driver" in held, held
    assert packages.rpartition("--- containerd")[2].split()[0] == "active"


def check_node(node: Node, image: str) -> None:
    # The release's entries gained the components, once each; nothing else in the file moved.
    original_sources = run(["docker", "run", "--rm", image, "cat", SOURCES]).stdout
    sources = node.read(SOURCES)
    assert sources.count("Components: main contrib non-free non-free-firmware\n") == 2, sources
    assert (
        sources.replace("Components: main contrib non-free non-free-firmware\n", "Components: main\n")
        == original_sources
    )

    installed = node.sh(
        "dpkg-query -W -f '${Package} ${Status}\\n' nvidia-driver nvidia-smi nvidia-kernel-dkms "
        "firmware-misc-nonfree linux-headers-amd64"
    ).stdout
    assert installed.count(" ok installed") == 5, installed
    held = set(node.sh("apt-mark showhold").stdout.split())
    assert held >= HELD and "firmware-misc-nonfree" not in held, held
    # DKMS built the module for the Debian kernel whose headers were installed.
    status = node.sh("dkms status").stdout
    assert "nvidia" in status and "installed" in status, status
    assert node.read(BLACKLIST_PATH) == BLACKLIST

    # No GPU: nvidia-smi cannot reach a driver (exit 9); the reboot is due and was not taken.
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode in (9, 255), smi
    assert (
        "couldn't communicate with the NVIDIA driver" in smi.stdout + smi.stderr
        or "Failed to initialize NVML" in smi.stdout + smi.stderr
    ), smi
    assert node.exists("/run/reboot-required")

    # The toolkit and containerd stages on top of the driver (a restart would be a changed operation
    # of the second run, which changed nothing); containerd never died and came back.
    service = node.service("containerd")
    assert service["ActiveState"] == "active" and service["NRestarts"] == "0", service
    dump = node.sh("containerd config dump").stdout
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'default_runtime_name = "nvidia"' in dump


def check_report(report: dict) -> None:
    (record,) = report["nodes"]
    steps = {step["name"]: step for step in record["steps"]}
    assert steps["containerd_config"]["status"] == "pass"
    assert steps["toolkit"]["reason"] == "NVIDIA container toolkit 1.20.0 (nvidia-ctk)", steps["toolkit"]
    assert steps["gpu_pci"]["status"] == "skip" and "no NVIDIA GPU" in steps["gpu_pci"]["reason"]
