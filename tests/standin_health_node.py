"""
A STAND-IN GPU node in a folder, for the health check's tests (deploy/health/): no GPU and no
driver are behind it. sysfs's PCI devices from a topology fixture (tests/pci_tree.py), the loaded
module's /sys/module/nvidia and /proc/driver/nvidia (written by us, as the driver lays them out),
the kernels' module trees and images, the NVML library's file, and STAND-IN programs on its own
path: nvidia-smi (tests/standin_nvidia_smi.py), journalctl (the kernel's entries a test gives, as
``journalctl --output=json`` prints them, after a cursor), systemctl (``show`` of the units a test
gives) and modinfo (the version in the module file). Each stand-in logs its arguments to
``<program>.log`` beside it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pci_tree
import standin_kmod
import standin_nvidia_smi
from standin_nvidia_smi import StandInGpu

from deploy.health.node import HealthHost
from deploy.health.settings import HealthSettings

KERNEL = "6.1.0-28-amd64"
DRIVER = "535.261.03"
BOOT_ID = "3f0c6a3e2b1d4c5e8f7a9b0c1d2e3f40"
PCIE = ("0000:17:00.0", "0000:ca:00.0")  # tests/fixtures/fabric/pcie-only.json's GPUs


def xid_message(pci: str, xid: int, text: str) -> str:
    """An Xid line as the driver logs it: ``NVRM: Xid (PCI:0000:17:00): 79, pid=..., <text>``."""
    return f"NVRM: Xid (PCI:{pci.rpartition('.')[0]}): {xid}, pid=1234, name=python3, {text}"


@dataclass
class StandInNode:
    root: Path
    host: HealthHost
    settings: HealthSettings
    entries: list[dict] = field(default_factory=list)

    @property
    def report_path(self) -> Path:
        return Path(self.settings.report_path)

    def calls(self, program: str) -> list[str]:
        log = self.root / "bin" / f"{program}.log"
        return log.read_text().splitlines() if log.exists() else []

    def log_kernel(self, *messages: str, boot_id: str = BOOT_ID) -> None:
        """Kernel entries after the ones already logged, as journald keeps them (cursors our own)."""
        for message in messages:
            self.entries.append(
                {
                    "__CURSOR": f"s=stand-in;i={len(self.entries) + 1}",
                    "MESSAGE": message,
                    "_BOOT_ID": boot_id,
                    "__MONOTONIC_TIMESTAMP": str(1_000_000 * (len(self.entries) + 1)),
                }
            )
        self.write_journal()

    def write_journal(self, text: str | None = None) -> None:
        lines = text if text is not None else "".join(json.dumps(entry) + "\n" for entry in self.entries)
        (self.root / "journal.jsonl").write_text(lines)

    def smi(self, **answers) -> None:
        standin_nvidia_smi.install(self.root / "bin", **answers)

    def new_boot(self, boot_id: str) -> None:
        (self.root / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text(
            f"{boot_id[:8]}-{boot_id[8:12]}-{boot_id[12:16]}-{boot_id[16:20]}-{boot_id[20:]}\n"
        )

    def kernel(self, release: str, module: str | None, image: bool = True) -> None:
        """A kernel's module tree (its modules.dep listing an nvidia.ko of ``module``'s version, or
        none) and its image in /boot."""
        tree = self.root / "lib-modules" / release
        (tree / "updates" / "dkms").mkdir(parents=True, exist_ok=True)
        dep = "kernel/fs/overlayfs/overlay.ko:\n"
        if module:
            (tree / "updates" / "dkms" / "nvidia.ko").write_bytes(
                standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, module)
            )
            dep += "updates/dkms/nvidia.ko:\n"
        (tree / "modules.dep").write_text(dep)
        if image:
            (self.root / "boot" / f"vmlinuz-{release}").write_text("a kernel image\n")

    def library(self, version: str | None) -> None:
        """The NVML library of ``version`` (an updater's: the old one gone), or none."""
        folder = self.root / "lib"
        for old in folder.glob("libnvidia-ml.so*"):
            old.unlink()
        if version:
            (folder / f"libnvidia-ml.so.{version}").write_text("the NVML library\n")
            (folder / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")

    def loaded(self, version: str | None, gpus: tuple[str, ...] = ()) -> None:
        """The loaded nvidia module (sysfs's version, /proc/driver/nvidia and the GPUs it
        initialised), or none."""
        module, proc = self.root / "sys" / "module" / "nvidia", self.root / "proc" / "driver" / "nvidia"
        for folder in (module, proc):
            if folder.exists():
                for path in sorted(folder.rglob("*"), reverse=True):
                    path.rmdir() if path.is_dir() else path.unlink()
                folder.rmdir()
        if version is None:
            return
        module.mkdir(parents=True)
        (module / "version").write_text(f"{version}\n")
        (proc / "gpus").mkdir(parents=True)
        (proc / "version").write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Release Build\n")
        for gpu in gpus:
            (proc / "gpus" / gpu).mkdir()
            (proc / "gpus" / gpu / "information").write_text("Model: stand-in\n")

    def units(self, states: dict[str, tuple[str, str, str]]) -> None:
        """The stand-in systemctl's ``show`` answers: unit -> (LoadState, ActiveState, UnitFileState)."""
        cases = "".join(
            f"{shlex.quote(unit)}) printf 'Id=%s\\nLoadState=%s\\nActiveState=%s\\nUnitFileState=%s\\n\\n' "
            f"{shlex.quote(unit)} {' '.join(map(shlex.quote, state))} ;;\n"
            for unit, state in states.items()
        )
        _program(
            self.root / "bin",
            "systemctl",
            'shift 3\nfor unit; do\ncase "$unit" in\n'
            + cases
            + "*) printf 'Id=%s\\nLoadState=not-found\\nActiveState=inactive\\nUnitFileState=\\n\\n' \"$unit\" ;;\n"
            "esac\ndone\n",
        )


def _program(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(
        f"#!/bin/sh\n# STAND-IN {name} (tests/standin_health_node.py)\n"
        f'echo "$*" >> {shlex.quote(str(folder / f"{name}.log"))}\n{body}'
    )
    path.chmod(0o755)


def _journalctl(folder: Path, journal: Path) -> None:
    """Prints the entries after --after-cursor's (all without one); a cursor it does not hold: exit 1,
    as journalctl's "Failed to seek to cursor"."""
    _program(
        folder,
        "journalctl",
        f"""journal={shlex.quote(str(journal))}
cursor=""
for arg; do case "$arg" in --after-cursor=*) cursor=${{arg#--after-cursor=}} ;; esac; done
[ -f "$journal" ] || exit 0
if [ -z "$cursor" ]; then cat "$journal"; exit 0; fi
line=$(grep -nF "\\"__CURSOR\\": \\"$cursor\\"" "$journal" | head -n 1 | cut -d: -f1)
if [ -z "$line" ]; then echo "Failed to seek to cursor: Invalid argument" >&2; exit 1; fi
tail -n "+$((line + 1))" "$journal"
""",
    )


def stand_in_node(
    root: Path,
    topology: str = "pcie-only",
    driver: str | None = DRIVER,
    smi_gpus: tuple[str, ...] | None = None,
    **settings,
) -> StandInNode:
    """A node whose GPUs are healthy: the driver ``driver`` loaded with every GPU of ``topology``
    initialised, its library and the running kernel's module of that version, nvidia-smi answering
    for ``smi_gpus`` (all), persistenced active."""
    for folder in ("bin", "boot", "lib", "proc/sys/kernel/random", "state"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    gpus = tuple(
        device["slot"]
        for device in pci_tree.load(topology)["devices"]
        if device["vendor"] == "0x10de" and device["class"].startswith("0x03")
    )
    pci_tree.write(pci_tree.load(topology), root / "sys" / "bus" / "pci" / "devices")
    node = StandInNode(
        root,
        HealthHost(
            sys_root=str(root / "sys"),
            proc_root=str(root / "proc"),
            modules_root=str(root / "lib-modules"),
            module_trees=(str(root / "lib-modules"),),
            boot_root=str(root / "boot"),
            etc_root=str(root / "etc"),
            kernel=KERNEL,
            library_folders=(str(root / "lib"),),
            path=str(root / "bin"),
        ),
        HealthSettings(
            report_path=str(root / "state" / "health.json"), state_path=str(root / "state" / "health.state"), **settings
        ),
    )
    node.new_boot(BOOT_ID)
    node.kernel(KERNEL, driver)
    node.library(driver)
    node.loaded(driver, gpus)
    node.smi(gpus=[StandInGpu(pci) for pci in (gpus if smi_gpus is None else smi_gpus)])
    node.units({"nvidia-persistenced.service": ("loaded", "active", "enabled")})
    _program(root / "bin", "modinfo", 'tr "\\000" "\\n" < "$3" | sed -n "s/^version=//p"\n')
    _journalctl(root / "bin", root / "journal.jsonl")
    node.write_journal()
    return node
