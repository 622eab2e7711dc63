"""
A fleet of node containers reached over SSH, as a real fleet is (benchmark only).

The nodes, their image (openssh-server added to the node image), keys, known_hosts and inventory
are tests/ssh_nodes.py's, shared with the e2e tests that use pyinfra's SSH connector; here is
what only the benchmark needs: Ansible's inventory and environment, the nodes' memory and CPU.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from harness import Node  # noqa: E402
from ssh_nodes import (  # noqa: E402,F401 (bench.py imports them from here)
    Keys,
    SshNode,
    free_ports,
    ssh_node_image,
    write_inventory,
)


def write_ansible_inventory(path: Path, endpoints: list[tuple[str, int]], keys: Keys) -> Path:
    lines = ["[gpu_nodes]"]
    for name, port in endpoints:
        lines.append(
            f"{name} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root "
            f"ansible_ssh_private_key_file={keys.client} ansible_python_interpreter=/usr/bin/python3"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible_environment(keys: Keys, workdir: Path) -> dict:
    """Ansible's own files in the run's folder; OpenSSH with the run's known_hosts, ~/.ssh untouched."""
    ssh_args = (
        f"-F /dev/null -o UserKnownHostsFile={shlex.quote(str(keys.known_hosts))} "
        "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
        "-o ControlMaster=auto -o ControlPersist=60s"
    )
    return {
        "ANSIBLE_HOME": str(workdir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(workdir / "ansible-cp"),
        "ANSIBLE_SSH_ARGS": ssh_args,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_FORKS": "64",
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
    }


def memory_mb(nodes: list[Node]) -> dict[str, float]:
    """
    Each node container's memory as docker's own stats compute it: the cgroup's usage less its
    inactive file cache (read from the cgroup directly: `docker stats` shows 0 on this
    machine's cgroup v1 hierarchy).
    """
    usage = {}
    for node in nodes:
        v1 = Path("/sys/fs/cgroup/memory/docker") / node.id
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{node.id}.scope")
        if v1.exists():
            used, stat, inactive = v1 / "memory.usage_in_bytes", v1 / "memory.stat", "total_inactive_file"
        else:
            used, stat, inactive = v2 / "memory.current", v2 / "memory.stat", "inactive_file"
        fields = dict(line.split() for line in stat.read_text().splitlines())
        usage[node.name or node.id] = (int(used.read_text()) - int(fields.get(inactive, 0))) / 2**20
    return usage


def cpu_seconds(nodes: list[Node]) -> float:
    """CPU seconds the node containers have used so far, all together (their cgroups' accounting):
    sshd, the commands they ran, and whatever else runs in them."""
    total = 0.0
    for node in nodes:
        v1 = Path("/sys/fs/cgroup/cpuacct/docker") / node.id / "cpuacct.usage"
        if v1.exists():
            total += int(v1.read_text()) / 1e9
        else:
            stat = Path(f"/sys/fs/cgroup/system.slice/docker-{node.id}.scope/cpu.stat").read_text()
            total += int(dict(line.split() for line in stat.splitlines())["usage_usec"]) / 1e6
    return total


def remove_all(nodes: list[Node]) -> None:
    for node in nodes:
        try:
            node.remove()
        except Exception as error:  # noqa: BLE001 - keep removing the others
            print(f"removing {node.id[:12]} failed: {error}", file=sys.stderr)


def ssh_ok(node: SshNode, keys: Keys) -> bool:
    """One ssh login (OpenSSH) to prove the node answers before pyinfra is timed."""
    result = subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            f"UserKnownHostsFile={keys.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-i",
            str(keys.client),
            "-p",
            str(node.port),
            "root@127.0.0.1",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode == 0
