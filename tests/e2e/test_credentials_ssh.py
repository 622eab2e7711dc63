"""
The registry credentials in a node's containerd config, over the path the README's command takes:
pyinfra's SSH connector to a real sshd (Debian's openssh-server) as a login user that is not root,
with ``--sudo`` (Debian's sudo), a throwaway key and a strictly checked known_hosts
(tests/ssh_nodes.py's node, the benchmark's fleet node). containerd is Debian's 1.6, installed by
the run; the toolkit is the one tests/toolkit_repo.py serves (the STAND-IN packages, or NVIDIA's
debs from the opt-in lab).

One watcher (Debian's inotify-tools: one inotify instance, stopped after each run) records every
file created or written under /etc, /tmp, /var/tmp, /home and /root while a run goes, and reads
each one's mode, owner, folder and whether it holds the secret as soon as it is written.

One node container for the whole file: the tests run in order on it (each sets up what it needs
on top of the first run's install).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from harness import REPO, SAFE_DATA, DeployResult, assert_no_change, run, wait_for
from ssh_nodes import LOGIN_USER, Keys, SshNode, free_ports, ssh_node_image, write_inventory

from deploy.operations.safe_install import BACKUP_INFIX, CANDIDATE_SUFFIX

CONFIG = "/etc/containerd/config.toml"
REGISTRY_PASSWORD = "REGISTRY-pw-5ecret"
MIRROR_PASSWORD = "MIRROR-pw-5ecret"
# The site's containerd config: a registry login and a mirror whose URL carries a user and password
# (dotted keys, so that both lines are within the two lines of context --diff shows).
SEEDED = f"""version = 2

[plugins."io.containerd.grpc.v1.cri".registry]
  configs."registry.example.internal".auth.password = "{REGISTRY_PASSWORD}"
  mirrors."docker.io".endpoint = ["https://mirror-robot:{MIRROR_PASSWORD}@mirror.example.internal"]
"""
WATCHED = ("/etc", "/tmp", "/var/tmp", "/home", "/root")
TEST_DIR = "/run/gpu-node-test"
# Written by the watcher's loops as soon as inotify reports a file: path, mode, owner, its folder's
# mode, how many lines hold a secret. Two loops: gpu-node's and pyinfra's own files (a few, some alive
# for milliseconds: each must be looked at before it goes) apart from every other file (apt's, during
# the first run's installs), handed out by a loop of shell builtins alone, so that the others' backlog
# never delays a look at ours.
LOOPS = ("ours", "others")
WATCHER = f"""cd {TEST_DIR}
rm -f events-ours events-others fifo fifo-ours fifo-others inotify.err && mkfifo fifo fifo-ours fifo-others
look() {{
    while IFS= read -r path; do
        [ -L "$path" ] || [ -d "$path" ] && continue
        # Content first, then the mode it had: a file gone in between counts as not looked at.
        count=$(grep -c -F -e {REGISTRY_PASSWORD} -e {MIRROR_PASSWORD} "$path" 2>/dev/null)
        info=$(stat -c '%a %U' "$path" 2>/dev/null) && folder=$(stat -c %a "${{path%/*}}" 2>/dev/null) \\
            && [ -n "$count" ] || {{ printf '%s\\tgone\\n' "$path"; continue; }}
        printf '%s\\t%s\\t%s\\t%s\\n' "$path" "$info" "$folder" "$count"
    done
}}
look <fifo-ours >events-ours &
echo $! >loop-ours.pid
look <fifo-others >events-others &
echo $! >loop-others.pid
inotifywait -m -r -e create,close_write,moved_to,attrib --format '%w%f' {" ".join(WATCHED)} >fifo 2>inotify.err &
echo $! >inotify.pid
while IFS= read -r path; do
    case $path in
    *gpu-node*|*pyinfra*) printf '%s\\n' "$path" >&3 ;;
    *) printf '%s\\n' "$path" >&4 ;;
    esac
