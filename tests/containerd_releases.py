"""
Real containerd binaries from Debian's archive, for tests that ask containerd itself what it
makes of a config (`containerd --config F config dump`).

Each release is Debian's `containerd` package of one suite, fetched once with a throwaway apt
configuration (the machine's own sources and lists stay untouched), unpacked with `dpkg -x`
into `.cache/containerd-releases/<suite>/` and kept there.

    bookworm -> containerd 1.6, trixie -> 1.7, sid -> 2.1
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASES_CACHE = REPO / ".cache" / "containerd-releases"
MIRROR = os.environ.get("GPU_NODE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SUITES = ("bookworm", "trixie", "sid")


@dataclass(frozen=True)
class Release:
    suite: str
    deb: Path
    binary: Path
    version: str  # e.g. "1.6.20"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


def _apt_options(directory: Path) -> list[str]:
    return [
        "-o", f"Dir::Etc::SourceList={directory / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/nonexistent",
        "-o", f"Dir::State::Lists={directory / 'lists'}",
        "-o", f"Dir::State::Status={directory / 'status'}",
        "-o", f"Dir::Cache={directory / 'cache'}",
        "-o", "Acquire::Check-Valid-Until=false",  # sid's Release file is re-signed daily
        "-o", "Acquire::Languages=none",
        "-o", "APT::Architecture=amd64",
    ]


def _checked(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:3]))}... failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[-600:]}")
    return result


def download_debs(suite: str, packages: tuple[str, ...], destination: Path) -> list[Path]:
    """`apt-get download` ``packages`` from Debian ``suite`` into ``destination`` (a throwaway apt config)."""
    destination.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"apt-{suite}-", dir=destination) as scratch:
        directory = Path(scratch)
        for sub in ("lists/partial", "cache/archives/partial"):
            (directory / sub).mkdir(parents=True)
        (directory / "status").write_text("")
        (directory / "sources.list").write_text(f"deb {MIRROR} {suite} main\n")
        options = _apt_options(directory)
        _checked(["apt-get", *options, "update", "-q"])
        _checked(["apt-get", *options, "download", *packages], cwd=directory)
        debs = sorted(directory.glob("*.deb"))
        kept = []
        for deb in debs:
            target = destination / deb.name
            os.replace(deb, target)
            kept.append(target)
    return kept


def unpack(deb: Path, root: Path) -> Path:
    """`dpkg -x` into ``root`` (atomically: a half-unpacked tree never looks complete)."""
    if root.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
    _checked(["dpkg-deb", "-x", str(deb), str(scratch)])
    try:
        os.rename(scratch, root)
    except OSError:  # another process finished first
        shutil.rmtree(scratch, ignore_errors=True)
    return root


def containerd_deb(suite: str) -> Path:
    """The suite's containerd .deb, downloaded once into the cache."""
    directory = RELEASES_CACHE / suite
    found = sorted(directory.glob("containerd_*.deb"))
    if not found:
        found = [d for d in download_debs(suite, ("containerd",), directory) if d.name.startswith("containerd_")]
    return found[-1]


@cache
def release(suite: str) -> Release:
    """The suite's containerd, unpacked, checked to run here (`containerd --version`)."""
    deb = containerd_deb(suite)
    root = unpack(deb, RELEASES_CACHE / suite / "root")
    binary = root / "usr" / "bin" / "containerd"
    output = _checked([str(binary), "--version"]).stdout
    match = re.search(r"\b(\d+\.\d+\.\d+)", output)
    if not match:
        raise RuntimeError(f"{binary} --version printed no version: {output!r}")
    return Release(suite=suite, deb=deb, binary=binary, version=match.group(1))


def releases() -> list[Release]:
    return [release(suite) for suite in SUITES]


def config_dump(binary: Path, config: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    """`containerd --config CONFIG config dump`: the config containerd would run, imports resolved."""
    return subprocess.run([str(binary), "--config", str(config), "config", "dump"],
                          capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":
    for found in releases():
        print(f"{found.suite}: containerd {found.version} at {found.binary}")
