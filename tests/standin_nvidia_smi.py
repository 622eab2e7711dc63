"""
A STAND-IN nvidia-smi (a shell script written by us; no GPU is behind it) for the health check's
tests: it answers the two queries the check makes (deploy/health/readings.py: ``--query-gpu`` and
``--query-remapped-rows``, CSV without header or units) with the GPUs a test gives, or fails as
NVML does (its message and exit status). Each call is appended to ``nvidia-smi.log`` beside it. The
values' layout is nvidia-smi's (tests/fixtures/nvidia-smi/README.md): eight-digit PCI domains, "Yes"/"No",
"[N/A]" where a GPU has no such counter.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n"
MISMATCH_EXIT = 18  # NVML_ERROR_LIB_RM_VERSION_MISMATCH's code (tests/fixtures/nvidia-smi/version-mismatch.txt)


@dataclass(frozen=True)
class StandInGpu:
    pci: str  # as sysfs names it: 0000:17:00.0
    name: str = "NVIDIA H100 PCIe"
    driver: str = "535.261.03"
    ecc_uncorrected: str = "0"
    retired_single: str = "[N/A]"
    retired_double: str = "[N/A]"
    retired_pending: str = "[N/A]"
    remap_pending: str = "No"
    remap_failure: str = "No"

    def query_line(self) -> str:
        return ", ".join(
            (
                f"0000{self.pci}",
                self.name,
                self.driver,
                self.ecc_uncorrected,
                self.retired_single,
                self.retired_double,
                self.retired_pending,
            )
        )

    def remap_line(self) -> str:
        return ", ".join((f"0000{self.pci}", self.remap_pending, self.remap_failure))


def script(
    folder: Path, gpus: list[StandInGpu] = (), failure: tuple[int, str] | None = None, query_text: str | None = None
) -> str:
    """The script's text: ``gpus`` answered, or ``failure`` (exit status, what it prints) for both
    queries; ``query_text``: the query's answer as given (hostile output)."""
    log = shlex.quote(str(folder / "nvidia-smi.log"))
    if failure is not None:
        code, said = failure
        answer = f"printf '%s' {shlex.quote(said)}\nexit {code}"
        remaps = answer
    else:
        text = query_text if query_text is not None else "".join(gpu.query_line() + "\n" for gpu in gpus)
        answer = f"printf '%s' {shlex.quote(text)}"
        remaps = f"printf '%s' {shlex.quote(''.join(gpu.remap_line() + chr(10) for gpu in gpus))}"
    return (
        f'#!/bin/sh\n# STAND-IN nvidia-smi (tests/standin_nvidia_smi.py)\necho "$*" >> {log}\n'
        f'case "$*" in\n*--query-gpu=*)\n{answer}\n;;\n*--query-remapped-rows=*)\n{remaps}\n;;\n'
        "*) echo 'stand-in nvidia-smi: not a query it answers' >&2; exit 2 ;;\nesac\n"
    )


def install(folder: Path, **answers) -> Path:
    """The stand-in at ``folder``/nvidia-smi, executable."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(script(folder, **answers))
    path.chmod(0o755)
    return path
