"""
A local signed apt repository, as NVIDIA publishes its toolkit: a flat repository at
``<base>/deb/<arch>/`` and the armoured key at ``<base>/gpgkey``, signed by a throwaway GPG key and
served on 127.0.0.1 only (the repository over http, the key over https: ``serve_keys``). The toolkit the tests install (tests/toolkit_repo.py) and the stand-in
packages (tests/standin_toolkit.py) are published with it; apt, gpgv and the deploy's pins and
holds then run for real against it.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from tls import authority as tls_authority


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


# Fixed timestamps make a rebuilt deb byte-identical: node containers share one apt download cache
# (tests/harness.py), where a file of the same name must be the same file.
BUILD_EPOCH = 1700000000


def build_deb(
    out_dir: Path, name: str, version: str, depends: str, files: dict[str, str], arch: str, description: str
) -> Path:
    """A small reproducible deb: ``files`` maps absolute paths to text (under /usr/bin/ executable)."""
    root = Path(tempfile.mkdtemp(prefix=f"deb-{name}-"))
    try:
        for path, content in files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(0o755 if "/bin/" in path else 0o644)
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
        _run(
            "dpkg-deb",
            "--root-owner-group",
            "--build",
            str(root),
            str(deb),
            env={**os.environ, "SOURCE_DATE_EPOCH": str(BUILD_EPOCH)},
        )
        return deb
    finally:
        shutil.rmtree(root)


@dataclass
class GpgKey:
    home: Path
    fingerprint: str

    def armored_public_key(self) -> str:
        return _run("gpg", "--homedir", str(self.home), "--armor", "--export", self.fingerprint).stdout

    def binary_public_key(self) -> bytes:
        return subprocess.run(
            ["gpg", "--homedir", str(self.home), "--export", self.fingerprint], check=True, capture_output=True
        ).stdout

    def stop_agent(self) -> None:
        # gpg starts an agent per home folder; nothing needs it once the repository is signed.
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], check=False)


def make_key(home: Path, name: str) -> GpgKey:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    _run(
        "gpg",
        "--homedir",
        str(home),
        "--batch",
        "--passphrase",
        "",
        "--quick-gen-key",
        f"{name} <{name}@localhost>",
        "rsa3072",
        "sign",
        "never",
    )
    listing = _run("gpg", "--homedir", str(home), "--with-colons", "--list-secret-keys").stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    return GpgKey(home, fingerprint)


def sign_flat_repository(repo_dir: Path, key: GpgKey, origin: str, label: str) -> None:
    """Index the debs in ``repo_dir`` (Packages, Release) and sign it (InRelease, Release.gpg)."""
    (repo_dir / "Packages").write_text(_run("apt-ftparchive", "packages", ".", cwd=repo_dir).stdout)
    release = _run(
        "apt-ftparchive",
        "-o",
        f"APT::FTPArchive::Release::Origin={origin}",
        "-o",
        f"APT::FTPArchive::Release::Label={label}",
        "release",
        ".",
        cwd=repo_dir,
    ).stdout
    (repo_dir / "Release").write_text(release)
    _run(
        "gpg",
        "--homedir",
        str(key.home),
        "--batch",
        "--yes",
        "--local-user",
        key.fingerprint,
        "--clearsign",
        "-o",
        str(repo_dir / "InRelease"),
        str(repo_dir / "Release"),
    )
    _run(
        "gpg",
        "--homedir",
        str(key.home),
        "--batch",
        "--yes",
        "--local-user",
        key.fingerprint,
        "-abs",
        "-o",
        str(repo_dir / "Release.gpg"),
        str(repo_dir / "Release"),
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


@contextlib.contextmanager
def serve(directory: Path, tls: bool = False):
    """Serve a folder on 127.0.0.1 (a free port), over https with ``tls`` (a certificate of
    tests/tls.py's throwaway CA, which node containers trust); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls_authority().certificate, tls_authority().key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve_keys(directory: Path):
    """Serve a folder's signing keys on 127.0.0.1 over https (a key is never fetched over http, even
    from a repository served over http); yields the base URL."""
    return serve(directory, tls=True)


def deploy_data(
    base_url: str,
    *,
    keys_url: str,
    fingerprint: str,
    version: str | None = None,
    key: str = "gpgkey",
    repo_url: str | None = None,
    key_url: str | None = None,
) -> dict[str, str]:
    """The settings that point the toolkit stage at a served repository (this one or the stand-in's),
    its key served over https at ``keys_url`` and pinned to ``fingerprint``: ``key`` names another key
    file beside it; ``repo_url`` / ``key_url`` replace either URL whole."""
    data = {
        "nvidia_toolkit_repo_url": repo_url or base_url,
        "nvidia_toolkit_gpgkey_url": key_url or f"{keys_url}/{key}",
        "nvidia_toolkit_gpgkey_fingerprint": fingerprint,
        "allow_insecure_repositories": "true",  # http:// on 127.0.0.1; the signature is still checked
    }
    if version:
        data["nvidia_toolkit_version"] = version
    return data
