"""
Verify's toolkit and runtime steps: the toolkit and the runtime binary, each runtime's wiring and
which of its GPU runs to do (deploy/runtimes/registry.py), and what the CRI sandbox and the
containers showed. Pure.
"""

from __future__ import annotations

from typing import Any

from ..foundations.node_text import short
from ..reports.node_report import FAIL, PASS, SKIP, Step
from ..runtimes import registry
from ..runtimes.registry import CONTAINER, CRI, GpuRun
from ..runtimes.wiring import HANDLER
from .cdi import CdiProbe, cdi_container_problem
from .options import NO_GPU, VerifyOptions
from .readout import cleaned_up, configured_binaries, crictl_message, gpu_usable, gpus_on_pci, without_crictl_warnings


def toolkit_steps(readout: dict[str, Any], options: VerifyOptions) -> list[Step]:
    steps = []
    if readout["toolkit_version"]:
        steps.append(Step("toolkit", PASS, f"NVIDIA container toolkit {readout['toolkit_version']} (nvidia-ctk)"))
    else:
        steps.append(
            Step(
                "toolkit",
                FAIL if options.toolkit_expected else SKIP,
                "nvidia-ctk not found: the NVIDIA container toolkit is not installed",
            )
        )

    # The paths the runtimes are configured with; the toolkit's own path when none is wired yet.
    wanted = configured_binaries(readout)
    executables = readout["executables"]
    if not wanted:
        present = readout["runtime_path"]
        steps.append(
            Step(
                "runtime_binary",
                PASS if present else FAIL,
                f"{present} (no runtime points to it yet)"
                if present
                else "nvidia-container-runtime not found on the PATH",
            )
        )
    else:
        missing = sorted(path for path in wanted if not executables.get(path, False))
        steps.append(
            Step(
                "runtime_binary",
                FAIL if missing else PASS,
                (
                    f"configured runtime binary not executable: {', '.join(missing)}"
                    if missing
                    else f"{', '.join(sorted(wanted))} executable"
                ),
            )
        )
    return steps


def runtime_config_steps(readout: dict[str, Any], options: VerifyOptions) -> list[Step]:
    """Each runtime's ``<name>_config`` step: its own view against the wiring, where it is wired."""
    steps = []
    for runtime in registry.RUNTIMES:
        reading, name = readout[runtime.name], f"{runtime.name}_config"
        if runtime.name not in options.runtimes:
            steps.append(Step(name, SKIP, f"{runtime.name} is not in container_runtimes"))
        elif not reading["path"]:
            steps.append(Step(name, FAIL, f"{runtime.title} is not installed"))
        else:
            steps.append(runtime.config_step(reading, options))
    return steps


def planned_runs(readout: dict[str, Any], options: VerifyOptions) -> dict[str, str | None]:
    """Which runs to do (each runtime's GpuRuns): name -> None (run it) or the reason it is skipped."""
    gpu = gpu_usable(readout)
    no_gpu = NO_GPU if not gpus_on_pci(readout) else "the GPU is not usable (see nvidia_smi)"
    plan: dict[str, str | None] = {}
    for runtime in registry.RUNTIMES:
        reading = readout[runtime.name]
        for run in runtime.runs:
            if runtime.name not in options.runtimes:
                plan[run.name] = f"{runtime.name} is not in container_runtimes"
            elif not reading["path"] or reading["active"] != "active":
                plan[run.name] = f"{runtime.title} is not running"
            else:
                plan[run.name] = run_skipped(run, readout, reading, gpu, no_gpu, options.image)
    return plan


def run_skipped(
    run: GpuRun, readout: dict[str, Any], reading: dict[str, Any], gpu: bool, no_gpu: str, image: str
) -> str | None:
    """Why ``run`` cannot be done on its running runtime, or None when it can."""
    if run.probe == CRI:
        return (
            None
            if readout["crictl_path"]
            else (
                f"crictl not installed: the CRI runtime handler '{HANDLER}' (the kubelet's path) was not exercised; "
                "install cri-tools to check it"
            )
        )
    return gpu_run_skipped(gpu, no_gpu, reading["image_present"], image, run.pull)


