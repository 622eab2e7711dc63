"""
Real node containers for end-to-end tests (docs/contributing.md, "The node containers").

A node is a systemd Debian bookworm container started with the documented flags; the
deploy runs against it through pyinfra's real CLI (`pyinfra -y @docker/<id> ...`), as a
user would, and the container is removed by id afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from build_lock import built_once

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache"
COMPILER_CACHE = CACHE / "ccache"
# Data every test run uses: never touch the machine's kernel, never reboot.
SAFE_DATA = {"kernel_modules_load": "false", "reboot_allowed": "false"}

NODE_RUN_FLAGS = [
    "--network",
    "host",
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--device-cgroup-rule",
    "a *:* rwm",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    # Anonymous volumes keep nested container storage off overlayfs.
    "-v",
    "/var/lib/containerd",
    "-v",
    "/var/lib/docker",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
]


def run(args, check=True, **kwargs) -> subprocess.CompletedProcess:
    # pyinfra's import monkey-patches subprocess with gevent's, which refuses
    # capture_output next to an explicit stdout/stderr: capture only what is not given.
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    result = subprocess.run(args, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(
            f"command failed ({result.returncode}): {shlex.join(map(str, args))}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def ensure_docker() -> None:
    run(["bash", str(REPO / "scripts" / "ensure-dockerd.sh")], stdout=None, stderr=None)


def node_image() -> str:
    with built_once("node-image"):
        return run(["bash", str(REPO / "scripts" / "build-node-image.sh")], stderr=None).stdout.strip()


class AptCache:
    """
    Downloaded .debs shared between node containers: real apt, one download per package.

    Each node gets its own archives folder, hard-linked from the shared one, so nodes
    running at the same time never contend for apt's archive lock; new downloads are
    linked back when the node is removed.
    """

    shared = CACHE / "apt-archives"

    def __init__(self) -> None:
        self.shared.mkdir(parents=True, exist_ok=True)
        (CACHE / "apt-nodes").mkdir(parents=True, exist_ok=True)
        self.own = Path(tempfile.mkdtemp(prefix="node-", dir=CACHE / "apt-nodes"))
        (self.own / "partial").mkdir()
        for deb in self.shared.glob("*.deb"):
            os.link(deb, self.own / deb.name)

    def volumes(self) -> list[str]:
        return ["-v", f"{self.own}:/var/cache/apt/archives"]

    def release(self) -> None:
        for deb in self.own.glob("*.deb"):
            with contextlib.suppress(FileExistsError):
                os.link(deb, self.shared / deb.name)
        shutil.rmtree(self.own, ignore_errors=True)


def busybox_image_tar(image: str, applets: tuple[str, ...], entrypoint: list[str] | None = None) -> Path:
    """
    `docker save` of a FROM-scratch image holding Debian's static busybox (and ``applets`` as
    links to it), for containers nested in a node: built once per image name, cached.
    """
    folder = CACHE / "images"
    tar = folder / (image.replace("/", "_").replace(":", "_") + ".tar")
    with built_once(tar.name):
        if not tar.exists():
            _save_busybox_image(folder, tar, image, applets, entrypoint)
    return tar


def _save_busybox_image(
    folder: Path, tar: Path, image: str, applets: tuple[str, ...], entrypoint: list[str] | None
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    debs = sorted(folder.glob("busybox-static_*.deb"))
    if not debs:
        run(["apt-get", "download", "busybox-static"], cwd=folder)
        debs = sorted(folder.glob("busybox-static_*.deb"))
    with tempfile.TemporaryDirectory() as workdir:
        extracted, rootfs = Path(workdir) / "deb", Path(workdir) / "rootfs"
        run(["dpkg-deb", "-x", str(debs[-1]), str(extracted)])
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(extracted / "bin" / "busybox", rootfs / "bin" / "busybox")
        for applet in applets:
            (rootfs / "bin" / applet).symlink_to("busybox")
        archive = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True).stdout
        changes = ["-c", f"ENTRYPOINT {json.dumps(entrypoint)}"] if entrypoint else []
        run(["docker", "import", *changes, "-", image], input=archive, text=False)
    partial = tar.with_suffix(".partial")
    run(["docker", "save", "-o", str(partial), image])
    partial.rename(tar)


# The kernel DKMS builds for in a Debian node: the one whose headers the metapackage the driver stage
# installs (linux-headers-amd64) brings.
DEBIAN_HEADERS_KERNEL = (
    "dpkg-query -W -f '${Depends}' linux-headers-amd64 2>/dev/null | tr ',' '\\n' "
    "| sed -n 's/^ *linux-headers-\\([^ ]*\\).*/\\1/p'"
)


def keep_dkms_builds(node: Node, folder: Path) -> list[Path]:
    """
    DKMS's own tarball (``dkms mktarball --binaries-only``) of each module the node built for the kernel
    of Debian's headers metapackage, into ``folder/<module>/<module>-<version>.dkms.tar.gz``: the name a
    DKMS package's postinst loads prebuilt modules from (load_dkms_builds). What was kept before stays.
    """
    script = (
        f'kernel=$({DEBIAN_HEADERS_KERNEL}); [ -n "$kernel" ] || exit 0; '
        'for built in /var/lib/dkms/*/*/"$kernel"/*/module; do [ -d "$built" ] || continue; '
        'version=${built%/"$kernel"/*}; module=${version%/*}; '
        'echo "${module##*/} ${version##*/} $kernel"; done'
    )
    kept = []
    for line in node.sh(script).stdout.splitlines():
        module, version, kernel = line.split()
        tarball = folder / module / f"{module}-{version}.dkms.tar.gz"
        if not tarball.exists():
            inside = f"/tmp/{tarball.name}"
            node.sh(
                f"dkms mktarball -m {shlex.quote(module)} -v {shlex.quote(version)} -k {shlex.quote(kernel)} "
                f"--binaries-only --archive {shlex.quote(inside)} >/dev/null"
            )
            tarball.parent.mkdir(parents=True, exist_ok=True)
            run(["docker", "cp", f"{node.id}:{inside}", str(tarball)])
        kept.append(tarball)
    return kept


def load_dkms_builds(node: Node, folder: Path) -> None:
    """The tarballs keep_dkms_builds kept, where a DKMS package's postinst looks for prebuilt modules
    (``/usr/share/<module>-dkms/``, dh_dkms' TARBALL_ROOT): installing the package then loads that build
    (``dkms ldtarball``) instead of compiling the same module for the same kernel again."""
    for tarball in sorted(folder.glob("*/*.dkms.tar.gz")):
        root = f"/usr/share/{tarball.parent.name}-dkms"
        node.sh(f"mkdir -p {shlex.quote(root)}")
        run(["docker", "cp", str(tarball), f"{node.id}:{root}/{tarball.name}"])


def sid_containerd_deb() -> Path:
    """sid's containerd 2.x .deb, fetched once with a throwaway apt config (the machine's sources untouched)."""
    from containerd_releases import containerd_deb

    return containerd_deb("sid")


@dataclass
class DeployResult:
    returncode: int
    stdout: str
    stderr: str
    args: list[str]
    report: dict | None = None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def results(self) -> dict:
        """pyinfra's --json results (the run must have used json=True)."""
        return json.loads(self.stdout)["results"]

    def _text_results(self) -> list[tuple[str, int, int]]:
        """(operation, hosts changed, hosts failed) from the "--> Results:" table a run without --json
        prints."""
        if "--> Results:" not in self.output:
            return self._results_as_run()
        _, _, table = self.output.rpartition("--> Results:")
        rows = []
        for line in table.splitlines()[2:]:
            cells = line.split()
            if not cells or line.strip().startswith("-->"):
                break
            if len(cells) < 5 or line.strip().startswith("Grand total"):
                continue
            success, error = (0 if cell == "-" else int(cell) for cell in cells[-3:-1])
            rows.append((" ".join(cells[:-4]), success, error))
        return rows

    def _results_as_run(self) -> list[tuple[str, int, int]]:
        """The same rows from each operation's own lines, for a run every host failed (pyinfra prints no
        table then); a run that never began executing is no answer (no change would pass it)."""
        if "--> Beginning operation run..." not in self.output:
            raise AssertionError(f"pyinfra printed no results table: the run did not execute\n{self.explain()}")
        rows: dict[str, list[int]] = {}
        operation = None
        for line in re.sub(r"\x1b\[[0-9;]*m", "", self.run_output).splitlines():
            if line.startswith("--> Starting operation: "):
                operation = line.removeprefix("--> Starting operation: ").strip()
                rows.setdefault(operation, [0, 0])
            elif operation and line.startswith("    [") and "] " in line:
                status = line.split("] ", 1)[1]
                if status.startswith("Success"):
                    rows[operation][0] += 1
                elif status.startswith("Error"):
                    rows[operation][1] += 1
        return [(name, changed, failed) for name, (changed, failed) in rows.items()]

    def changed_operations(self) -> list[str]:
        if not self.stdout.lstrip().startswith("{"):
            return [name for name, changed, _ in self._text_results() if changed]
        return [op["name"] for op in self.results()["operations"] if op["success"]]

    def failed_operations(self) -> list[str]:
        if not self.stdout.lstrip().startswith("{"):
            return [name for name, _, failed in self._text_results() if failed]
        return [op["name"] for op in self.results()["operations"] if op["error"]]

    @property
    def run_output(self) -> str:
        """The run itself: the fleet report after it repeats each host's failure line."""
        return self.output.partition("--> Fleet report")[0]

    def run_lines(self, text: str) -> list[str]:
        """The lines of the run itself naming ``text``."""
        return [line for line in self.run_output.splitlines() if text in line]

    def explain(self) -> str:
        return f"$ {shlex.join(self.args)}\nexit {self.returncode}\n{self.stderr[-6000:]}"


