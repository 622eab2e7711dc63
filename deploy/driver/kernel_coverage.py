"""
Whether every installed kernel has an NVIDIA module of the installed driver's version, above all
the one the boot loader starts next; pure, from the InstalledKernels fact (deploy/facts/installed_kernels.py).
The driver stage builds what is missing (deploy/operations/kernel_modules.py), verify names a kernel
that would boot with no module, and a reboot into one is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..reports.node_report import FAIL, PASS, SKIP, Step
from .next_boot import NextBoot, library_version, next_boot, release_key

STEP = "boot_kernels"


def module_source(path: str) -> str:
    """Where a module file came from, by where it lies under /lib/modules/<release>/."""
    if "/updates/dkms/" in path:
        return "DKMS"
    if "/updates/" in path or "/weak-updates/" in path:
        return "a KMP"
    return "a module package"


@dataclass(frozen=True)
class KernelModules:
    release: str
    boots_next: bool
    headers: bool
    versions: tuple[str, ...]  # the versions of the nvidia modules it has
    sources: tuple[str, ...]
    covered: bool


@dataclass(frozen=True)
class Coverage:
    driver: str | None  # the user-space driver's version (None: no libnvidia-ml)
    next_boot: NextBoot
    kernels: tuple[KernelModules, ...]  # the installed kernels (with an image), the next boot's first
    dkms: bool

    @property
    def applies(self) -> bool:
        """A driver is installed: its library, or a module for some kernel."""
        return bool(self.driver or any(kernel.versions for kernel in self.kernels))

    @property
    def missing(self) -> tuple[KernelModules, ...]:
        return tuple(kernel for kernel in self.kernels if not kernel.covered) if self.applies else ()


def coverage(fact: dict[str, Any]) -> Coverage:
    driver = library_version(fact["library"])
    boot = next_boot(fact)
    kernels = []
    for release, kernel in fact["kernels"].items():
        if not kernel["image"]:
            continue  # headers or leftovers only: no boot loader starts it
        versions = tuple(dict.fromkeys(module["version"] or "?" for module in kernel["modules"]))
        kernels.append(
            KernelModules(
                release=release,
                boots_next=release == boot.release,
                headers=kernel["headers"],
                versions=versions,
                sources=tuple(dict.fromkeys(module_source(module["path"]) for module in kernel["modules"])),
                covered=driver in versions if driver else bool(versions),
            )
        )
    kernels.sort(key=lambda kernel: release_key(kernel.release), reverse=True)  # the newest first,
    kernels.sort(key=lambda kernel: not kernel.boots_next)  # after the next boot's
    return Coverage(driver=driver, next_boot=boot, kernels=tuple(kernels), dkms=fact["dkms"])


def _lacks(kernel: KernelModules, found: Coverage) -> str:
    driver = f"driver {found.driver}" if found.driver else "the installed driver"
    has = f" (it has {', '.join(kernel.versions)})" if kernel.versions else ""
    return f"kernel {kernel.release} has no nvidia module of {driver}{has}"


def _why_next(found: Coverage) -> str:
    return f"boots next: {found.next_boot.how}"


def boot_kernels_step(fact: dict[str, Any] | None) -> Step:
    """verify's step: every installed kernel has a module of the driver's version, in one line."""
    if fact is None:
        return Step(STEP, SKIP, "installed kernels not read")
    found = coverage(fact)
    if not found.kernels:
        return Step(
            STEP,
            SKIP,
            "no kernel image installed (/boot/vmlinuz-*, /usr/lib/modules/*/vmlinuz): no kernel here boots the node",
        )
    if not found.applies:
        return Step(STEP, SKIP, "no NVIDIA driver installed (no libnvidia-ml.so.<version>, no nvidia module)")
    if found.missing:
        first, *others = found.missing
        where = f" ({_why_next(found)})" if first.boots_next else " (installed; not the next boot's)"
        fix = (
            f"run the driver stage, which builds it with DKMS (dkms autoinstall -k {first.release})"
            if found.dkms
            else "install the driver's module package for that kernel, or remove the kernel"
        )
        also = f"; also {', '.join(kernel.release for kernel in others)}" if others else ""
        return Step(STEP, FAIL, f"{_lacks(first, found)}{where}: booted, the node has no GPU; {fix}{also}")
    listed = ", ".join(f"{kernel.release} ({'/'.join(kernel.sources)})" for kernel in found.kernels)
    return Step(
        STEP,
        PASS,
        f"{len(found.kernels)} installed kernel(s) have the nvidia module "
        f"{found.driver or ', '.join(found.kernels[0].versions)}: {listed}; "
        f"next boot {found.next_boot.release} ({found.next_boot.how})",
    )


def reboot_refusal(fact: dict[str, Any]) -> str | None:
    """The line refusing a reboot into a kernel without the module (None: the next boot's has it)."""
    found = coverage(fact)
    kernel = next((kernel for kernel in found.missing if kernel.boots_next), None)
    if kernel is None:
        return None
    return (
        f"reboot refused: the next boot starts {_lacks(kernel, found)} ({found.next_boot.how}), so the node "
        f"would come up with no GPU; build it (dkms autoinstall -k {kernel.release}) or make the boot "
        "loader start a kernel that has one, then reboot"
    )


@dataclass(frozen=True)
class BuildPlan:
    """What the driver stage does for the installed kernels without the module."""

    headers: tuple[str, ...] = ()  # each such kernel's headers package, where it has none
    builds: tuple[str, ...] = ()  # kernels DKMS builds for (dkms autoinstall -k)
    unbuildable: tuple[str, ...] = ()  # kernels without the module and without DKMS on the node


def build_plan(fact: dict[str, Any], headers_template: str | None) -> BuildPlan:
    """``headers_template``: the family's headers package of one kernel ({kernel}), None: none."""
    missing = coverage(fact).missing
    if not missing:
        return BuildPlan()
    if not fact["dkms"]:
        return BuildPlan(unbuildable=tuple(kernel.release for kernel in missing))
    headers = tuple(
        headers_template.replace("{kernel}", kernel.release)
        for kernel in missing
        if not kernel.headers and headers_template
    )
    return BuildPlan(headers=headers, builds=tuple(kernel.release for kernel in missing))


def following_headers(packages: dict[str, dict[str, Any]], rule: tuple[str, str] | None) -> dict[str, bool]:
    """The headers metapackages that follow the installed kernel metapackages (``rule``: the family's
    (pattern over the kernel metapackage's name, headers template of its group 1)) and are not in
    step: {headers package: hold}, to install or hold, held where its kernel metapackage is."""
    if not rule:
        return {}
    pattern, template = rule
    wanted: dict[str, bool] = {}
    for name in sorted(packages):
        match = re.fullmatch(pattern, name)
        if not match:
            continue
        headers, held = template.format(match[1]), packages[name]["held"]
        have = packages.get(headers)
        if have is None or (held and not have["held"]):
            wanted[headers] = held
    return wanted
