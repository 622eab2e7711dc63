"""The foundation on a real bookworm systemd node container: kernel stage, settings, idempotence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness import assert_no_change

# The files the stage keeps, and their exact texts (tests/fixtures/kernel/README.md: the sources).
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"
MODULES_LOAD_PATH = "/etc/modules-load.d/gpu-node-kubernetes.conf"
SYSCTL_PATH = "/etc/sysctl.d/99-gpu-node-kubernetes.conf"
BLACKLIST_PATH = "/etc/modprobe.d/gpu-node-blacklist-nouveau.conf"


def golden(path: str) -> str:
    return (GOLDEN / Path(path).name).read_text()


# The foundation alone: no driver, toolkit or runtimes.
KERNEL_ONLY = {
    "nvidia_driver_install": "false",
    "nvidia_toolkit_install": "false",
    "container_runtimes": "containerd",
    "stages": "kernel",
}


# pyinfra's default mode (changes detected, shown, confirmed on stdin) is what the README's main
# command runs; -y skips the detection.
BOTH_MODES = pytest.mark.parametrize("default_mode", [True, False], ids=["default-mode", "-y"])


@BOTH_MODES
def test_kernel_stage_persists_modules_and_sysctls_and_second_run_changes_nothing(node, default_mode):
    first = node.deploy(data=KERNEL_ONLY, default_mode=default_mode)
    assert first.returncode == 0, first.explain()
    assert "Kernel prerequisites | Persist the Kubernetes sysctls" in first.changed_operations()

    assert node.read(MODULES_LOAD_PATH) == golden(MODULES_LOAD_PATH)
    assert "overlay\nbr_netfilter\n" in node.read(MODULES_LOAD_PATH)
    sysctls = node.read(SYSCTL_PATH)
    for line in (
        "net.bridge.bridge-nf-call-iptables = 1",
        "net.bridge.bridge-nf-call-ip6tables = 1",
        "net.ipv4.ip_forward = 1",
    ):
        assert line in sysctls
    assert node.read(SYSCTL_PATH) == golden(SYSCTL_PATH)
    assert node.read(BLACKLIST_PATH) == golden(BLACKLIST_PATH)
    before = {path: node.stat(path) for path in (MODULES_LOAD_PATH, SYSCTL_PATH, BLACKLIST_PATH)}

    second = node.deploy(data=KERNEL_ONLY, default_mode=default_mode)
    assert_no_change(second)
    assert {path: node.stat(path) for path in before} == before


def test_invalid_runtime_stops_the_run_before_the_node_changes(node):
    result = node.deploy(data={"container_runtimes": "podman"}, json_output=False)
    assert result.returncode != 0
    error_lines = [line for line in result.stderr.splitlines() if "container_runtimes" in line]
    assert len(error_lines) == 1, result.explain()
    assert "podman" in error_lines[0] and "containerd, docker" in error_lines[0]
    for path in (MODULES_LOAD_PATH, SYSCTL_PATH, BLACKLIST_PATH, "/etc/containerd/config.toml"):
        assert not node.exists(path), f"{path} was written although the settings were invalid"


@BOTH_MODES
def test_files_edited_by_hand_are_put_back(node, default_mode):
    assert node.deploy(data=KERNEL_ONLY, default_mode=default_mode).returncode == 0
    node.write(SYSCTL_PATH, "net.ipv4.ip_forward = 0\n")
    repaired = node.deploy(data=KERNEL_ONLY, default_mode=default_mode)
    assert repaired.returncode == 0, repaired.explain()
    assert repaired.changed_operations() == ["Kernel prerequisites | Persist the Kubernetes sysctls"]
    assert node.read(SYSCTL_PATH) == golden(SYSCTL_PATH)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_first_runs_diff_names_every_file_the_run_then_writes(containerd_node):
    """pyinfra's --diff on a node with Debian's containerd installed: each file the run then writes
    itself (its kernel files, containerd's config with the backup of the one it replaces, the /dev/char
    script and udev rule) was named in the diff, credentials masked (the config holds none here)."""
    node = containerd_node
    node.sh("touch /run/gpu-node-test-before")
    result = node.deploy(
        data={"stages": "kernel,runtimes", "container_runtimes": "containerd"}, json_output=False, extra_args=["--diff"]
    )
    assert result.returncode == 0, result.explain()
    named = set(re.findall(r"Will (?:create|modify|write) (/\S+?):?(?: |$)", ANSI.sub("", result.output), re.M))
    # a folder named with its trailing slash (gpu-node's records for the undo) names the files in it
    folders = tuple(path for path in named if path.endswith("/"))
    written = node.sh(
        "find /etc /usr/local /var/lib/gpu-node -xdev -type f -newer /run/gpu-node-test-before 2>/dev/null; true"
    ).stdout.split()
    assert len(written) >= 6, written
    unnamed = [
        path
        for path in written
        if path not in named
        and not path.startswith(folders)
        and not any(path.startswith(f"{file}.gpu-node-backup-") for file in named)
    ]
    assert unnamed == [], (unnamed, sorted(named))
    # the restart says so when the run reaches it, with its bound and where to look if it fails
    assert (
        "installing the new /etc/containerd/config.toml and restarting containerd: it has 30 s "
        "(service_restart_timeout)"
    ) in result.output
