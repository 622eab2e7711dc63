"""
First contact: a host gpu-node cannot work on is refused by preflight, in one line naming the
problem, before any change; a dry run says it too, and exits 1. Real: the node image started as a
plain container, PID 1 not systemd and no sudo (what `docker run` of a distribution image gives),
reached by pyinfra's own @docker connector; and a node reached over a real sshd by a login user
without sudo rights.
"""

from __future__ import annotations

import subprocess
import sys

from harness import REPO, SAFE_DATA, Node, run
from ssh_nodes import LOGIN_USER, Keys, SshNode, free_ports, ssh_node_image, write_inventory

ETC_DIGESTS = "find /etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum"


NO_SYSTEMD = (
    "systemd is not running as PID 1 (PID 1 is sleep): gpu-node enables and restarts services through "
    "systemd; run it on a host booted with systemd"
)


def said(result) -> list[str]:
    """The run's gpu-node lines, and anything that would be a dump or a traceback."""
    return [
        line.strip()
        for line in result.run_output.splitlines()
        if "gpu-node:" in line or "Traceback" in line or "could not load fact" in line or "calls=" in line
    ]


def test_a_container_without_systemd_as_pid_1_is_refused_in_one_line_before_any_change(image):
    """Executed (-y), planned only (--dry, with and without -y: pyinfra's change detection), and with
    --sudo where the container has no sudo: one line each, a failing exit status, /etc untouched."""
    node = Node(image=image, init=("sleep", "infinity")).start()
    try:
        before = node.sh(ETC_DIGESTS).stdout
        result = node.deploy(json_output=False)
        assert result.returncode != 0
        assert said(result) == [f"[{node.target}] gpu-node: {NO_SYSTEMD}"], result.explain()
        for default_mode in (False, True):
            dry = node.deploy(json_output=False, extra_args=["--dry"], default_mode=default_mode)
            assert dry.returncode == 1, dry.explain()
            assert said(dry) == [f"[{node.target}] gpu-node: {NO_SYSTEMD}"], dry.explain()
            assert f"{node.target} would be refused: {NO_SYSTEMD}" in dry.output, dry.explain()
        no_sudo = node.deploy(json_output=False, extra_args=["--sudo"])
        assert no_sudo.returncode != 0
        assert said(no_sudo) == [
            f"[{node.target}] gpu-node: sudo is not installed on this node, and the run asks for "
            "it (_sudo=True or --sudo): install sudo, or connect as root and leave sudo out"
        ], no_sudo.explain()
        assert node.sh(ETC_DIGESTS).stdout == before
    finally:
        node.remove()


def test_a_login_user_without_root_is_refused_in_one_line_with_or_without_sudo(image, tmp_path):
    """A real sshd (Debian's openssh-server and sudo, tests/ssh_nodes.py), a login user with no sudo
    rights: without --sudo the commands run as that user; with --sudo, sudo asks for a password and
    no terminal is there to type it (CI, cron)."""
    keys = Keys(tmp_path / "keys")
    port = free_ports(1)[0]
    node = SshNode(image=ssh_node_image(image), port=port, name="gpu1").start_ssh(keys, user=LOGIN_USER)
    try:
        keys.trust(port)
        node.sh(
            f"useradd --create-home --shell /bin/sh nosudo && usermod -p '*' nosudo && mkdir /home/nosudo/.ssh "
            f"&& cp /home/{LOGIN_USER}/.ssh/authorized_keys /home/nosudo/.ssh/ && chown -R nosudo: /home/nosudo/.ssh"
        )
        inventory = write_inventory(tmp_path / "inventory.py", node.endpoints(), keys, user=None)
        before = node.sh(ETC_DIGESTS).stdout
        refusals = {
            "run as nosudo": (
                "commands run as nosudo (uid 1001), not as root: gpu-node installs packages and edits "
                "/etc; run pyinfra with --sudo (passwordless sudo, or --use-sudo-password), or connect "
                "as root"
            ),
            "sudo": (
                "sudo wants a password for nosudo and there is no terminal to type it into: allow nosudo sudo "
                "without a password, or run pyinfra from a terminal"
            ),
        }
        for case, flags in (("run as nosudo", []), ("sudo", ["--sudo"])):
            result = run(
                [
                    sys.executable,
                    "-m",
                    "pyinfra",
                    "-y",
                    str(inventory),
                    "deploy/gpu_node.py",
                    "--ssh-user",
                    "nosudo",
                    *flags,
                    *[f"--data={key}={value}" for key, value in SAFE_DATA.items()],
                ],
                check=False,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                timeout=300,
            )
            lines = [
                line.strip()
                for line in (result.stdout + result.stderr).splitlines()
                if "gpu-node:" in line or "Traceback" in line or "could not load fact" in line
            ]
            assert result.returncode != 0 and lines == [f"[gpu1] gpu-node: {refusals[case]}"], (case, result.stderr)
        assert node.sh(ETC_DIGESTS).stdout == before
    finally:
        node.remove()
