"""
The whole deploy, every stage, on a real bookworm node container, twice: Debian's own NVIDIA
packages from contrib / non-free (DKMS building the module for the Debian kernel headers it
installs), the NVIDIA Container Toolkit 1.20.0 from a local signed repository (tests/toolkit_repo.py:
the STAND-IN packages, test id `standin-toolkit`, or NVIDIA's debs from the opt-in lab), containerd wired, verify.

There is no GPU here: the test proves the honest no-GPU outcome, that
nvidia-smi cannot reach a driver, and that "reboot required" is reported because the module
cannot be loaded; what a GPU would add (the module loading) cannot be had on this machine.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness import assert_no_change

BLACKLIST_PATH = "/etc/modprobe.d/gpu-node-blacklist-nouveau.conf"
# The exact text (tests/fixtures/kernel/README.md: its source).
BLACKLIST = (Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "gpu-node-blacklist-nouveau.conf").read_text()

SOURCES = "/etc/apt/sources.list.d/debian.sources"
HELD = {"nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi"}


def test_full_deploy_installs_held_driver_toolkit_containerd_reports_no_gpu_and_second_run_changes_nothing(
    node, toolkit_repo, tmp_path
):
    """Every stage with the default settings (no GPU here: the honest no-GPU outcome is checked)."""
    report_path = tmp_path / "report.json"
    data = {**toolkit_repo.data(), "verify_report_path": str(report_path)}
    original_sources = node.read(SOURCES)
    started = time.monotonic()
    first = node.deploy(data=data)
    first_seconds = time.monotonic() - started
    assert first.returncode == 0, first.explain()
    changed = first.changed_operations()
    assert "NVIDIA driver | Enable contrib non-free non-free-firmware for bookworm" in changed
    assert "NVIDIA driver | Install the NVIDIA driver" in changed
    assert "NVIDIA driver | Install kernel headers for the driver's module" in changed

    # The release's entries gained the components, once each; nothing else in the file moved.
    sources = node.read(SOURCES)
    assert sources.count("Components: main contrib non-free non-free-firmware\n") == 2, sources
    assert sources.replace("Components: main contrib non-free non-free-firmware\n", "Components: main\n") == original_sources

    installed = node.sh("dpkg-query -W -f '${Package} ${Status}\\n' nvidia-driver nvidia-smi nvidia-kernel-dkms "
                        "firmware-misc-nonfree linux-headers-amd64").stdout
    assert installed.count(" ok installed") == 5, installed
    assert HELD <= set(node.sh("apt-mark showhold").stdout.split())
    assert "firmware-misc-nonfree" not in node.sh("apt-mark showhold").stdout
    # DKMS built the module for the Debian kernel whose headers were installed.
    assert "nvidia" in node.sh("dkms status").stdout and "installed" in node.sh("dkms status").stdout

    assert node.read(BLACKLIST_PATH) == BLACKLIST
    assert "blacklist nouveau" in node.read(BLACKLIST_PATH)

    # No GPU: nvidia-smi cannot reach a driver (exit 9), the run says so, and says a reboot is due.
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode in (9, 255), smi
    assert ("couldn't communicate with the NVIDIA driver" in smi.stdout + smi.stderr
            or "Failed to initialize NVML" in smi.stdout + smi.stderr), smi
    assert "no NVIDIA GPU on the PCI bus" in first.stderr
    assert "reboot required: the NVIDIA driver changed" in first.stderr
    assert node.exists("/run/reboot-required")

    # The toolkit and containerd stages on top of the driver; verify reported on all of it.
    assert node.is_active("containerd")
    dump = node.sh("containerd config dump").stdout
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'default_runtime_name = "nvidia"' in dump
    (record,) = json.loads(report_path.read_text())["nodes"]
    steps = {step["name"]: step for step in record["steps"]}
    assert steps["containerd_config"]["status"] == "pass"
    assert steps["toolkit"]["reason"] == "NVIDIA container toolkit 1.20.0 (nvidia-ctk)", steps["toolkit"]
    assert steps["gpu_pci"]["status"] == "skip" and "no NVIDIA GPU" in steps["gpu_pci"]["reason"]

    before = {path: node.stat(path) for path in (SOURCES, BLACKLIST_PATH, "/etc/containerd/config.toml")}
    containerd_before = node.service("containerd")
    second = node.deploy(data=data)
    assert_no_change(second)
    assert node.service("containerd") == containerd_before, "a re-run must not restart containerd"
    assert {path: node.stat(path) for path in before} == before
    assert HELD <= set(node.sh("apt-mark showhold").stdout.split())
    # Still true on the second run: nothing rebooted, still no GPU.
    assert "reboot required: the NVIDIA driver changed" in second.stderr
    assert "no NVIDIA GPU on the PCI bus" in second.stderr
    print(f"first run {first_seconds:.0f} s")