@dataclass
class Node:
    image: str
    extra_run_args: list[str] = field(default_factory=list)
    share_apt_cache: bool = True
    id: str = ""
    apt_cache: AptCache | None = None
    # PID 1: systemd, as a node boots; anything else makes a plain container (no boot to wait for)
    init: tuple[str, ...] = ("/sbin/init",)
    # how long the boot may take: a boot that runs cloud-init's user data waits for it
    boot_timeout: float = 120

    def start(self) -> Node:
        volumes = []
        if self.share_apt_cache:
            self.apt_cache = AptCache()
            # the node image's compiler cache (scripts/build-node-image.sh): one for all nodes
            COMPILER_CACHE.mkdir(parents=True, exist_ok=True)
            volumes = [*self.apt_cache.volumes(), "-v", f"{COMPILER_CACHE}:/var/cache/gpu-node-tests-ccache"]
        self.id = run(
            ["docker", "run", "-d", *NODE_RUN_FLAGS, *volumes, *self.extra_run_args, self.image, *self.init]
        ).stdout.strip()
        if self.init != ("/sbin/init",):
            return self
        try:
            # Until PID 1 serves its bus, systemctl prints nothing or "offline".
            state = wait_for(
                lambda: self._booted_state(),
                timeout=self.boot_timeout,
                what=f"systemd in node {self.id[:12]}",
            )
            if state not in ("running", "degraded"):
                raise AssertionError(f"node {self.id[:12]} did not boot: {state}")
            self.trust_test_ca()
        except BaseException:
            self.remove()
            raise
        return self

    def trust_test_ca(self) -> None:
        """The node trusts tests/tls.py's throwaway CA: the local repositories serve their keys over https."""
        from tls import NODE_CA_BUNDLE, authority

        run(
            [
                "docker",
                "exec",
                "-i",
                self.id,
                "sh",
                "-c",
                f"mkdir -p {os.path.dirname(NODE_CA_BUNDLE)} && cat >> {NODE_CA_BUNDLE}",
            ],
            input=authority().ca_pem,
        )

    def _booted_state(self) -> str | None:
        state = self.sh("systemctl is-system-running --wait", check=False, timeout=self.boot_timeout).stdout.strip()
        return None if state in ("", "offline") else state

    def remove(self) -> None:
        if self.id:
            run(["docker", "rm", "-f", "-v", self.id], check=False)
        if self.apt_cache:
            self.apt_cache.release()

    @property
    def target(self) -> str:
        return f"@docker/{self.id}"

    def sh(self, script: str, check: bool = True, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        return run(["docker", "exec", self.id, "sh", "-c", script], check=check, timeout=timeout, **kwargs)

    def read(self, path: str) -> str:
        return self.sh(f"cat {shlex.quote(path)}").stdout

    def write(self, path: str, content: str, mode: str = "644") -> None:
        quoted = shlex.quote(path)
        run(
            [
                "docker",
                "exec",
                "-i",
                self.id,
                "sh",
                "-c",
                f"mkdir -p $(dirname {quoted}) && cat > {quoted} && chmod {mode} {quoted}",
            ],
            input=content,
        )

    def exists(self, path: str) -> bool:
        return self.sh(f"test -e {shlex.quote(path)}", check=False).returncode == 0

    def stat(self, path: str) -> str:
        """Mode, owner, size, mtime (ns) and checksum: equal before and after means untouched."""
        quoted = shlex.quote(path)
        return self.sh(f"stat -c '%a %U:%G %s %.9Y' {quoted} && sha256sum {quoted}").stdout

    def service(self, unit: str) -> dict:
        """What tells a restart: the active-enter timestamp, main PID and restart count."""
        out = self.sh(
            f"systemctl show {shlex.quote(unit)} -p ActiveState -p MainPID "
            "-p ActiveEnterTimestampMonotonic -p NRestarts"
        ).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def is_active(self, unit: str) -> bool:
        return self.sh(f"systemctl is-active {shlex.quote(unit)}", check=False).stdout.strip() == "active"

    def deploy_command(
        self,
        *,
        data: dict | None = None,
        deploy_file: str = "deploy/gpu_node.py",
        json_output: bool = True,
        extra_args: list[str] | None = None,
        default_mode: bool = False,
    ) -> tuple[list[str], dict]:
        """
        The pyinfra CLI call a user would make against this node, and its environment: with
        ``-y``, or in pyinfra's default mode (changes detected and shown, then confirmed).
        """
        merged = {**SAFE_DATA, **(data or {})}
        args = [sys.executable, "-m", "pyinfra"] + ([] if default_mode else ["-y"])
        # --json without -y prints the detected changes and exits: default mode reads the text results.
        if json_output and not default_mode:
            args.append("--json")
        args += [self.target, deploy_file]
        for key, value in merged.items():
            args += ["--data", f"{key}={value}"]
        args += extra_args or []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("GPU_NODES", None)
        return args, env

    def deploy(
        self,
        *,
        data: dict | None = None,
        deploy_file: str = "deploy/gpu_node.py",
        json_output: bool = True,
        extra_args: list[str] | None = None,
        timeout: float = 2400,
        default_mode: bool = False,
    ) -> DeployResult:
        args, env = self.deploy_command(
            data=data,
            deploy_file=deploy_file,
            json_output=json_output,
            extra_args=extra_args,
            default_mode=default_mode,
        )
        # The limit only stops a hung run: a DKMS build beside three other test processes on CI's two
        # cores took over 1500 s. Default mode shows the changes it detected and waits for enter.
        result = run(args, check=False, cwd=REPO, env=env, timeout=timeout, input="\n" if default_mode else None)
        return DeployResult(result.returncode, result.stdout, result.stderr, args)


# The operation that rewrites the first-boot unit's settings (deploy/tasks/boot.py), which record settings
# such as cdi: a run that changes one of them changes this file and restarts nothing.
BOOT_SETTINGS_OP = "First-boot unit | Put /etc/gpu-node/boot.json (the first-boot unit)"


def assert_no_change(result: DeployResult, status: int = 0) -> None:
    """The idempotence contract: a re-run succeeds and changes nothing. ``status`` 3: a GPU node still
    awaits the reboot its driver change needs (deploy/reports/exit_status.py), which a re-run does not take."""
    assert result.returncode == status, result.explain()
    changed = result.changed_operations()
    assert changed == [], f"a re-run changed: {changed}\n{result.explain()}"


def wait_for(predicate, timeout: float = 30, interval: float = 0.5, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
