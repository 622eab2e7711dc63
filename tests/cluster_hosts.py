"""
Helpers for e2e tests that run the tool against the lab cluster (tests/lab/): a control-plane
host pyinfra can target (a node container with the lab's kubectl and an admin kubeconfig, as
kubeadm leaves /etc/kubernetes/admin.conf), and the pyinfra CLI over an inventory file in both of
pyinfra's modes: the default one (changes shown, then confirmed on stdin, no ``-y``) and ``-y``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from harness import REPO, SAFE_DATA, DeployResult, run

ADMIN_CONF = "/etc/kubernetes/admin.conf"


def make_kubectl_host(control_plane, node) -> None:
    """``node`` (a harness Node or KubeletNode's node) gets kubectl and the admin kubeconfig."""
    from lab import assets
    from lab.control_plane import kubeconfig_text

    run(["docker", "cp", "-L", str(assets.kubernetes_binary("kubectl")), f"{node.id}:/usr/local/bin/kubectl"])
    pki = control_plane.pki.folder
    node.write(
        ADMIN_CONF,
        kubeconfig_text(
            control_plane.server, control_plane.pki.ca, pki / "admin.crt", pki / "admin.key", "admin", embed=True
        ),
        mode="600",
    )


def write_inventory(path: Path, gpu_nodes: dict[str, str], control_plane: str) -> str:
    """gpu_nodes: pyinfra target -> Kubernetes node name."""
    path.write_text(
        f"gpu_nodes = [(target, {{'kube_node_names': {gpu_nodes!r}}}) for target in {list(gpu_nodes)!r}]\n"
        f"control_plane = [{control_plane!r}]\n"
    )
    return str(path)


def pyinfra(
    inventory: str, deploy_file: str, data: dict, *, yes: bool, extra: tuple[str, ...] = (), timeout: float = 1500
) -> DeployResult:
    """
    The CLI as a user runs it. ``yes``: ``-y --json``. Otherwise pyinfra's default mode: it
    detects and prints the changes, then waits for Enter (given on stdin) before executing;
    its text output is what is checked (``changed_in_text``).
    """
    args = [sys.executable, "-m", "pyinfra"]
    args += ["-y", "--json"] if yes else []
    args += [*extra, inventory, deploy_file]
    for key, value in {**SAFE_DATA, **data}.items():
        args += ["--data", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPU_NODES", None)
    result = run(args, check=False, cwd=REPO, env=env, timeout=timeout, input="" if yes else "\n")
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def changed_in_text(result: DeployResult) -> int:
    """Default (text) mode: how many host-operations changed, from pyinfra's results table."""
    match = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", result.output)
    assert match, f"no results table in the output\n{result.explain()}"
    return 0 if match[2] == "-" else int(match[2])


def assert_change_free(result: DeployResult, yes: bool) -> None:
    assert result.returncode == 0, result.explain()
    if yes:
        changed = result.changed_operations()
        assert changed == [], f"a re-run changed: {changed}\n{result.explain()}"
    else:
        assert changed_in_text(result) == 0, result.explain()


def allow_sandboxes_without_cap_sys_resource(node) -> None:
    """
    Lab change of the node's config.toml: CRI sandboxes ask for oom_score_adj -998, node containers
    run without CAP_SYS_RESOURCE, so runc init fails there ("can't get final child's PID from
    pipe"); containerd's restrict_oom_score_adj (meant for such nested setups) caps it at its own.
    The tool's merge keeps the key on later runs. (A kubelet node gets it from tests/lab's join.)
    """
    import tomlkit
    from harness import wait_for

    path = "/etc/containerd/config.toml"
    config = tomlkit.parse(node.read(path))
    config["plugins"]["io.containerd.grpc.v1.cri"]["restrict_oom_score_adj"] = True
    node.write(path, tomlkit.dumps(config))
    node.sh("systemctl restart containerd")
    wait_for(lambda: node.is_active("containerd"), timeout=30, what="containerd after the restart")
