"""
The driver stage on a real bookworm node container: Debian's own NVIDIA packages from
contrib / non-free, DKMS building the module for the Debian kernel headers it installs.

There is no GPU here (DESIGN.md section 5): the test proves the honest no-GPU outcome, that
nvidia-smi cannot reach a driver, and that "reboot required" is reported because the module
cannot be loaded; what a GPU would add (the module loading) cannot be had on this machine.
"""

from __future__ import annotations

import time

from harness import assert_no_change

from deploy.tasks.kernel import BLACKLIST_PATH, blacklist_text

SOURCES = "/etc/apt/sources.list.d/debian.sources"
DRIVER_DATA = {"stages": "kernel,driver"}
HELD = {"nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi"}


def test_debian_driver_installs_held_reports_no_gpu_and_reboot_and_second_run_changes_nothing_without_a_gpu(node):
    original_sources = node.read(SOURCES)
    started = time.monotonic()
    first = node.deploy(data=DRIVER_DATA)
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

    assert node.read(BLACKLIST_PATH) == blacklist_text()
    assert "blacklist nouveau" in node.read(BLACKLIST_PATH)

    # No GPU: nvidia-smi cannot reach a driver (exit 9), the run says so, and says a reboot is due.
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode in (9, 255), smi
    assert ("couldn't communicate with the NVIDIA driver" in smi.stdout + smi.stderr
            or "Failed to initialize NVML" in smi.stdout + smi.stderr), smi
    assert "no NVIDIA GPU on the PCI bus" in first.stderr
    assert "reboot required: the NVIDIA driver changed" in first.stderr
    assert node.exists("/run/reboot-required")

    before = {path: node.stat(path) for path in (SOURCES, BLACKLIST_PATH)}
    second = node.deploy(data=DRIVER_DATA)
    assert_no_change(second)
    assert {path: node.stat(path) for path in before} == before
    assert HELD <= set(node.sh("apt-mark showhold").stdout.split())
    # Still true on the second run: nothing rebooted, still no GPU.
    assert "reboot required: the NVIDIA driver changed" in second.stderr
    assert "no NVIDIA GPU on the PCI bus" in second.stderr
    print(f"first run {first_seconds:.0f} s")
