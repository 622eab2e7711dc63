"""
Real containerd (and dockerd) binaries from Debian's archive, for tests that ask the real
program what it makes of a config (`containerd --config F config dump`,
`dockerd --validate --config-file F`).

Each release is Debian's package of one suite, fetched once with a throwaway apt configuration
(the machine's own sources and lists stay untouched), unpacked with `dpkg -x` into
`.cache/containerd-releases/<suite>/` (`.cache/docker-releases/<suite>/`) and kept there.

    bookworm -> containerd 1.6.20, trixie -> 1.7.24, sid -> 2.1.9 (as of this writing)
    trixie's docker.io -> dockerd 26.1 (runs on bookworm's libc; has --validate)

Which config versions each containerd reads, measured with `config dump` on these binaries:

    version      1.6.20                   1.7.24               2.1.9
    1 / none     read                     read                 loaded, but `plugins.cri` is dropped
                                                               with a warning ("Ignoring unknown key")
    2            read                     read                 read (migrated to 3)
    3            loaded as if 2: the 2.x  refused: "version 3  read
                 plugin IDs are ignored   is not supported,
                                          the max version is 2"
    4            loaded as if 2 (same)    refused              refused: "expected ... equal to or
                                                               less than 3, got 4"

A missing non-glob `imports` entry fails 1.6/1.7 ("no such file or directory"); 2.1 says
nothing and silently skips that entry and every entry after it (a drop-in listed after a missing
file is never read). A glob that matches nothing is fine everywhere. Relative imports are resolved against
the directory of the importing file.
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
DOCKER_CACHE = REPO / ".cache" / "docker-releases"
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
        "-o",
        f"Dir::Etc::SourceList={directory / 'sources.list'}",
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        f"Dir::State::Lists={directory / 'lists'}",
        "-o",
        f"Dir::State::Status={directory / 'status'}",
        "-o",
        f"Dir::Cache={directory / 'cache'}",
        "-o",
        "Acquire::Check-Valid-Until=false",  # sid's Release file is re-signed daily
        "-o",
        "Acquire::Languages=none",
        "-o",
        "APT::Architecture=amd64",
    ]


def _checked(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, args[:3]))}... failed ({result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-600:]}"
        )
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


# config version -> the suites whose containerd runs a file of that version as written (table above)
READERS = {1: ("bookworm", "trixie"), 2: ("bookworm", "trixie", "sid"), 3: ("sid",), 4: ()}


def releases() -> list[Release]:
    return [release(suite) for suite in SUITES]


def config_dump(binary: Path, config: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    """`containerd --config CONFIG config dump`: the config containerd would run, imports resolved."""
    return subprocess.run(
        [str(binary), "--config", str(config), "config", "dump"], capture_output=True, text=True, timeout=timeout
    )


@cache
def dockerd(suite: str = "trixie") -> Path:
    """The suite's dockerd (trixie's 26.x has `--validate`), checked to run here."""
    directory = DOCKER_CACHE / suite
    found = sorted(directory.glob("docker.io_*.deb"))
    if not found:
        found = download_debs(suite, ("docker.io",), directory)
    binary = unpack(found[-1], directory / "root") / "usr" / "sbin" / "dockerd"
    _checked([str(binary), "--version"])
    return binary


def trixie_containerd_deb() -> Path:
    """trixie's containerd 1.7 .deb (depends on runc and libc6 only: installs on bookworm as it is)."""
    return containerd_deb("trixie")


def trixie_docker_debs() -> list[Path]:
    """trixie's docker.io and docker-cli 26 .debs (26 split the CLI out), downloaded once into the cache.
    Every dependency they name is met by bookworm's archive (containerd >= 1.4, runc, tini, iptables,
    sysvinit-utils >= 3.05-4, libc6 >= 2.34): apt installs them on bookworm without forcing anything."""
    directory = DOCKER_CACHE / "trixie"
    debs = []
    for package in ("docker.io", "docker-cli"):
        found = sorted(directory.glob(f"{package}_*.deb"))
        if not found:
            found = [d for d in download_debs("trixie", (package,), directory) if d.name.startswith(f"{package}_")]
        debs.append(found[-1])
    return debs


def dockerd_validate(binary: Path, config: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    """`dockerd --validate --config-file CONFIG`: dockerd's own check of a daemon.json."""
    return subprocess.run(
        [str(binary), "--validate", "--config-file", str(config)], capture_output=True, text=True, timeout=timeout
    )


if __name__ == "__main__":
    for found in releases():
        print(f"{found.suite}: containerd {found.version} at {found.binary}")
    print(f"trixie: {dockerd()}")
