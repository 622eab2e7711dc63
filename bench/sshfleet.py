"""
A fleet of node containers reached over SSH, as a real fleet is (benchmark only).

Each node is the project's node container (tests/harness.py image and run flags, host network)
from a derived image that adds Debian's openssh-server (its .debs cached under
.cache/ssh-node-debs). At start a node gets its own sshd port on 127.0.0.1, a throwaway host key
and the throwaway client key in root's authorized_keys. pyinfra's SSH connector (paramiko) and
Ansible (OpenSSH) reach it with a known_hosts file written here, checked strictly; the machine's
own ~/.ssh is neither read for keys nor written.

sshd runs every command through a ForceCommand wrapper that appends it to a log before running
it, so the remote command count comes from the nodes themselves, not from the controller.
"""

from __future__ import annotations

import hashlib
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from harness import CACHE, Node, run  # noqa: E402

COMMAND_LOG = "/var/log/gpu-node-bench-commands.log"
WRAPPER = "/usr/local/sbin/gpu-node-bench-logged-shell"
HOST_KEY = "/etc/ssh/gpu_node_bench_host_key"
PORT_CONFIG = "/etc/ssh/sshd_config.d/00-gpu-node-bench-port.conf"
FIRST_PORT = 22600

# One line per command (newlines folded), then the command exactly as sshd would run it.
# sftp sessions arrive here too (as sshd's sftp-server path): a file transfer is a round trip.
WRAPPER_SCRIPT = f"""#!/bin/sh
# ForceCommand of the gpu-node benchmark: log each command the controller sends, then run it.
printf '%s\\n' "$(printf '%s' "${{SSH_ORIGINAL_COMMAND:-<login shell>}}" | tr '\\n' ' ')" >> {COMMAND_LOG}
if [ -z "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/sh -l; fi
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""

SSHD_CONFIG = f"""# gpu-node benchmark: key-only root login on 127.0.0.1, every command logged.
ListenAddress 127.0.0.1
HostKey {HOST_KEY}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
MaxStartups 200
MaxSessions 64
ForceCommand {WRAPPER}
"""

IMAGE_RECIPE = f"""
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends openssh-server
rm -rf /var/lib/apt/lists/*
rm -f /etc/ssh/ssh_host_*
# Started by the benchmark once the node's port and host key are in place, never on port 22.
systemctl disable ssh.service ssh.socket 2>/dev/null || true
systemctl mask ssh.socket
# Each booted node holds inotify instances, and the machine's root user has 128 in all (shared by
# every container here): units a benchmark node does not need give theirs up (key-only sshd
# without PAM needs no logind).
systemctl mask systemd-ask-password-console.path systemd-ask-password-wall.path systemd-logind.service
cat > {WRAPPER} <<'WRAPPER_EOF'
{WRAPPER_SCRIPT}WRAPPER_EOF
chmod 755 {WRAPPER}
cat > /etc/ssh/sshd_config.d/gpu-node-bench.conf <<'CONFIG_EOF'
{SSHD_CONFIG}CONFIG_EOF
"""


def ssh_node_image(base: str) -> str:
    """The node image plus openssh-server, built once per base image and recipe."""
    base_id = run(["docker", "image", "inspect", "-f", "{{.Id}}", base]).stdout.strip()
    tag = "gpu-node-test/node-bookworm-ssh:" + hashlib.sha256((base_id + IMAGE_RECIPE).encode()).hexdigest()[:12]
    if run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag
    debs = CACHE / "ssh-node-debs"
    (debs / "partial").mkdir(parents=True, exist_ok=True)
    container = run(["docker", "create", "--network", "host", "-v", f"{debs}:/var/cache/apt/archives",
                     base, "sh", "-c", IMAGE_RECIPE]).stdout.strip()
    try:
        result = run(["docker", "start", "-a", container], check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building {tag} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        run(["docker", "commit", "-c", 'CMD ["/sbin/init"]', container, tag])
    finally:
        run(["docker", "rm", "-f", "-v", container], check=False)
    return tag


def free_ports(count: int, start: int = FIRST_PORT) -> list[int]:
    """``count`` ports on 127.0.0.1 nothing listens on now."""
    ports, port = [], start
    while len(ports) < count:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                ports.append(port)
            except OSError:
                pass
        port += 1
    return ports


@dataclass
class Keys:
    """The throwaway client key, host key and known_hosts file of one benchmark run."""

    folder: Path
    client: Path = field(init=False)
    host: Path = field(init=False)
    known_hosts: Path = field(init=False)

    def __post_init__(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        self.client, self.host = self.folder / "client_ed25519", self.folder / "host_ed25519"
        self.known_hosts = self.folder / "known_hosts"
        for key in (self.client, self.host):
            if not key.exists():
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-node-bench", "-f", str(key)])
        self.known_hosts.touch()

    def trust(self, port: int) -> None:
        kind, blob = Path(str(self.host) + ".pub").read_text().split()[:2]
        with self.known_hosts.open("a") as stream:
            stream.write(f"[127.0.0.1]:{port} {kind} {blob}\n")


@dataclass
class SshNode(Node):
    port: int = 0
    name: str = ""
    # More sshd ports on the same node: several inventory hosts that are one container (read-only
    # runs only; see bench.py's --hosts-per-node).
    extra_ports: list[int] = field(default_factory=list)

    def start_ssh(self, keys: Keys) -> "SshNode":
        """Boot the node (harness), then its sshd on its own port(s) with the run's keys."""
        self.start()
        try:
            self.write(HOST_KEY, keys.host.read_text(), mode="600")
            self.write("/root/.ssh/authorized_keys", Path(str(keys.client) + ".pub").read_text(), mode="600")
            self.write(PORT_CONFIG, "".join(f"Port {port}\n" for port in [self.port, *self.extra_ports]))
            self.sh(f"touch {COMMAND_LOG} && systemctl start ssh.service")
        except BaseException:
            self.remove()
            raise
        return self

    def endpoints(self) -> list[tuple[str, int]]:
        """(inventory host name, port) of each sshd port."""
        if not self.extra_ports:
            return [(self.name, self.port)]
        return [(f"{self.name}-{index}", port) for index, port in enumerate([self.port, *self.extra_ports])]

    def take_commands(self) -> list[str]:
        """The commands logged since the last call (the log is emptied)."""
        lines = self.sh(f"cat {COMMAND_LOG} && : > {COMMAND_LOG}").stdout.splitlines()
        return [line for line in lines if line.strip()]


def host_data(port: int, keys: Keys) -> dict:
    return {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": port,
        "ssh_user": "root",
        "ssh_key": str(keys.client),
        "ssh_known_hosts_file": str(keys.known_hosts),
        "ssh_strict_host_key_checking": "yes",
        "ssh_allow_agent": False,
        "ssh_look_for_keys": False,
        # The machine's ~/.ssh/config is not this fleet's business.
        "ssh_config_file": "/dev/null",
    }


def write_inventory(path: Path, endpoints: list[tuple[str, int]], keys: Keys) -> Path:
    """A pyinfra inventory: every (name, port) in group gpu_nodes, with its SSH data."""
    entries = [(name, host_data(port, keys)) for name, port in endpoints]
    path.write_text("# gpu-node benchmark fleet (generated)\ngpu_nodes = " + repr(entries) + "\n")
    return path


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
    ssh_args = (f"-F /dev/null -o UserKnownHostsFile={shlex.quote(str(keys.known_hosts))} "
                "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
                "-o ControlMaster=auto -o ControlPersist=60s")
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
        except Exception as error:  # keep removing the others
            print(f"removing {node.id[:12]} failed: {error}", file=sys.stderr)


def ssh_ok(node: SshNode, keys: Keys) -> bool:
    """One ssh login (OpenSSH) to prove the node answers before pyinfra is timed."""
    result = subprocess.run(
        ["ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={keys.known_hosts}", "-o", "StrictHostKeyChecking=yes",
         "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-i", str(keys.client), "-p", str(node.port),
         "root@127.0.0.1", "true"], capture_output=True, text=True, timeout=60)
    return result.returncode == 0
