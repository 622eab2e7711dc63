"""
A STAND-IN for NVIDIA's container toolkit, served from a local signed apt repository.

NVIDIA's package repository cannot be reached from the test machines (DESIGN.md section 5),
so tests and the demo build four packages with the real toolkit's names and file layout,
whose ``/usr/bin/nvidia-container-runtime`` appends its arguments to a log and execs
``runc``. containerd and dockerd then run real containers through it, and the log proves
the wiring. The repository has NVIDIA's layout (``<base>/deb/<arch>/``, a flat repository)
and is signed with a throwaway GPG key; it is served on 127.0.0.1 only.

Beside it, the faults a repository can have, for the failure tests: a key URL that serves an
HTML error page or an empty body, a key that did not sign the repository, a copy of the
repository whose InRelease was altered after signing (``tampered``), a port with nothing
listening (``refused_url``) and a server that accepts connections and never answers
(``silent_server``).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import socket
import subprocess
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

STANDIN_LOG = "/var/log/nvidia-container-runtime-standin.log"
VERSIONS = ("1.17.7-1", "1.17.8-1")  # two, so a pin to the older one is observable

RUNTIME_SCRIPT = f"""#!/bin/sh
# STAND-IN nvidia-container-runtime (gpu-node tests): log the call, then run runc.
echo "$(date +%s) $*" >> {STANDIN_LOG}
exec runc "$@"
"""


def _ctk_script(version: str) -> str:
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nvidia-ctk (gpu-node tests)
        echo "NVIDIA Container Toolkit CLI version {version.split('-')[0]} (stand-in for tests)"
        """
    )


