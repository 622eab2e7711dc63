"""
The REAL NVIDIA Container Toolkit 1.20.0, published in a local signed apt repository on 127.0.0.1.

NVIDIA's package repository cannot be reached from the test machines, so the toolkit's real debs
(built from upstream tag v1.20.0) are kept in the test lab (tests/lab.py: env ``GPU_NODE_LAB``,
default ``../shared/lab``), under ``nvidia-container-toolkit/1.20.0/`` with their ``SHA256SUMS``.
This module checks them against those sums and publishes them with NVIDIA's layout (a flat
repository at ``<base>/deb/<arch>/``, the key at ``<base>/gpgkey``), signed by a throwaway GPG key
and served on 127.0.0.1 only. The deploy's toolkit stage then installs them exactly as it would
from NVIDIA: apt, gpg signature checks, pins and holds are all real, and so are the installed
``nvidia-ctk``, ``nvidia-container-runtime`` and ``nvidia-container-runtime-hook``.

Published: ``nvidia-container-toolkit``, ``nvidia-container-toolkit-base`` and
``nvidia-container-toolkit-operator-extensions`` 1.20.0-1 (real, from the lab), and
``libnvidia-container1`` and ``libnvidia-container-tools`` 1.20.0-1 as STAND-INS.

Why stand-ins for libnvidia-container: it was not built in the lab (the lab's
``nvidia-container-toolkit`` therefore only suggests ``libnvidia-container-tools`` where NVIDIA's
depends on it). The toolkit stage installs and pins the four packages together, as NVIDIA's install
guide does, so a repository without them would fail the stage. The two stand-ins carry the real
names and version, say STAND-IN in their description and in a notice under ``/usr/share/doc``, and
ship no ``nvidia-container-cli`` at all: nothing pretends to be libnvidia-container. They change
nothing at run time: the runtime's default mode (``auto``, which resolves to ``jit-cdi`` without a
GPU) runs a container that asks for no GPU without ``nvidia-container-cli``; a container that asks
for one fails, as it does on a node without a working driver. The tool itself is unchanged: against
NVIDIA's repository it installs the same four real packages.

The debug log of the real runtime is the proof that a container went through it: set
``[nvidia-container-runtime] debug`` on the node after the toolkit is installed
(``enable_runtime_debug_log``), then look for the runtime's ``create`` call for a container id
(``runtime_created``).

The repository's faults (bad keys, a tampered InRelease, dead servers), two versions for a pin
move and an unarmoured key are in tests/standin_toolkit.py: the real package cannot show them.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lab import lab_path, verified

VERSION = "1.20.0-1"
LAB_FOLDER = ("nvidia-container-toolkit", "1.20.0")
REAL_PACKAGES = (
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-operator-extensions",
)
STANDIN_LIBRARY_PACKAGES = ("libnvidia-container1", "libnvidia-container-tools")
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
RUNTIME_DEBUG_LOG = "/var/log/nvidia-container-runtime.log"


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


def lab_debs(arch: str = "amd64") -> list[Path]:
    """The lab's real toolkit debs, each checked against the folder's SHA256SUMS."""
    folder = lab_path(*LAB_FOLDER)
    return [verified(folder, f"{name}_{VERSION}_{arch}.deb") for name in REAL_PACKAGES]


# Fixed timestamps make a rebuilt deb byte-identical: node containers share one apt download cache
# (tests/harness.py), where a file of the same name must be the same file.
BUILD_EPOCH = 1700000000


def build_deb(out_dir: Path, name: str, version: str, depends: str, files: dict[str, str], arch: str,
              description: str) -> Path:
    """A small reproducible deb: ``files`` maps absolute paths to text (under /usr/bin/ executable)."""
    root = Path(tempfile.mkdtemp(prefix=f"deb-{name}-"))
    try:
        for path, content in files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(0o755 if path.startswith("/usr/bin/") else 0o644)
        (root / "DEBIAN").mkdir()
        control = [
            f"Package: {name}",
            f"Version: {version}",
            f"Architecture: {arch}",
            "Maintainer: gpu-node tests <tests@localhost>",
            "Section: utils",
            "Priority: optional",
        ]
        if depends:
            control.append(f"Depends: {depends}")
        control.append(f"Description: {description}")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        for path in [root, *root.rglob("*")]:
            os.utime(path, (BUILD_EPOCH, BUILD_EPOCH))
        deb = out_dir / f"{name}_{version}_{arch}.deb"
        _run("dpkg-deb", "--root-owner-group", "--build", str(root), str(deb),
             env={**os.environ, "SOURCE_DATE_EPOCH": str(BUILD_EPOCH)})
        return deb
    finally:
        shutil.rmtree(root)


def build_library_standins(out_dir: Path, arch: str = "amd64") -> list[Path]:
    """libnvidia-container1 and libnvidia-container-tools at the toolkit's version: STAND-INS that
    ship only a notice (no library, no nvidia-container-cli), so the four-package install resolves."""
    notice = (
        "STAND-IN published by gpu-node's tests: libnvidia-container was not built in the test lab.\n"
        "This package holds no library and no nvidia-container-cli. The NVIDIA Container Toolkit\n"
        "installed beside it is real (1.20.0).\n"
    )
    description = (
        "STAND-IN for tests, not NVIDIA's {name}\n"
        " libnvidia-container was not built in gpu-node's test lab; this package ships no files of it."
    )
    return [
        build_deb(out_dir, "libnvidia-container1", VERSION, "",
                  {"/usr/share/doc/libnvidia-container1/STAND-IN": notice}, arch,
                  description.format(name="libnvidia-container1")),
        build_deb(out_dir, "libnvidia-container-tools", VERSION, f"libnvidia-container1 (= {VERSION})",
                  {"/usr/share/doc/libnvidia-container-tools/STAND-IN": notice}, arch,
                  description.format(name="libnvidia-container-tools")),
    ]


@dataclass
class GpgKey:
    home: Path
    fingerprint: str

    def armored_public_key(self) -> str:
        return _run("gpg", "--homedir", str(self.home), "--armor", "--export", self.fingerprint).stdout

    def binary_public_key(self) -> bytes:
        return subprocess.run(["gpg", "--homedir", str(self.home), "--export", self.fingerprint],
                              check=True, capture_output=True).stdout

    def stop_agent(self) -> None:
        # gpg starts an agent per home folder; nothing needs it once the repository is signed.
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], check=False)


def make_key(home: Path, name: str) -> GpgKey:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _run("gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key",
         f"{name} <{name}@localhost>", "rsa3072", "sign", "never")
    listing = _run("gpg", "--homedir", str(home), "--with-colons", "--list-secret-keys").stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    return GpgKey(home, fingerprint)


def sign_flat_repository(repo_dir: Path, key: GpgKey, origin: str, label: str) -> None:
    """Index the debs in ``repo_dir`` (Packages, Release) and sign it (InRelease, Release.gpg)."""
    (repo_dir / "Packages").write_text(_run("apt-ftparchive", "packages", ".", cwd=repo_dir).stdout)
    release = _run(
        "apt-ftparchive",
        "-o", f"APT::FTPArchive::Release::Origin={origin}",
        "-o", f"APT::FTPArchive::Release::Label={label}",
        "release", ".", cwd=repo_dir,
    ).stdout
    (repo_dir / "Release").write_text(release)
    _run("gpg", "--homedir", str(key.home), "--batch", "--yes", "--local-user", key.fingerprint,
         "--clearsign", "-o", str(repo_dir / "InRelease"), str(repo_dir / "Release"))
    _run("gpg", "--homedir", str(key.home), "--batch", "--yes", "--local-user", key.fingerprint,
         "-abs", "-o", str(repo_dir / "Release.gpg"), str(repo_dir / "Release"))


@dataclass
class ToolkitRepo:
    root: Path  # served as the repository base, NVIDIA's ".../stable"
    key: GpgKey
    version: str = VERSION
    packages: dict[str, str] = field(default_factory=dict)  # package -> "real" or "stand-in"


def build_repo(root: Path, arch: str = "amd64") -> ToolkitRepo:
    """Publish the lab's real toolkit debs (and the two library stand-ins) at ``root/deb/<arch>``,
    signed; the armoured public key at ``root/gpgkey``. Raises lab.LabMissing without the lab."""
    debs = lab_debs(arch)
    repo_dir = root / "deb" / arch
    repo_dir.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        shutil.copyfile(deb, repo_dir / deb.name)
    build_library_standins(repo_dir, arch)
    key = make_key(root.parent / f"{root.name}-gnupg", "gpu-node-tests-toolkit-signing")
    sign_flat_repository(repo_dir, key, origin="gpu-node tests",
                         label="NVIDIA Container Toolkit 1.20.0 (lab build; libnvidia-container STAND-IN)")
    (root / "gpgkey").write_text(key.armored_public_key())
    key.stop_agent()
    packages = {name: "real" for name in REAL_PACKAGES} | {name: "stand-in" for name in STANDIN_LIBRARY_PACKAGES}
    return ToolkitRepo(root=root, key=key, packages=packages)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve a folder on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def deploy_data(
    base_url: str, *, version: str | None = None, key: str = "gpgkey",
    repo_url: str | None = None, key_url: str | None = None,
) -> dict[str, str]:
    """The settings that point the toolkit stage at a served repository (this one or the stand-in's):
    ``key`` names another key file beside it; ``repo_url`` / ``key_url`` replace either URL whole."""
    data = {
        "nvidia_toolkit_repo_url": repo_url or base_url,
        "nvidia_toolkit_gpgkey_url": key_url or f"{base_url}/{key}",
        "allow_insecure_repositories": "true",  # http:// on 127.0.0.1; the signature is still checked
    }
    if version:
        data["nvidia_toolkit_version"] = version
    return data


# --- On a node, after the toolkit stage: the real runtime's debug log. ------------------------------


def enable_runtime_debug_log(node) -> None:
    """Have the real nvidia-container-runtime log each call at debug level (test-side setup, as an
    admin would do it: NVIDIA's own ``nvidia-ctk config --set``). It reads its config on every call."""
    node.sh(f"nvidia-ctk config --config-file={RUNTIME_CONFIG} --in-place "
            f"--set nvidia-container-runtime.debug={RUNTIME_DEBUG_LOG} "
            "--set nvidia-container-runtime.log-level=debug")


def runtime_log(node) -> list[dict]:
    """The runtime's debug log, one JSON record per line (``level``, ``msg``, ``time``)."""
    text = node.sh(f"cat {RUNTIME_DEBUG_LOG} 2>/dev/null || true").stdout
    records = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


BUNDLE = "Using bundle directory: "
CREATE = "Create command detected"


def runtime_created(node, container_id: str) -> bool:
    """Whether the real runtime handled ``create`` for this container id: its record of the bundle
    directory (``.../<id>``, only ``create`` passes ``--bundle``) followed by its "Create command
    detected; applying OCI specification modifications" before the next bundle it was given."""
    messages = [record.get("msg", "") for record in runtime_log(node)]
    for index, message in enumerate(messages):
        if message.startswith(BUNDLE) and message.rstrip("/").endswith(f"/{container_id}"):
            following = [m for m in messages[index + 1:] if m.startswith((BUNDLE, CREATE))]
            if following and following[0].startswith(CREATE):
                return True
    return False


if __name__ == "__main__":
    # Build and serve the repository by hand: python tests/toolkit_repo.py
    import time

    workdir = Path(tempfile.mkdtemp(prefix="toolkit-repo-"))
    repo = build_repo(workdir / "stable")
    with serve(workdir / "stable") as url:
        print(f"NVIDIA Container Toolkit {repo.version} repository at {url} (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
