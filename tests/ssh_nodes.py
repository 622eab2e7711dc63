"""
Node containers reached over SSH, as a real fleet is: the benchmark's fleet (bench/sshfleet.py) and
the e2e tests that need pyinfra's SSH connector (tests/e2e/test_credentials_ssh.py).

Each node is the project's node container (tests/harness.py image and run flags, host network)
from a derived image that adds Debian's openssh-server, sudo and inotify-tools (their .debs cached
under .cache/ssh-node-debs) and a login user ``LOGIN_USER`` allowed to sudo without a password. At
start a node gets its own sshd port on 127.0.0.1, a throwaway host key and the throwaway client key
in the chosen user's authorized_keys (root's, or ``LOGIN_USER``'s). pyinfra's SSH connector
(paramiko) and Ansible (OpenSSH) reach it with a known_hosts file written here, checked strictly;
the machine's own ~/.ssh is neither read for keys nor written.

sshd runs every command through a ForceCommand wrapper that appends it to a log before running
it, so the remote command count comes from the nodes themselves, not from the controller.
"""

from __future__ import annotations

import hashlib
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from build_lock import built_once
from harness import CACHE, Node, run
from shards import port_offset

COMMAND_LOG = "/var/log/gpu-node-bench-commands.log"
WRAPPER = "/usr/local/sbin/gpu-node-bench-logged-shell"
HOST_KEY = "/etc/ssh/gpu_node_bench_host_key"
PORT_CONFIG = "/etc/ssh/sshd_config.d/00-gpu-node-bench-port.conf"
FIRST_PORT = 22600 + port_offset()
# A user as the README's `--ssh-user ubuntu --sudo` has: not root, sudo without a password.
LOGIN_USER = "gpu-node-login"

# One line per command (newlines folded), then the command exactly as sshd would run it.
# sftp sessions arrive here too (as sshd's sftp-server path): a file transfer is a round trip.
WRAPPER_SCRIPT = f"""#!/bin/sh
# ForceCommand of the gpu-node benchmark: log each command the controller sends, then run it.
printf '%s\\n' "$(printf '%s' "${{SSH_ORIGINAL_COMMAND:-<login shell>}}" | tr '\\n' ' ')" >> {COMMAND_LOG}
if [ -z "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/sh -l; fi
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""

SSHD_CONFIG = f"""# gpu-node test nodes: key-only login on 127.0.0.1, every command logged.
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
apt-get install -y -q --no-install-recommends openssh-server sudo inotify-tools
rm -rf /var/lib/apt/lists/*
rm -f /etc/ssh/ssh_host_*
# Started once the node's port and host key are in place, never on port 22.
systemctl disable ssh.service ssh.socket 2>/dev/null || true
systemctl mask ssh.socket
# Each booted node holds inotify instances, and the machine's root user has 128 in all (shared by
# every container here): units a test node does not need give theirs up (key-only sshd
# without PAM needs no logind).
systemctl mask systemd-ask-password-console.path systemd-ask-password-wall.path systemd-logind.service
cat > {WRAPPER} <<'WRAPPER_EOF'
{WRAPPER_SCRIPT}WRAPPER_EOF
chmod 755 {WRAPPER}
cat > /etc/ssh/sshd_config.d/gpu-node-bench.conf <<'CONFIG_EOF'
{SSHD_CONFIG}CONFIG_EOF
# '*' and not useradd's '!': sshd without PAM refuses a locked account, even with a key.
useradd --create-home --shell /bin/sh {LOGIN_USER}
usermod -p '*' {LOGIN_USER}
echo '{LOGIN_USER} ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/{LOGIN_USER}
chmod 440 /etc/sudoers.d/{LOGIN_USER}
"""


def ssh_node_image(base: str) -> str:
    """The node image plus openssh-server, sudo, inotify-tools and the login user, built once per base image and recipe."""
    base_id = run(["docker", "image", "inspect", "-f", "{{.Id}}", base]).stdout.strip()
    tag = "gpu-node-test/node-bookworm-ssh:" + hashlib.sha256((base_id + IMAGE_RECIPE).encode()).hexdigest()[:12]
    with built_once(tag):
        if run(["docker", "image", "inspect", tag], check=False).returncode != 0:
            _build_ssh_node_image(base, tag)
    return tag


def _build_ssh_node_image(base: str, tag: str) -> None:
    debs = CACHE / "ssh-node-debs"
    (debs / "partial").mkdir(parents=True, exist_ok=True)
    container = run(
        [
            "docker",
            "create",
            "--network",
            "host",
            "-v",
            f"{debs}:/var/cache/apt/archives",
            base,
            "sh",
            "-c",
            IMAGE_RECIPE,
        ]
    ).stdout.strip()
    try:
        result = run(["docker", "start", "-a", container], check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building {tag} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        run(["docker", "commit", "-c", 'CMD ["/sbin/init"]', container, tag])
    finally:
        run(["docker", "rm", "-f", "-v", container], check=False)


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
    """The throwaway client key, host key and known_hosts file of one run."""

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
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-node-test", "-f", str(key)])
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

    def start_ssh(self, keys: Keys, user: str = "root") -> SshNode:
        """Boot the node (harness), then its sshd on its own port(s), ``user`` logging in with the run's key."""
        self.start()
        try:
            home = "/root" if user == "root" else f"/home/{user}"
            self.write(HOST_KEY, keys.host.read_text(), mode="600")
            self.write(f"{home}/.ssh/authorized_keys", Path(str(keys.client) + ".pub").read_text(), mode="600")
            self.write(PORT_CONFIG, "".join(f"Port {port}\n" for port in [self.port, *self.extra_ports]))
            # The log is written as the login user, by the ForceCommand wrapper.
            self.sh(
                f"chown -R {shlex.quote(user)}: {home}/.ssh && touch {COMMAND_LOG} "
                f"&& chown {shlex.quote(user)} {COMMAND_LOG} && systemctl start ssh.service"
            )
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


def host_data(port: int, keys: Keys, user: str | None = "root") -> dict:
    """A host's SSH data; ``user=None``: none, for the command line's ``--ssh-user``."""
    data = {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": port,
        "ssh_key": str(keys.client),
        "ssh_known_hosts_file": str(keys.known_hosts),
        "ssh_strict_host_key_checking": "yes",
        "ssh_allow_agent": False,
        "ssh_look_for_keys": False,
        # The machine's ~/.ssh/config is not this fleet's business.
        "ssh_config_file": "/dev/null",
    }
    if user:
        data["ssh_user"] = user
    return data


def write_inventory(path: Path, endpoints: list[tuple[str, int]], keys: Keys, user: str | None = "root") -> Path:
    """A pyinfra inventory: every (name, port) in group gpu_nodes, with its SSH data."""
    entries = [(name, host_data(port, keys, user)) for name, port in endpoints]
    path.write_text("# gpu-node test fleet (generated)\ngpu_nodes = " + repr(entries) + "\n")
    return path
