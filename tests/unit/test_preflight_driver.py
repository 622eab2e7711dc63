"""Preflight's GPU, Secure Boot, module, headers and disk checks, on stated @fake hosts."""

from __future__ import annotations

import base64
import logging
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
from plan import DEFAULT, PCI_WITH_GPU, carrying, every, gpu_node, node_lines, run_deploy

from deploy.facts.access import PACKAGE_MANAGER_COMMANDS, HostAccess
from deploy.facts.apt import AptSourceFiles
from deploy.facts.nvidia import PackagesAvailable

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

SOURCES = (
    AptSourceFiles,
    "/etc/apt/sources.list.d/debian.sources "
    + base64.b64encode(
        b"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n"
    ).decode(),
)
CHANGING = ("mkdir ", "apt-get", "apt-mark", "dnf ", "chmod ", "chown ", "update-initramfs", "reboot")


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger="pyinfra")
    return lambda: [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def debian_node(node_survey, *facts):
    """A Debian node; what it does not state (the kernel stage's files, installed packages) reads as
    nothing there: the facts' defaults."""
    return gpu_node("debian-12", node_survey=node_survey, facts=[SOURCES, *facts], unstated=DEFAULT)


def debian(node, **data):
    return run_deploy(debian_node(node), data=data)


def test_no_gpu_is_a_warning_and_the_run_goes_on(warnings):
    run = debian(node_lines("6.1.0-18-amd64"))
    assert run.error is None
    assert any("no NVIDIA GPU on the PCI bus" in line for line in warnings())
    assert run.ran("--allow-change-held-packages --allow-downgrades nvidia-driver")


def test_no_gpu_with_require_gpu_stops_before_any_change():
    run = debian(node_lines("6.1.0-18-amd64"), require_gpu=True)
    assert "no NVIDIA GPU on the PCI bus (vendor 0x10de, display class): require_gpu=true" in run.refusal
    assert not [c for c in run.commands if c.startswith(CHANGING)]


def test_a_gpus_audio_function_alone_is_not_a_gpu():
    run = debian(node_lines("6.1.0-18-amd64", pci=["pci 0000:3b:00.1 0x1aef 0x040300"]), require_gpu=True)
    assert "no NVIDIA GPU" in run.refusal


def test_a_gpu_passes_require_gpu(warnings):
    run = debian(node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU), require_gpu=True)
    assert run.error is None
    assert not any("no NVIDIA GPU" in line for line in warnings())


def test_secure_boot_with_signing_turned_off_warns_with_what_to_do(warnings):
    run = debian(
        node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, secure_boot=True),
        module_signing="false",
        allow_unsigned_modules="true",
    )
    assert run.error is None
    [line] = {line for line in warnings() if "Secure Boot" in line}
    assert "unsigned NVIDIA kernel module will not load" in line and "module_signing=auto" in line


def test_secure_boot_with_signing_on_leaves_it_to_the_driver_stage(warnings):
    run = debian(node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, secure_boot=True))
    assert run.error is None
    assert not any("Secure Boot is enabled" in line for line in warnings())
    assert run.ran("openssl req -new -x509")  # the driver stage signs (tests/unit/test_module_signing.py)


def test_secure_boot_disabled_says_nothing(warnings):
    debian(node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, secure_boot=False))
    assert not any("Secure Boot" in line for line in warnings())


@pytest.mark.parametrize("module", ["nouveau", "nova_core"])
def test_a_loaded_nouveau_or_nova_is_reported(warnings, module):
    debian(node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, modules=[module]))
    assert any(f"{module} is loaded and holds the GPU" in line for line in warnings())


def test_too_little_free_disk_stops_before_any_change():
    run = debian(node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, free_mb=1000))
    assert "only 1000 MiB free on /, less than min_free_disk_mb=2048" in run.refusal
    assert "only 1000 MiB free on /var" in run.refusal
    assert not [c for c in run.commands if c.startswith(CHANGING)]