done <fifo 3>fifo-ours 4>fifo-others
"""
# TEST INTERRUPTION DEVICE: first on the login user's PATH, it holds the first sudo command that
# consumes a staged upload while HOLD exists (the run is then killed right after its upload), and
# passes every command to the real sudo.
HOLD, HELD = f"{TEST_DIR}/hold", f"{TEST_DIR}/held/pid"
SUDO_HOLD = f"""#!/bin/sh
# TEST INTERRUPTION DEVICE (tests/e2e/test_credentials_ssh.py)
case "$*" in
*pyinfra-gpu-node-*)
    if [ -e {HOLD} ]; then
        echo $$ >{HELD}
        while [ -e {HOLD} ]; do sleep 0.2; done
    fi
    ;;
esac
exec /usr/bin/sudo "$@"
"""


@dataclass
class Sight:
    """One look the watcher took at a file as it was written."""

    path: str
    mode: int
    owner: str
    folder_mode: int
    secret: bool

    def problem(self) -> str | None:
        if not self.secret:
            return None
        if self.mode & 0o077:
            return f"{self.path} holds the secret with mode {self.mode:o}"
        if self.owner not in ("root", LOGIN_USER):
            return f"{self.path} holds the secret and belongs to {self.owner}"
        if self.folder_mode & 0o002:
            return f"{self.path} holds the secret in a folder others can write ({self.folder_mode:o})"
        if re.fullmatch(r"pyinfra-[0-9a-f]{40}", os.path.basename(self.path)):
            return f"{self.path} holds the secret at pyinfra's name for the destination"
        return None


class Watcher:
    def __init__(self, node: SshNode):
        self.node = node

    def __enter__(self) -> Watcher:
        self.node.sh(f"mkdir -p {TEST_DIR}")
        run(["docker", "exec", "-d", self.node.id, "sh", "-c", WATCHER])
        wait_for(
            lambda: (
                "Watches established" in self.node.sh(f"cat {TEST_DIR}/inotify.err 2>/dev/null", check=False).stdout
            ),
            timeout=60,
            what="inotifywait's watches",
        )
        return self

    def __exit__(self, *exc) -> None:
        self.node.sh(f"kill $(cat {TEST_DIR}/inotify.pid)", check=False)

    def sights(self) -> tuple[list[Sight], set[str]]:
        """Every look taken, and the paths that were gone before a look (created, then removed)."""
        for name in LOOPS:
            wait_for(
                lambda name=name: (
                    self.node.sh(f"kill -0 $(cat {TEST_DIR}/loop-{name}.pid)", check=False).returncode != 0
                ),
                timeout=30,
                what=f"the watcher's loop to end ({name})",
            )
        sights, gone = [], set()
        lines = [line for name in LOOPS for line in self.node.read(f"{TEST_DIR}/events-{name}").splitlines()]
        for line in lines:
            fields = line.split("\t")
            if fields[1:] == ["gone"]:
                gone.add(fields[0])
                continue
            path, mode_owner, folder_mode, count = fields
            mode, owner = mode_owner.split()
            sights.append(Sight(path, int(mode, 8), owner, int(folder_mode, 8), int(count or 0) > 0))
        return sights, gone


def assert_no_secret_exposed(sights: list[Sight], gone: set[str]) -> None:
    problems = [problem for sight in sights if (problem := sight.problem())]
    assert problems == [], problems
    # A file of ours that vanished before any look could not be checked: none may.
    seen = {sight.path for sight in sights}
    unchecked = sorted(path for path in gone - seen if "gpu-node" in path or "pyinfra" in path)
    assert unchecked == [], unchecked


@pytest.fixture(scope="module")
def ssh(image, tmp_path_factory):
    """One SSH node for the file: (node, inventory)."""
    folder = tmp_path_factory.mktemp("ssh")
    keys = Keys(folder / "keys")
    (port,) = free_ports(1)
    node = SshNode(image=ssh_node_image(image), port=port, name="gpu-ssh")
    keys.trust(port)
    node.start_ssh(keys, user=LOGIN_USER)
    try:
        yield node, write_inventory(folder / "inventory.py", node.endpoints(), keys, user=None)
    finally:
        node.remove()


def pyinfra_over_ssh(inventory, data: dict, extra: tuple[str, ...] = ()) -> list[str]:
    """The README's command: `pyinfra INVENTORY deploy/gpu_node.py --ssh-user USER --sudo`, with -y
    (and --json, unless ``extra`` asks for --diff: the diff is logged as pyinfra's text output)."""
    json_output = () if "--diff" in extra else ("--json",)
    args = [
        sys.executable,
        "-m",
        "pyinfra",
        "-y",
        *json_output,
        str(inventory),
        "deploy/gpu_node.py",
        "--ssh-user",
        LOGIN_USER,
        "--sudo",
        *extra,
    ]
    for key, value in {**SAFE_DATA, **data}.items():
        args += ["--data", f"{key}={value}"]
    return args


def deploy_over_ssh(inventory, data: dict, extra: tuple[str, ...] = ()) -> DeployResult:
    args = pyinfra_over_ssh(inventory, data, extra)
    env = {key: value for key, value in os.environ.items() if key != "GPU_NODES"}
    result = run(args, check=False, cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1"}, timeout=1200)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def secret_holders(node) -> list[str]:
    """Every file under the watched folders that holds a secret now: 'mode owner folder-mode path'."""
    out = node.sh(
        f"grep -rlsF -e {REGISTRY_PASSWORD} -e {MIRROR_PASSWORD} {' '.join(WATCHED)} "
        '| while read -r f; do echo "$(stat -c \'%a %U\' "$f") $(stat -c %a "${f%/*}") $f"; done',
        check=False,
    ).stdout
    return sorted(out.splitlines())


def test_a_sudo_run_over_ssh_never_lets_others_read_the_registry_credentials_and_diff_masks_them(ssh, toolkit_repo):
    node, inventory = ssh
    node.write(CONFIG, SEEDED, mode="600")
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}
    started = time.monotonic()
    with Watcher(node) as watcher:
        first = deploy_over_ssh(inventory, data, extra=("--diff", "-v"))
    assert first.returncode == 0, first.explain()
    assert f"containerd | Wire the nvidia runtime into {CONFIG}" in first.changed_operations()
    sights, gone = watcher.sights()
    assert_no_secret_exposed(sights, gone)
    # The watcher saw the secret travel: in the staging folder, beside the live file, in place.
    holders = {sight.path for sight in sights if sight.secret}
    assert any(re.fullmatch(r"/tmp/pyinfra-gpu-node-[0-9a-f]{32}/\d+", path) for path in holders), holders
    assert CONFIG + ".gpu-node-check" in holders and CONFIG + CANDIDATE_SUFFIX in holders and CONFIG in holders
    # What stays holding it: the config and its backup, both 0600 root in root's folder.
    (backup,) = [line for line in secret_holders(node) if BACKUP_INFIX in line]
    assert secret_holders(node) == sorted([f"600 root 755 {CONFIG}", backup])
    assert backup.startswith("600 root 755 ")
    # --diff shows the change, and neither password nor the mirror URL's user-info
    assert REGISTRY_PASSWORD not in first.output and MIRROR_PASSWORD not in first.output
    assert "mirror-robot" not in first.output
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in first.output
    diff = first.output[first.output.find("Will modify") :][:3000]
    assert '.auth.password = "***"' in diff and "https://***@mirror.example.internal" in diff, diff
    print(f"first run over SSH, watched: {time.monotonic() - started:.0f} s")

    second = deploy_over_ssh(inventory, data)
    assert_no_change(second)


def test_a_run_killed_right_after_its_upload_leaves_the_secret_readable_by_no_one_else(ssh, toolkit_repo):
    node, inventory = ssh
    data = {"stages": "runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}
    node.write(CONFIG, SEEDED, mode="600")  # unwired again: the next run uploads
    node.sh(f"mkdir -p {TEST_DIR}/held && chown {LOGIN_USER} {TEST_DIR}/held && touch {HOLD}")
    node.write("/usr/local/bin/sudo", SUDO_HOLD, mode="755")
    before = secret_holders(node)
    try:
        with Watcher(node) as watcher:
            args = pyinfra_over_ssh(inventory, data)
            env = {key: value for key, value in os.environ.items() if key != "GPU_NODES"}
            process = subprocess.Popen(
                args,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            try:
                wait_for(
                    lambda: node.exists(HELD) or process.poll() is not None,
                    timeout=600,
                    what="the run to reach the hold",
                )
                assert process.poll() is None, process.communicate()[0][-4000:]
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                output = process.communicate(timeout=60)[0]
            node.sh(f"kill -9 $(cat {HELD})", check=False)  # the remote shell the killed run left
    finally:
        node.sh(f"rm -f /usr/local/bin/sudo {HOLD} {HELD}")
    sights, gone = watcher.sights()
    assert_no_secret_exposed(sights, gone)
    left = [line for line in secret_holders(node) if line not in before]
    # What the killed run left: its upload, in the login user's 0700 folder, 0600.
    (staged,) = left
    mode, owner, folder_mode, path = staged.split()
    assert (mode, owner, folder_mode) == ("600", LOGIN_USER, "700"), (staged, output[-3000:])
    assert re.fullmatch(r"/tmp/pyinfra-gpu-node-[0-9a-f]{32}/0", path)
    assert not node.exists(CONFIG + ".gpu-node-check") and not node.exists(CONFIG + CANDIDATE_SUFFIX)
    assert node.read(CONFIG) == SEEDED

    after = deploy_over_ssh(inventory, data)
    assert after.returncode == 0, after.explain()
    assert_no_change(deploy_over_ssh(inventory, data))


def one_line_naming(result: DeployResult, text: str) -> str:
    lines = result.run_lines(text)
    assert len(lines) == 1, (lines, result.explain())
    return lines[0]


def test_a_swap_the_disk_has_no_room_for_fails_in_one_line_and_leaves_the_config_alone(ssh, toolkit_repo):
    """/etc/containerd on a small tmpfs with one page free: the check copy, then the candidate fit,
    the backup does not. Before, a 0-byte backup and the candidate stayed beside the config."""
    node, inventory = ssh
    data = {"stages": "runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}
    node.sh("mount -t tmpfs -o size=64k,mode=755 tmpfs /etc/containerd")
    try:
        node.write(CONFIG, SEEDED, mode="600")
        before = node.stat(CONFIG)
        node.sh(
            "cd /etc/containerd && dd if=/dev/zero of=filler bs=4096 count=$(( $(stat -f -c %a .) - 1 )) 2>/dev/null"
        )
        result = deploy_over_ssh(inventory, data)
        assert result.returncode != 0
        line = one_line_naming(result, "No space left on device")
        assert f"gpu-node: could not back up {CONFIG}: " in line and line.endswith(f"{CONFIG} was not changed")
        node.sh("rm /etc/containerd/filler")
        assert node.sh("ls -A /etc/containerd").stdout.split() == ["config.toml"]
        assert node.stat(CONFIG) == before
    finally:
        node.sh("umount /etc/containerd")


def test_a_symlinked_config_is_refused_in_one_line_and_its_target_edited_when_the_setting_names_it(ssh, toolkit_repo):
    node, inventory = ssh
    data = {"stages": "runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}
    target = "/srv/site/containerd.toml"
    wired = node.read(CONFIG)
    node.write(target, SEEDED, mode="600")
    node.sh(f"mv {CONFIG} /srv/site/wired.toml && ln -s {target} {CONFIG}")
    try:
        before, listed = node.stat(target), node.sh("ls -A /etc/containerd /srv/site").stdout
        refused = deploy_over_ssh(inventory, data)
        assert refused.returncode != 0
        line = one_line_naming(refused, "is a symbolic link")
        assert f"gpu-node: {CONFIG} is a symbolic link (to {target}): not changed;" in line
        assert node.sh(f"readlink {CONFIG}").stdout.strip() == target and node.stat(target) == before
        assert node.sh("ls -A /etc/containerd /srv/site").stdout == listed  # nothing beside either

        # The way the line gives: the setting names the file the link points to.
        pointed = {**data, "containerd_config_path": target}
        edited = deploy_over_ssh(inventory, pointed)
        assert edited.returncode == 0, edited.explain()
        assert node.sh(f"readlink {CONFIG}").stdout.strip() == target
        assert "nvidia-container-runtime" in node.read(target) and node.read(target).startswith(SEEDED)
        assert_no_change(deploy_over_ssh(inventory, pointed))
    finally:
        node.sh(f"rm -f {CONFIG} && mv /srv/site/wired.toml {CONFIG}")
    assert node.read(CONFIG) == wired
