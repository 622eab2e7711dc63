"""
A scratch root to run rendered commands and scripts in, for real and confined to a folder.

The root is a chroot holding dash as ``/bin/sh`` and this machine's own coreutils, sed, grep, awk
and find (with the libraries they link), and nothing else: a command gpu-node would run on a node
runs here as root, but every path it touches is under the folder, and every other program
(systemctl, apt-get, containerd, curl ...) is absent, so "not found": nothing reaches the machine,
its services or the network. A hostile value that escaped its quoting runs its payload (a file
appears where the payload writes it); a value that broke a command (split into words, ended a
quote, started a comment) leaves other files than the same command given a plain value.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# The machine's own tools the rendered commands use to do their work (file moves, links, text
# edits, checks); the rest stays absent on purpose.
TOOLS = (
    "awk",
    "base64",
    "basename",
    "cat",
    "chmod",
    "chown",
    "cmp",
    "cp",
    "cut",
    "date",
    "dirname",
    "echo",
    "env",
    "false",
    "find",
    "grep",
    "head",
    "id",
    "install",
    "ln",
    "ls",
    "mkdir",
    "mknod",
    "mktemp",
    "mv",
    "od",
    "printf",
    "readlink",
    "realpath",
    "rm",
    "rmdir",
    "sed",
    "sha256sum",
    "sleep",
    "sort",
    "stat",
    "sync",
    "tail",
    "tee",
    "test",
    "timeout",
    "touch",
    "tr",
    "true",
    "uniq",
    "wc",
    "xargs",
)
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A timestamp or a mktemp name in a path: differs from run to run, not from value to value.
VOLATILE = re.compile(r"\d{8}T\d{6}|tmp\.[A-Za-z0-9]{10}|gpu-node-[0-9a-f]{32}")


def _libraries(binary: str) -> list[str]:
    listing = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return re.findall(r"(/\S+) \(0x", listing)


def build_template(root: Path) -> Path:
    """The root every sandbox is cloned from: dash, the TOOLS, their libraries, /dev/null."""
    for folder in ("bin", "usr/bin", "dev", "tmp", "etc", "root", "var/tmp", "run"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    binaries = {"/bin/sh": shutil.which("dash")}
    binaries.update({f"/usr/bin/{tool}": shutil.which(tool) for tool in TOOLS if shutil.which(tool)})
    for inside, outside in binaries.items():
        real = os.path.realpath(outside)
        shutil.copy2(real, root / inside.lstrip("/"))
        for library in _libraries(real):
            target = root / library.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                shutil.copy2(os.path.realpath(library), target)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    os.mknod(root / "dev/null", 0o20666, os.makedev(1, 3))
    (root / "dev/null").chmod(0o666)
    return root


REPLAY = "/.replay"  # the replay's own files inside the root, left out of ``tree``
# Runs the steps in order, inside the root: each command as its own sh (bounded), each upload copied
# to its path. One chroot for a whole plan: a process per step from here would cost more than the steps.
REPLAY_SCRIPT = f"""i=0
while [ -e {REPLAY}/$i ]; do
    if [ -e {REPLAY}/$i.path ]; then
        IFS= read -r path < {REPLAY}/$i.path
        mkdir -p "$(dirname "$path")" && cp {REPLAY}/$i "$path"
        echo 0 > {REPLAY}/$i.status
    else
        sh -n {REPLAY}/$i 2> {REPLAY}/$i.syntax
        timeout {{timeout}} sh {REPLAY}/$i > /dev/null 2> {REPLAY}/$i.stderr < /dev/null
        echo $? > {REPLAY}/$i.status
    fi
    i=$((i + 1))
done
"""


@dataclass
class Ran:
    step: str
    status: int
    stderr: str
    syntax_error: str = ""


@dataclass
class Sandbox:
    """One clone of the template: replay a plan's steps in it, list what it holds."""

    root: Path
    runs: list[Ran] = field(default_factory=list)

    @classmethod
    def clone(cls, template: Path, root: Path) -> Sandbox:
        # Hard links: the tools are shared, the folders (and whatever a command writes) are its own.
        subprocess.run(["cp", "-al", str(template), str(root)], check=True)
        return cls(root)

    def replay(self, steps: list[tuple[str, bytes | None]], timeout: int = 5) -> list[Ran]:
        """Run ``steps`` in order: (a command, None) runs under sh; (``upload PATH``, its bytes) is
        written there as the connector would. Their exit statuses, stderr and sh's syntax complaints."""
        folder = self.root / REPLAY.lstrip("/")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for index, (step, upload) in enumerate(steps):
            if upload is None:
                (folder / str(index)).write_text(step)
            else:
                (folder / str(index)).write_bytes(upload)
                (folder / f"{index}.path").write_text(step.split(" ", 1)[1] + "\n")
        subprocess.run(
            ["chroot", str(self.root), "/bin/sh", "-c", REPLAY_SCRIPT.format(timeout=timeout)],
            check=True,
            cwd="/",
            env={"PATH": SEARCH_PATH, "HOME": "/root", "LC_ALL": "C"},
            timeout=timeout * (len(steps) + 2),
        )
        runs = []
        for index, (step, _) in enumerate(steps):

            def read(suffix: str, index: int = index) -> str:
                path = folder / f"{index}{suffix}"
                return path.read_text(errors="replace") if path.exists() else ""

            runs.append(Ran(step, int(read(".status")), read(".stderr"), read(".syntax").strip()))
        self.runs += runs
        return runs

    def run(self, command: str, timeout: int = 5) -> Ran:
        return self.replay([(command, None)], timeout)[0]

    def output(self, command: str, timeout: int = 30) -> str:
        """What ``command`` prints inside the root (a fact's read); it must succeed."""
        result = subprocess.run(
            [shutil.which("chroot") or "chroot", str(self.root), "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            cwd="/",
            timeout=timeout,
            env={"PATH": SEARCH_PATH, "HOME": "/root", "LC_ALL": "C"},
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def exists(self, path: str) -> bool:
        return os.path.lexists(self.root / path.lstrip("/"))

    def tree(self) -> set[tuple[str, str]]:
        """Every path under the root but the replay's own, as (path, kind or link target), with volatile
        names (timestamps, mktemp) folded."""
        entries = set()
        for folder, dirs, files in os.walk(self.root):
            for name in dirs + files:
                full = Path(folder) / name
                inside = "/" + str(full.relative_to(self.root))
                if inside == REPLAY or inside.startswith(REPLAY + "/"):
                    continue
                if full.is_symlink():
                    kind = "-> " + os.readlink(full)
                elif full.is_dir():
                    kind = "dir"
                else:
                    kind = "file"
                entries.add((VOLATILE.sub("<volatile>", inside), VOLATILE.sub("<volatile>", kind)))
        return entries
