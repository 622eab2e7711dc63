"""
Which package names Debian's real archive has: the suite's package lists, fetched once with a
throwaway apt configuration (the machine's own sources and lists stay untouched) into
`.cache/debian-lists/<suite>-<arch>/`, then asked with `apt-cache show`.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from build_lock import built_once
from containerd_releases import MIRROR, REPO, _apt_options, _checked

LISTS_CACHE = REPO / ".cache" / "debian-lists"
COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")


def _options(directory: Path, arch: str) -> list[str]:
    return [
        option if not option.startswith("APT::Architecture=") else f"APT::Architecture={arch}"
        for option in _apt_options(directory)
    ]


@cache
def lists(suite: str, arch: str = "amd64") -> Path:
    """The apt folder holding ``suite``'s lists (every component, with -updates and -security)."""
    directory = LISTS_CACHE / f"{suite}-{arch}"
    with built_once(f"debian-lists-{suite}-{arch}"):
        if not (directory / "done").exists():
            _update(directory, suite, arch)
    return directory


def _update(directory: Path, suite: str, arch: str) -> None:
    for sub in ("lists/partial", "cache/archives/partial"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    (directory / "status").write_text("")
    components = " ".join(COMPONENTS)
    security = MIRROR.rsplit("/", 1)[0] + "/debian-security"
    (directory / "sources.list").write_text(
        f"deb {MIRROR} {suite} {components}\ndeb {MIRROR} {suite}-updates {components}\n"
        f"deb {security} {suite}-security {components}\n"
    )
    _checked(["apt-get", *_options(directory, arch), "update", "-q"])
    (directory / "done").write_text(suite + "\n")


def missing(suite: str, packages, arch: str = "amd64") -> list[str]:
    """The names of ``packages`` that no component of Debian ``suite`` has for ``arch``."""
    options = _options(lists(suite, arch), arch)
    return [
        name
        for name in packages
        if subprocess.run(["apt-cache", *options, "show", "--no-all-versions", name], capture_output=True).returncode
        != 0
    ]