def _cli_script(version: str) -> str:
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nvidia-container-cli (gpu-node tests)
        echo "cli-version: {version.split('-')[0]}"
        echo "lib-version: {version.split('-')[0]} (stand-in for tests)"
        """
    )


def _packages(version: str) -> dict[str, tuple[str, dict[str, str]]]:
    """package -> (Depends, {path: content})"""
    return {
        "libnvidia-container1": ("", {"/usr/share/doc/libnvidia-container1/STAND-IN": "stand-in\n"}),
        "libnvidia-container-tools": (
            f"libnvidia-container1 (= {version})",
            {"/usr/bin/nvidia-container-cli": _cli_script(version)},
        ),
        "nvidia-container-toolkit-base": (
            "",
            {
                "/usr/bin/nvidia-container-runtime": RUNTIME_SCRIPT,
                "/usr/bin/nvidia-ctk": _ctk_script(version),
            },
        ),
        "nvidia-container-toolkit": (
            f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (= {version})",
            {"/usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\n# STAND-IN hook\nexit 0\n"},
        ),
    }


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


def build_deb(out_dir: Path, name: str, version: str, depends: str, files: dict[str, str], arch: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"standin-{name}-"))
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
        control.append(f"Description: STAND-IN for tests, not NVIDIA's {name}")
        control.append(" Built by gpu-node's test suite; its runtime logs each call and execs runc.")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        deb = out_dir / f"{name}_{version}_{arch}.deb"
        _run("dpkg-deb", "--root-owner-group", "--build", str(root), str(deb))
        return deb
    finally:
        shutil.rmtree(root)


@dataclass
class GpgKey:
    home: Path
    fingerprint: str

    def armored_public_key(self) -> str:
        return _run("gpg", "--homedir", str(self.home), "--armor", "--export", self.fingerprint).stdout


def make_key(home: Path, name: str) -> GpgKey:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _run("gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key",
         f"{name} <{name}@localhost>", "rsa3072", "sign", "never")
    listing = _run("gpg", "--homedir", str(home), "--with-colons", "--list-secret-keys").stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    return GpgKey(home, fingerprint)


@dataclass
class StandinRepo:
    root: Path  # served as the repository base, NVIDIA's ".../stable"
    key: GpgKey
    other_key: GpgKey  # a key that did not sign the repository
    versions: tuple[str, ...] = VERSIONS


def build_repo(root: Path, arch: str = "amd64") -> StandinRepo:
    """Build the signed flat repository at ``root/deb/<arch>`` and two keys beside it."""
    repo_dir = root / "deb" / arch
    repo_dir.mkdir(parents=True, exist_ok=True)
    for version in VERSIONS:
        for name, (depends, files) in _packages(version).items():
            build_deb(repo_dir, name, version, depends, files, arch)
    packages = _run("apt-ftparchive", "packages", ".", cwd=repo_dir).stdout
    (repo_dir / "Packages").write_text(packages)
    release = _run(
        "apt-ftparchive",
        "-o", "APT::FTPArchive::Release::Origin=gpu-node stand-in",
        "-o", "APT::FTPArchive::Release::Label=STAND-IN nvidia-container-toolkit",
        "release", ".", cwd=repo_dir,
    ).stdout
    (repo_dir / "Release").write_text(release)
    keys = root.parent / f"{root.name}-gnupg"
    key = make_key(keys / "signing", "standin-signing")
    other = make_key(keys / "other", "standin-other")
    _run("gpg", "--homedir", str(key.home), "--batch", "--yes", "--local-user", key.fingerprint,
         "--clearsign", "-o", str(repo_dir / "InRelease"), str(repo_dir / "Release"))
    _run("gpg", "--homedir", str(key.home), "--batch", "--yes", "--local-user", key.fingerprint,
         "-abs", "-o", str(repo_dir / "Release.gpg"), str(repo_dir / "Release"))
    (root / "gpgkey").write_text(key.armored_public_key())
    (root / "wrong-gpgkey").write_text(other.armored_public_key())
    # The same key unarmoured, as some mirrors serve it.
    (root / "gpgkey.bin").write_bytes(
        subprocess.run(["gpg", "--homedir", str(key.home), "--export", key.fingerprint],
                       check=True, capture_output=True).stdout
    )
    _write_faults(root, repo_dir, arch)
    for home in (key.home, other.home):
        # gpg starts an agent per home folder; nothing needs it once the repository is signed.
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    return StandinRepo(root=root, key=key, other_key=other)


GARBAGE_KEY_PAGE = "<html><head><title>502 Bad Gateway</title></head><body>proxy error</body></html>\n"
TAMPERED = "tampered"  # the served path of the repository copy whose InRelease fails its signature


def _write_faults(root: Path, repo_dir: Path, arch: str) -> None:
    """Key URLs that return no key, and a copy of the repository with a broken signature."""
    (root / "garbage-gpgkey").write_text(GARBAGE_KEY_PAGE)
    (root / "empty-gpgkey").write_text("")
    tampered = root / TAMPERED / "deb" / arch
    tampered.mkdir(parents=True, exist_ok=True)
    for item in repo_dir.iterdir():
        if item.name not in ("InRelease", "Release.gpg"):
            shutil.copy2(item, tampered / item.name)
    # Changed after signing: the clearsigned text no longer matches its signature (apt: BADSIG).
    signed = (repo_dir / "InRelease").read_text()
    (tampered / "InRelease").write_text(signed.replace("Label: STAND-IN", "Label: ALTERED", 1))


def refused_url() -> str:
    """A URL on 127.0.0.1 whose port has nothing listening: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@contextlib.contextmanager
def silent_server():
    """A server on 127.0.0.1 that accepts connections and never answers; yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_hold():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept_and_hold, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


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
    base_url: str, *, wrong_key: bool = False, version: str | None = None,
    key: str | None = None, repo_url: str | None = None, key_url: str | None = None,
) -> dict[str, str]:
    """
    The settings that point the toolkit stage at a served stand-in repository: ``key`` names
    another key file beside it (``wrong-gpgkey``, ``garbage-gpgkey``, ``empty-gpgkey``);
    ``repo_url`` / ``key_url`` replace either URL whole (a tampered copy, a dead server).
    """
    key = key or ("wrong-gpgkey" if wrong_key else "gpgkey")
    data = {
        "nvidia_toolkit_repo_url": repo_url or base_url,
        "nvidia_toolkit_gpgkey_url": key_url or f"{base_url}/{key}",
        "allow_insecure_repositories": "true",
    }
    if version:
        data["nvidia_toolkit_version"] = version
    return data


if __name__ == "__main__":
    # Build and serve a repository by hand: python tests/standin_toolkit.py
    import time

    workdir = Path(tempfile.mkdtemp(prefix="standin-toolkit-"))
    build_repo(workdir / "stable")
    with serve(workdir / "stable") as url:
        print(f"STAND-IN toolkit repository at {url} (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
