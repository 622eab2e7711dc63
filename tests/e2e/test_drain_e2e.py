"""
drain_before_restart on two real node containers in one pyinfra run: a GPU node (group
gpu_nodes) whose containerd config changes, and a control plane (group control_plane).

No Kubernetes API server can run here, so the control plane holds a kubectl STAND-IN: it logs
every call with the time it was made (CLOCK_MONOTONIC, which every container of this machine
shares with systemd's ActiveEnterTimestampMonotonic, and the wall clock), keeps each node's
``spec.unschedulable`` in a file, answers ``get node`` from it, and fails ``drain`` on request.
Everything on the GPU node is real: the NVIDIA Container Toolkit 1.20.0 from the test lab
(tests/toolkit_repo.py), containerd, its config, its restart, the verify stage.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from harness import REPO, SAFE_DATA, DeployResult, assert_no_change, run

from deploy.operations.safe_install import BACKUP_INFIX

CONFIG = "/etc/containerd/config.toml"
NODE_NAME = "gpu-e2e-1"
STANDIN_LOG = "/var/log/kubectl-stand-in.log"
STANDIN_STATE = "/var/lib/kubectl-stand-in"
DRAIN_FAILS = "/etc/kubectl-stand-in-drain-fails"
WRITE_VERBS = {"cordon", "uncordon", "drain"}

KUBECTL_STAND_IN = f"""#!/bin/bash
# kubectl STAND-IN (no Kubernetes API server here): node get / cordon / uncordon / drain.
read -r mono wall <<<"$(python3 -c 'import time; print(time.monotonic_ns() // 1000, time.time_ns())')"
echo "$mono $wall $*" >> {STANDIN_LOG}
args=()
while [ $# -gt 0 ]; do
    case $1 in
        --kubeconfig) shift 2 ;;
        --request-timeout=*) shift ;;
        *) args+=("$1"); shift ;;
    esac
done
set -- "${{args[@]}}"
verb=$1
[ "$verb" = get ] && name=$3 || name=$2
state={STANDIN_STATE}/$name
if [ ! -e "$state" ]; then
    echo "Error from server (NotFound): nodes \\"$name\\" not found" >&2
    exit 1
fi
case $verb in
    get) echo "{{\\"kind\\": \\"Node\\", \\"metadata\\": {{\\"name\\": \\"$name\\"}}, \\"spec\\": {{\\"unschedulable\\": $(cat "$state")}}}}" ;;
    cordon) echo true > "$state"; echo "node/$name cordoned" ;;
    uncordon) echo false > "$state"; echo "node/$name uncordoned" ;;
    drain)
        echo true > "$state"
        if [ -e {DRAIN_FAILS} ]; then
            echo "error: unable to drain node \\"$name\\" due to error: global timeout reached, continuing..." >&2
            exit 1
        fi
        echo "node/$name drained" ;;
    *) echo "kubectl stand-in: $verb is not supported" >&2; exit 2 ;;
