"""
The driver's parts at one version, pure: the loaded kernel module against the user-space driver
(its NVML library), and Fabric Manager against the driver. verify's step names the part that is
out of step, why, and the fix, in one line.
"""

from __future__ import annotations

from typing import Any

from ..driver.next_boot import library_version
from ..driver.versions import upstream_version
from ..reports.node_report import FAIL, PASS, SKIP, Step

STEP = "version_set"


def version_set_step(loaded: str | None, kernels: dict[str, Any] | None) -> Step:
    """``loaded``: the running nvidia module's version (/sys/module/nvidia/version); ``kernels``: the
    InstalledKernels reading (the NVML library's file, Fabric Manager's package)."""
    library = library_version((kernels or {}).get("library"))
    fabric = {
        name: upstream_version(version) for name, version in ((kernels or {}).get("fabric_manager") or {}).items()
    }
    if library is None:
        return Step(STEP, SKIP, "no user-space NVIDIA driver installed (no libnvidia-ml.so.<version>)")
    if loaded and loaded != library:
        return Step(
            STEP,
            FAIL,
            f"the loaded nvidia module is {loaded} but the user-space driver is {library}: the "
            "driver changed and the old module still runs (NVML: Driver/library version mismatch); "
            "reboot, or rerun with kernel_modules_load=true to reload it where nothing holds the GPU",
        )
    other = {name: version for name, version in fabric.items() if version != library}
    if other:
        listed = ", ".join(f"{name} {version}" for name, version in sorted(other.items()))
        return Step(
            STEP,
            FAIL,
            f"Fabric Manager is {listed} but the driver is {library}: it does not start with another "
            "driver version; rerun the driver stage, which pins and holds both at one version",
        )
    parts = [
        f"user-space driver {library}",
        f"module {loaded} loaded" if loaded else "no module loaded",
        *(f"{name} {version}" for name, version in sorted(fabric.items())),
    ]
    return Step(STEP, PASS, "one version: " + ", ".join(parts))
