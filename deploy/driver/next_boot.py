"""
The kernel the boot loader starts next, and the user-space driver's version (its NVML library's file
name): what a kernel's nvidia module must match. Pure and standard library only: deploy/driver/kernel_coverage.py
decides from it on the controller, and the node's health check (deploy/health/, which the health
archive carries) on the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LIBRARY_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
# Where the NVML library lies (Debian's under nvidia/current); deploy/shell/installed_kernels.sh
# lists the same folders (tests/unit/test_health_check.py holds them equal).
NVML_LIBRARY_FOLDERS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib64",
    "/usr/lib",
)


def library_version(path: str | None) -> str | None:
    """The user-space driver's version, from its NVML library's file name (libnvidia-ml.so.535.261.03)."""
    match = LIBRARY_VERSION.search(path or "")
    return match[1] if match else None


def release_key(release: str) -> tuple[tuple[int, int, str], ...]:
    """Kernel releases in GRUB's order (grub-mkconfig's version sort: runs of digits as numbers).
    Own code: packaging's Version refuses releases such as 6.1.0-56-amd64."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|[^\d]+", release))


@dataclass(frozen=True)
class NextBoot:
    release: str | None
    how: str  # what named it, for the operator


def _named(text: str, releases: list[str]) -> str | None:
    """The installed release a boot entry's id or title names (the longest one it contains)."""
    found = [release for release in releases if release in text]
    return max(found, key=len) if found else None


def next_boot(fact: dict[str, Any]) -> NextBoot:
    """The kernel the boot loader starts next: GRUB's one-time next_entry, grubby's default (Fedora,
    RHEL), GRUB_DEFAULT=saved with its saved_entry, a GRUB_DEFAULT naming an entry, else the newest
    installed kernel (grub-mkconfig puts it first and GRUB_DEFAULT=0 starts it). ``fact``: the
    InstalledKernels fact's ``kernels`` ({release: {"image": bool}}), ``grubenv``, ``grub_default``
    and ``grubby``."""
    images = [release for release, kernel in fact["kernels"].items() if kernel["image"]]
    if not images:
        return NextBoot(None, "no kernel image installed")
    env, default = fact["grubenv"], fact["grub_default"]
    if env.get("next_entry") and _named(env["next_entry"], images):
        return NextBoot(_named(env["next_entry"], images), f"GRUB's next_entry {env['next_entry']}")
    grubby = (fact["grubby"] or "").rpartition("vmlinuz-")[2]
    if grubby in images:
        return NextBoot(grubby, "grubby --default-kernel")
    if default == "saved" and env.get("saved_entry") and _named(env["saved_entry"], images):
        return NextBoot(_named(env["saved_entry"], images), f"GRUB's saved_entry {env['saved_entry']}")
    if default and default not in ("0", "saved") and _named(default, images):
        return NextBoot(_named(default, images), f"GRUB_DEFAULT={default}")
    return NextBoot(max(images, key=release_key), "the newest installed kernel, GRUB's first entry")