esac
"""


def start_control_plane(start_node):
    """A node container standing in for the control plane: the kubectl stand-in and a kubeconfig file."""
    control_plane = start_node()
    control_plane.write("/usr/local/bin/kubectl", KUBECTL_STAND_IN, mode="755")
    control_plane.write("/etc/kubernetes/admin.conf", "# kubeconfig STAND-IN: the kubectl stand-in ignores it\n",
                        mode="600")
    control_plane.write(f"{STANDIN_STATE}/{NODE_NAME}", "false\n")
    return control_plane


def write_inventory(tmp_path: Path, gpu, control_plane) -> str:
    path = tmp_path / "live_inventory.py"
    path.write_text(
        f"gpu_nodes = [({gpu.target!r}, {{'kube_node_names': {{{gpu.target!r}: {NODE_NAME!r}}}}})]\n"
        f"control_plane = [{control_plane.target!r}]\n"
    )
    return str(path)


def deploy_pair(inventory: str, data: dict, *options: str) -> DeployResult:
    """One pyinfra run over both hosts, through the real CLI."""
    args = [sys.executable, "-m", "pyinfra", "-y", "--json", *options, inventory, "deploy/gpu_node.py"]
    for key, value in {**SAFE_DATA, **data}.items():
        args += ["--data", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPU_NODES", None)
    result = run(args, check=False, cwd=REPO, env=env, timeout=1500)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def standin_calls(control_plane) -> list[tuple[int, int, list[str]]]:
    """(monotonic µs, wall ns, arguments after --kubeconfig/--request-timeout) per call."""
    calls = []
    for line in control_plane.sh(f"cat {STANDIN_LOG} 2>/dev/null || true").stdout.splitlines():
        mono, wall, *words = line.split()
        calls.append((int(mono), int(wall), words[3:]))
    return calls


def verbs(calls) -> list[str]:
    return [words[0] for _, _, words in calls]


def unschedulable(control_plane) -> str:
    return control_plane.read(f"{STANDIN_STATE}/{NODE_NAME}").strip()


def unwire(gpu) -> None:
    """Put back the config the node had before gpu-node wired it (its first backup), as drift would."""
    first_backup = sorted(gpu.sh(f"ls {CONFIG}{BACKUP_INFIX}*").stdout.split())[0]
    gpu.sh(f"cp {first_backup} {CONFIG} && systemctl restart containerd")
    assert "nvidia" not in gpu.read(CONFIG)


def test_live_node_is_cordoned_and_drained_before_the_restart_and_uncordoned_after_verify_kubectl_standin(
    start_node, toolkit_repo, tmp_path
):
    gpu = start_node()
    control_plane = start_control_plane(start_node)
    inventory = write_inventory(tmp_path, gpu, control_plane)
    report = tmp_path / "report.json"
    base = {"container_runtimes": "containerd", "verify_report_path": str(report), **toolkit_repo.data()}

    # Toolkit and containerd in place (no drain), then the config drifts back to Debian's.
    setup = deploy_pair(inventory, {**base, "stages": "toolkit,runtimes"})
    assert setup.returncode == 0, setup.explain()
    assert standin_calls(control_plane) == []
    unwire(gpu)
    before = gpu.service("containerd")

    data = {**base, "stages": "runtimes,verify", "drain_before_restart": "true", "drain_timeout": "60"}
    first = deploy_pair(inventory, data)
    assert first.returncode == 0, first.explain()
    assert "nvidia" in gpu.read(CONFIG)
    after = gpu.service("containerd")
    assert after["MainPID"] != before["MainPID"] and after["ActiveState"] == "active"

    calls = standin_calls(control_plane)
    assert verbs(calls) == ["get", "get", "cordon", "drain", "uncordon"], calls
    assert calls[3][2] == ["drain", NODE_NAME, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"]
    drained, uncordoned = calls[3][0], calls[4][0]
    restarted = int(after["ActiveEnterTimestampMonotonic"])
    assert drained < restarted < uncordoned, (drained, restarted, uncordoned)
    # The verify report is written when the verify operation ends, before the uncordon.
    assert json.loads(report.read_text())["nodes"][0]["steps"]
    assert report.stat().st_mtime_ns < calls[4][1]
    assert unschedulable(control_plane) == "false"
    changed = first.changed_operations()
    assert f"Live node | Uncordon Kubernetes node {NODE_NAME} after the restart" in changed, changed

    # A second run: nothing to restart, so only the read, no write verb, no restart. Limited to
    # the GPU node (as scripts/rollout.py runs batches): the control plane is reached all the same.
    second = deploy_pair(inventory, data, "--limit", gpu.target)
    assert_no_change(second)
    new_calls = standin_calls(control_plane)[len(calls):]
    assert verbs(new_calls) == ["get"], new_calls
    assert gpu.service("containerd") == after
    assert unschedulable(control_plane) == "false"


def test_failed_drain_leaves_containerd_unrestarted_and_the_node_cordoned_kubectl_standin(
    start_node, toolkit_repo, tmp_path
):
    gpu = start_node()
    control_plane = start_control_plane(start_node)
    inventory = write_inventory(tmp_path, gpu, control_plane)
    base = {"container_runtimes": "containerd", "verify_report_path": str(tmp_path / "report.json"),
            **toolkit_repo.data()}
    setup = deploy_pair(inventory, {**base, "stages": "toolkit,runtimes"})
    assert setup.returncode == 0, setup.explain()
    unwire(gpu)
    before = {"service": gpu.service("containerd"), "file": gpu.stat(CONFIG)}

    control_plane.write(DRAIN_FAILS, "")
    data = {**base, "stages": "runtimes,verify", "drain_before_restart": "true"}
    # --limit to the GPU node, as a batch of scripts/rollout.py: kubectl still runs on the control plane.
    failed = deploy_pair(inventory, data, "--limit", gpu.target)
    assert failed.returncode != 0, failed.explain()
    assert verbs(standin_calls(control_plane)) == ["get", "get", "cordon", "drain"]
    assert {"service": gpu.service("containerd"), "file": gpu.stat(CONFIG)} == before
    assert not gpu.exists(CONFIG + ".gpu-node-candidate"), "a failed drain leaves nothing beside the config"
    assert unschedulable(control_plane) == "true"
    assert f"kubectl drain {NODE_NAME} failed (--timeout=300s): error: unable to drain node" in failed.stderr
    assert (f"Kubernetes node {NODE_NAME} stays cordoned (cordoned and drained before a restart): "
            f"uncordon it with `kubectl uncordon {NODE_NAME}` once fixed") in failed.stderr


def test_control_plane_without_kubectl_stops_the_gpu_node_before_any_change(start_node, tmp_path):
    """The control plane has no kubectl at all: the GPU node fails before its first change."""
    gpu, control_plane = start_node(), start_node()
    inventory = write_inventory(tmp_path, gpu, control_plane)
    before = gpu.stat("/var/lib/dpkg/status")

    result = deploy_pair(inventory, {"stages": "runtimes", "container_runtimes": "containerd",
                                     "drain_before_restart": "true"})
    assert result.returncode != 0, result.explain()
    assert (f"{control_plane.target} cannot reach the Kubernetes API with kubeconfig /etc/kubernetes/admin.conf: "
            "kubectl is not installed (not on PATH); nothing was changed; "
            "set drain_before_restart=false to restart without draining") in result.stderr
    # containerd was not installed: the run stopped before the runtimes stage
    assert gpu.sh("command -v containerd", check=False).returncode != 0
    assert gpu.stat("/var/lib/dpkg/status") == before