def test_every_reason_to_stop_is_in_the_one_refusal_line():
    run = debian(node_lines("6.1.0-18-amd64", free_mb=1000), require_gpu=True)
    assert run.refusal == (
        "no NVIDIA GPU on the PCI bus (vendor 0x10de, display class): require_gpu=true; "
        "only 1000 MiB free on /, less than min_free_disk_mb=2048: free some space (the driver and "
        "its DKMS build need it) or lower the setting; only 1000 MiB free on /var, less than "
        "min_free_disk_mb=2048: free some space (the driver and its DKMS build need it) or lower "
        "the setting"
    )
    assert not [c for c in run.commands if c.startswith(CHANGING)]


def test_min_free_disk_zero_disables_the_check():
    assert debian(node_lines("6.1.0-18-amd64", free_mb=10), min_free_disk_mb=0).error is None


def test_missing_headers_for_the_running_kernel_are_reported(warnings):
    run_deploy(debian_node(node_lines("6.18.44-fc-v657"), (every(PackagesAvailable), carrying("linux-headers-amd64"))))
    [line] = [line for line in warnings() if "kernel headers" in line]
    assert "linux-headers-6.18.44-fc-v657 for the running kernel are not in the apt lists" in line
    assert "linux-headers-amd64" in line


def test_available_headers_are_not_reported(warnings):
    run_deploy(
        debian_node(node_lines("6.1.0-18-amd64"), (every(PackagesAvailable), carrying("linux-headers-6.1.0-18-amd64")))
    )
    assert not any("kernel headers" in line for line in warnings())


def test_preflight_alone_changes_nothing():
    """With every changing stage off, the run only reads: each command is a fact's."""
    run = run_deploy(
        gpu_node("debian-12", node_survey=node_lines("6.1.0-18-amd64", secure_boot=True, modules=["nouveau"])),
        data={"stages": "toolkit", "nvidia_toolkit_install": False},
    )
    assert run.error is None
    assert not [c for c in run.commands if c.startswith(CHANGING) or "> /" in c]


# --- who runs, and what runs the node ------------------------------------------------------------


def with_access(*lines: str):
    return debian_node(node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU), (HostAccess, list(lines)))


@pytest.mark.parametrize(
    "lines, refusal",
    [
        (
            ["uid 1000", "user ubuntu", "kernel Linux", "systemd", "init systemd", "manager apt"],
            "commands run as ubuntu (uid 1000), not as root: gpu-node installs packages and edits /etc; run pyinfra "
            "with --sudo (passwordless sudo, or --use-sudo-password), or connect as root",
        ),
        (
            ["uid 0", "user root", "kernel Linux", "init bash", "manager apt"],
            "systemd is not running as PID 1 (PID 1 is bash): gpu-node enables and restarts services through systemd; "
            "run it on a host booted with systemd",
        ),
        (
            ["uid 0", "user root", "kernel FreeBSD", "init init"],
            "not a Linux host (uname -s: FreeBSD): gpu-node provisions Linux GPU nodes",
        ),
        (
            ["uid 0", "user root", "kernel Linux", "systemd", "init systemd", "manager dnf"],
            "debian installs packages with apt, which is not installed here: install it, or check /etc/os-release",
        ),
    ],
)
def test_a_node_gpu_node_cannot_work_on_is_refused_in_one_line_before_any_change(lines, refusal):
    run = run_deploy(with_access(*lines))
    assert run.refusal == refusal
    assert not [c for c in run.commands if c.startswith(CHANGING) or "upload" in c]
    assert len(run.commands) == 1  # the one node read


def test_host_access_reads_a_real_shell_as_the_node_gives_it():
    """HostAccess's own command run by sh on this machine (root, Linux; no systemd as PID 1 here)."""
    output = subprocess.run(["sh", "-c", HostAccess().command()], capture_output=True, text=True, check=True).stdout
    access = HostAccess().process(output.splitlines())
    assert (access["uid"], access["user"], access["kernel"]) == (
        os.getuid(),
        pwd.getpwuid(os.getuid()).pw_name,
        "Linux",
    )
    assert access["systemd"] == os.path.isdir("/run/systemd/system")
    assert access["init"] == Path("/proc/1/comm").read_text().strip()
    assert access["managers"] == [name for name in PACKAGE_MANAGER_COMMANDS if shutil.which(name)]
