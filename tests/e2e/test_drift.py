"""Drift mode (deploy/fleet/drift.py, the console script gpu-node-drift) on a real node: silent when the
node matches, names the change when it does not, changes nothing."""

from __future__ import annotations

import subprocess
import sys

from harness import REPO, SAFE_DATA

from deploy.tasks.kernel import SYSCTL_PATH

KERNEL_ONLY = {**SAFE_DATA, "stages": "kernel"}


def drift(node) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "deploy.fleet.drift", node.target, "deploy/gpu_node.py"]
    for key, value in KERNEL_ONLY.items():
        args += ["--data", f"{key}={value}"]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_drift_exits_zero_when_converged_and_two_naming_the_operation_after_a_hand_edit(node):
    assert node.deploy(data=KERNEL_ONLY).returncode == 0
    clean = drift(node)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "no drift" in clean.stdout

    node.write(SYSCTL_PATH, "net.ipv4.ip_forward = 0\n")
    edited = node.stat(SYSCTL_PATH)
    drifted = drift(node)
    assert drifted.returncode == 2, drifted.stdout + drifted.stderr
    assert f"{node.target}: Kernel prerequisites | Persist the Kubernetes sysctls" in drifted.stdout
    assert "Blacklist" not in drifted.stdout
    assert node.stat(SYSCTL_PATH) == edited, "a drift check must not change the node"
