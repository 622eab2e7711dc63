"""
Verify's GPU and driver steps: the GPUs on the PCI bus, the loaded kernel module, nvidia-smi, the
driver's version, and CUDA's own start (cuInit). Pure.
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

from ..driver.fabric import fabric_of
from ..facts.cuda import TIMED_OUT, TIMEOUT_SECONDS
from ..facts.verification import FABRIC_MANAGER_UNIT, explain_smi_failure, unit_state
from ..reports.node_report import FAIL, PASS, SKIP, Step
from .options import NO_GPU, VerifyOptions
from .readout import driver_version, gpus_on_pci, kernel_module_version


def gpu_steps(readout: dict[str, Any], options: VerifyOptions) -> list[Step]:
    steps = []
    pci = gpus_on_pci(readout)
    if pci:
        listed = ", ".join(f"{gpu['slot']} ({gpu['device']})" for gpu in pci)
        steps.append(Step("gpu_pci", PASS, f"{len(pci)} NVIDIA GPU(s) on the PCI bus: {listed}"))
    elif options.require_gpu:
        steps.append(Step("gpu_pci", FAIL, f"{NO_GPU} on the PCI bus, and require_gpu is true"))
    else:
        steps.append(Step("gpu_pci", SKIP, f"{NO_GPU} on the PCI bus"))

    module = readout["kernel_module"]
    if module:
        steps.append(Step("kernel_module", PASS, module))
    elif not pci:
        steps.append(Step("kernel_module", SKIP, f"{NO_GPU}: nvidia kernel module not loaded"))
    else:
        steps.append(
            Step(
                "kernel_module",
                FAIL,
                "nvidia kernel module not loaded (/proc/driver/nvidia/version missing): reboot after the "
                "driver install, or check dmesg for why nvidia did not load (Secure Boot signing?)",
            )
        )

    smi = readout["smi"]
    if smi["path"] is None:
        status = FAIL if pci else SKIP
        steps.append(Step("nvidia_smi", status, ("" if pci else f"{NO_GPU}: ") + "nvidia-smi not installed"))
    elif smi["exit_code"] == 0 and smi["gpus"]:
        listed = "; ".join(
            f"{gpu['index']}: {gpu['name'] or '?'} {gpu['uuid'] or ''} "
            f"{gpu['memory_mib'] if gpu['memory_mib'] is not None else '[N/A]'} MiB".strip()
            for gpu in smi["gpus"]
        )
        mig = sum(len(gpu["mig_devices"]) for gpu in smi["list"])
        steps.append(Step("nvidia_smi", PASS, listed + (f"; {mig} MIG device(s)" if mig else "")))
    else:
        why = explain_smi_failure(smi["exit_code"] or 0, smi["output"]) if smi["exit_code"] else "no GPU listed"
        if pci:
            steps.append(Step("nvidia_smi", FAIL, f"nvidia-smi: {why}"))
        else:
            steps.append(Step("nvidia_smi", SKIP, f"{NO_GPU} (nvidia-smi: {why})"))

    version = driver_version(readout)
    loaded = kernel_module_version(readout["kernel_module"])
    library = next((gpu["driver_version"] for gpu in smi["gpus"] if gpu["driver_version"]), None)
    if version is None:
        steps.append(
            Step(
                "driver_version",
                FAIL if pci else SKIP,
                ("" if pci else f"{NO_GPU}: ") + "no driver version (no loaded module, no nvidia-smi answer)",
            )
        )
    elif loaded and library and loaded != library:
        steps.append(
            Step(
                "driver_version",
                FAIL,
                f"kernel module {loaded} but user-space library {library}: reboot, or reload the nvidia modules",
            )
        )
    else:
        try:
            ok = Version(version) >= Version(options.min_driver)
        except InvalidVersion:
            ok = False
        steps.append(
            Step(
                "driver_version",
                PASS if ok else FAIL,
                f"driver {version} {'>=' if ok else '<'} {options.min_driver} (lowest accepted)",
            )
        )
    return steps


# cuInit's CUDA_ERROR_SYSTEM_NOT_READY: on an NVSwitch node, the fabric is not up (Fabric Manager)
SYSTEM_NOT_READY = 802


def cuda_summary(readout: dict[str, Any]) -> str:
    cuda = readout["cuda"]
    if cuda["python"] is None:
        return "not checked (no python3)"
    if cuda["exit_code"] == TIMED_OUT:
        return "cuInit timed out"
    if cuda["load_error"]:
        return "no libcuda.so.1"
    code = cuda["init_result"]
    if code is None:
        return "cuInit not called"
    if code == 0:
        return f"ok, {cuda['device_count'] or 0} device(s)" + (
            f", CUDA {cuda['driver_version']}" if cuda["driver_version"] else ""
        )
    return f"error {code} {cuda['error_name'] or ''}".strip()


def cuda_error(cuda: dict[str, Any]) -> str:
    """cuInit's failure as the library itself names it."""
    code = cuda["init_result"]
    named = f"CUDA error {code} {cuda['error_name'] or '(the library gives it no name)'}"
    return named + (f": {cuda['error_string']}" if cuda["error_string"] else "")


def cuda_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    """cuInit through the driver's libcuda.so.1 (deploy/facts/cuda.py): CUDA starts, not only nvidia-smi."""
    cuda = readout["cuda"]
    fabric = fabric_of(readout["node"])
    # Where a GPU should answer, a failure fails; elsewhere it is reported as what the library said.
    expected = bool(gpus_on_pci(readout)) or fabric.needs_fabric_manager or options.require_gpu

    def failed(why: str) -> Step:
        return Step("cuda", FAIL, why) if expected else Step("cuda", SKIP, f"{NO_GPU} ({why})")

    if cuda["python"] is None:
        return Step(
            "cuda",
            SKIP,
            "not checked: no python3 (nor /usr/libexec/platform-python) on the node "
            "to call cuInit through libcuda.so.1 with ctypes",
        )
    if cuda["exit_code"] == TIMED_OUT:
        return failed(f"cuInit did not return within {TIMEOUT_SECONDS} s ({cuda['library'] or 'libcuda.so.1'})")
    if cuda["load_error"]:
        return failed(f"the driver's CUDA library does not load: {cuda['load_error']}")
    library = cuda["library"] or "libcuda.so.1"
    if cuda["init_result"] is None:
        if cuda["missing"]:
            return failed(f"{library} does not export {', '.join(cuda['missing'])}")
        return failed(f"cuInit was not called: python exited {cuda['exit_code']} loading {library}")
    if cuda["init_result"] == 0:
        count = cuda["device_count"] or 0
        version = f", the driver supports CUDA {cuda['driver_version']}" if cuda["driver_version"] else ""
        if not count:
            return failed(f"cuInit succeeded but CUDA counts no device ({library})")
        return Step("cuda", PASS, f"cuInit: {count} CUDA device(s){version} ({library})")
    error = cuda_error(cuda)
    if cuda["init_result"] == SYSTEM_NOT_READY and fabric.needs_fabric_manager:
        state = unit_state(readout, FABRIC_MANAGER_UNIT)
        return failed(
            f"Fabric Manager not running ({error}; {fabric.evidence}, {FABRIC_MANAGER_UNIT} {state}): "
            f"systemctl enable --now {FABRIC_MANAGER_UNIT}"
        )
    return failed(f"cuInit: {error} ({library})")