def gpu_run_skipped(gpu: bool, no_gpu: str, image_present: bool, image: str, pull: str) -> str | None:
    """Why a container with the GPUs cannot run on a running runtime, or None when it can."""
    if not gpu:
        return no_gpu
    if not image_present:
        return f"image {image} not on the node ({pull} {image})"
    return None


def run_steps(
    readout: dict[str, Any], options: VerifyOptions, runs: dict[str, dict[str, Any]], cdi: CdiProbe | None
) -> list[Step]:
    """Each runtime's GPU runs' steps: what the run showed, or why it was skipped (``planned_runs``)."""
    plan = planned_runs(readout, options)
    steps = []
    for runtime in registry.RUNTIMES:
        for run in runtime.runs:
            skipped = plan[run.name]
            if skipped is not None:
                steps.append(Step(run.name, SKIP, skipped))
            elif run.probe == CRI:
                steps.append(cri_step(runs.get(run.name, {}), gpu_usable(readout), options.image, cdi, run.name))
            elif run.probe == CONTAINER:
                steps.append(run_step(run.name, runs[run.name], run.what))
    return steps


def cri_step(
    result: dict[str, Any], gpu: bool, image: str, cdi: CdiProbe | None = None, name: str = "cri_handler"
) -> Step:
    """The CRI run ``name``: the sandbox through the handler, its nvidia-smi container and CDI's."""
    runp = result.get("runp")
    if not runp:
        return Step(name, FAIL, "crictl produced no result")
    if runp["exit_code"] != 0:
        return Step(
            name,
            FAIL,
            f"crictl runp --runtime {HANDLER} (host-network sandbox) failed: "
            f"{short(crictl_message(runp['output']), 300)}",
        )
    cleanup = [call for call in ("stopp", "rmp") if not cleaned_up(result.get(call, {}))]
    note = f"; cleanup failed: {', '.join(cleanup)}" if cleanup else ""
    sandbox = f"host-network sandbox ran through runtime handler '{HANDLER}'"
    if not gpu:
        return Step(name, FAIL if cleanup else PASS, f"{sandbox} ({NO_GPU}: no nvidia-smi container){note}")
    if "image" in result:
        return Step(
            name,
            FAIL if cleanup else PASS,
            f"{sandbox}; nvidia-smi container skipped: image {image} not on the node{note}",
        )
    for call in ("create", "start", "logs"):
        if result.get(call, {}).get("exit_code", 1) != 0:
            output = crictl_message(result.get(call, {}).get("output", ""))
            return Step(name, FAIL, f"crictl {call} failed: {short(output, 300)}")
    container_state = result.get("state", {}).get("output", "")
    logs = without_crictl_warnings(result.get("logs", {}).get("output", ""))
    if container_state.strip() != "CONTAINER_EXITED 0":
        return Step(name, FAIL, f"nvidia-smi -L in the sandbox: {container_state or 'no state'}: {short(logs)}")
    cdi_note = ""
    if cdi is not None:
        problem = cdi_container_problem(result, cdi)
        if problem:
            return Step(name, FAIL, problem)
        cdi_note = f"; CDI device {cdi.device} through the CRI: {', '.join(cdi.paths)} in the container"
        if not cleaned_up(result.get("cdi_rm", {})):
            cleanup.append("cdi_rm")
            note = f"; cleanup failed: {', '.join(cleanup)}"
    return Step(name, FAIL if cleanup else PASS, f"{sandbox}; nvidia-smi -L: {short(logs, 120)}{cdi_note}{note}")


def run_step(name: str, result: dict[str, Any], what: str) -> Step:
    if result["exit_code"] == 0:
        return Step(name, PASS, f"{what}: {short(result['output'], 120)}")
    return Step(name, FAIL, f"{what} exited {result['exit_code']}: {short(result['output'])}")
