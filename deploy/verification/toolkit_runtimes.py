"""
Verify's toolkit and runtime steps: the toolkit and the runtime binary, containerd's and Docker's
wiring, which container runs to do, and what the CRI sandbox and the containers showed. Pure.
"""

from __future__ import annotations

from ..runtimes.cdi import CdiUnsupported, for_containerd
from ..runtimes.containerd.cri import effective_problems
from ..reports.node_report import FAIL, PASS, SKIP, Step
from .cdi import CdiProbe, cdi_container_problem
from .options import HANDLER, NO_GPU, VerifyOptions
from .readout import cleaned_up, configured_binaries, crictl_message, gpu_usable, gpus_on_pci, short, without_crictl_warnings


def toolkit_steps(readout: dict, options: VerifyOptions, cri: dict | None) -> list[Step]:
    steps = []
    if readout["toolkit_version"]:
        steps.append(Step("toolkit", PASS, f"NVIDIA container toolkit {readout['toolkit_version']} (nvidia-ctk)"))
    else:
        steps.append(Step("toolkit", FAIL if options.toolkit_expected else SKIP,
                          "nvidia-ctk not found: the NVIDIA container toolkit is not installed"))

    # The paths the runtimes are configured with; the toolkit's own path when none is wired yet.
    wanted = configured_binaries(readout, cri)
    executables = readout["executables"]
    if not wanted:
        present = readout["runtime_path"]
        steps.append(Step("runtime_binary", PASS if present else FAIL,
                          f"{present} (no runtime points to it yet)" if present
                          else "nvidia-container-runtime not found on the PATH"))
    else:
        missing = sorted(path for path in wanted if not executables.get(path, False))
        steps.append(Step(
            "runtime_binary", FAIL if missing else PASS,
            (f"configured runtime binary not executable: {', '.join(missing)}" if missing
             else f"{', '.join(sorted(wanted))} executable"),
        ))
    return steps


def _imports_note(cri: dict, options: VerifyOptions) -> str:
    """Which other files containerd reads: one of them overrides what config.toml says."""
    others = [path for path in cri.get("imports", []) if path != options.containerd_config_path]
    if not others:
        return ""
    return (f" (containerd also reads {', '.join(others)}: the last of them holding this section "
            f"overrides {options.containerd_config_path})")


def containerd_steps(readout: dict, options: VerifyOptions, cri: dict | None, cri_error: str | None) -> list[Step]:
    ctrd = readout["containerd"]
    if "containerd" not in options.runtimes:
        return [Step("containerd_config", SKIP, "containerd is not in container_runtimes")]
    if not ctrd["path"]:
        return [Step("containerd_config", FAIL, "containerd is not installed")]
    if cri is None:
        return [Step("containerd_config", FAIL, f"`containerd config dump` failed: {cri_error}")]
    nvidia = cri["runtimes"].get(HANDLER)
    try:
        checked = for_containerd(options.wiring, ctrd["major"], ctrd["minor"], ctrd["version"]).checked
    except CdiUnsupported as error:
        return [Step("containerd_config", FAIL, str(error))]
    where, problems = effective_problems(ctrd["dump"], checked)
    if not nvidia:
        return [Step("containerd_config", FAIL,
                     f"no {where}.runtimes.{HANDLER} in `containerd config dump` ({options.containerd_config_path})"
                     f"{_imports_note(cri, options)}: run the runtimes stage")]
    opts = nvidia.get("options") or {}
    default = cri["default_runtime"]
    active = ctrd["active"]
    if active not in (None, "active"):
        problems.append(f"containerd is {active}")
    if problems:
        return [Step("containerd_config", FAIL, f"{where}: " + "; ".join(problems) + _imports_note(cri, options))]
    return [Step("containerd_config", PASS,
                 f"containerd {ctrd['version']}: {where}.runtimes.{HANDLER} BinaryName={opts.get('BinaryName')} "
                 f"SystemdCgroup={str(bool(opts.get('SystemdCgroup'))).lower()}, default runtime {default}")]


def docker_steps(readout: dict, options: VerifyOptions) -> list[Step]:
    if "docker" not in options.runtimes:
        return [Step("docker_config", SKIP, "docker is not in container_runtimes")]
    docker = readout["docker"]
    if not docker["path"]:
        return [Step("docker_config", FAIL, "Docker is not installed")]
    if docker["info_exit_code"] != 0 or docker.get("info_error"):
        return [Step("docker_config", FAIL, f"docker info failed (dockerd {docker['active'] or 'not running'})")]
    problems = []
    path = docker["runtimes"].get(HANDLER)
    if not path:
        problems.append("no 'nvidia' runtime in docker info")
    if options.wiring.make_default and docker["default_runtime"] != HANDLER:
        problems.append(f"default runtime is {docker['default_runtime']!r}, not 'nvidia'")
    if options.wiring.systemd_cgroup and docker["cgroup_driver"] != "systemd":
        problems.append(f"cgroup driver is {docker['cgroup_driver']!r}, not 'systemd' (systemd_cgroup=true)")
    if problems:
        return [Step("docker_config", FAIL, "; ".join(problems))]
    return [Step("docker_config", PASS,
                 f"runtime nvidia ({path}), default runtime {docker['default_runtime']}, "
                 f"cgroup driver {docker['cgroup_driver']}")]


def planned_runs(readout: dict, options: VerifyOptions) -> dict[str, str | None]:
    """Which runs to do: name -> None (run it) or the reason it is skipped."""
    ctrd, docker = readout["containerd"], readout["docker"]
    gpu = gpu_usable(readout)
    no_gpu = NO_GPU if not gpus_on_pci(readout) else "the GPU is not usable (see nvidia_smi)"
    plan: dict[str, str | None] = {}
    if "containerd" not in options.runtimes:
        plan["cri_handler"] = plan["ctr_run"] = "containerd is not in container_runtimes"
    elif not ctrd["path"] or ctrd["active"] != "active":
        plan["cri_handler"] = plan["ctr_run"] = "containerd is not running"
    else:
        plan["cri_handler"] = None if readout["crictl_path"] else (
            "crictl not installed: the CRI runtime handler 'nvidia' (the kubelet's path) was not exercised; "
            "install cri-tools to check it"
        )
        plan["ctr_run"] = gpu_run_skipped(gpu, no_gpu, ctrd["image_present"], options.image, "ctr image pull")
    if "docker" not in options.runtimes:
        plan["docker_run"] = "docker is not in container_runtimes"
    elif not docker["path"] or docker["active"] != "active":
        plan["docker_run"] = "Docker is not running"
    else:
        plan["docker_run"] = gpu_run_skipped(gpu, no_gpu, docker["image_present"], options.image, "docker pull")
    return plan


def gpu_run_skipped(gpu: bool, no_gpu: str, image_present: bool, image: str, pull: str) -> str | None:
    """Why a container with the GPUs cannot run on a running runtime, or None when it can."""
    if not gpu:
        return no_gpu
    if not image_present:
        return f"image {image} not on the node ({pull} {image})"
    return None


def cri_step(result: dict, gpu: bool, image: str, cdi: CdiProbe | None = None) -> Step:
    runp = result.get("runp")
    if not runp:
        return Step("cri_handler", FAIL, "crictl produced no result")
    if runp["exit_code"] != 0:
        return Step("cri_handler", FAIL,
                    f"crictl runp --runtime {HANDLER} (host-network sandbox) failed: "
                    f"{short(crictl_message(runp['output']), 300)}")
    cleanup = [name for name in ("stopp", "rmp") if not cleaned_up(result.get(name, {}))]
    note = f"; cleanup failed: {', '.join(cleanup)}" if cleanup else ""
    sandbox = f"host-network sandbox ran through runtime handler '{HANDLER}'"
    if not gpu:
        return Step("cri_handler", FAIL if cleanup else PASS, f"{sandbox} ({NO_GPU}: no nvidia-smi container){note}")
    if "image" in result:
        return Step("cri_handler", FAIL if cleanup else PASS,
                    f"{sandbox}; nvidia-smi container skipped: image {image} not on the node{note}")
    for name in ("create", "start", "logs"):
        if result.get(name, {}).get("exit_code", 1) != 0:
            output = crictl_message(result.get(name, {}).get("output", ""))
            return Step("cri_handler", FAIL, f"crictl {name} failed: {short(output, 300)}")
    container_state = result.get("state", {}).get("output", "")
    logs = without_crictl_warnings(result.get("logs", {}).get("output", ""))
    if container_state.strip() != "CONTAINER_EXITED 0":
        return Step("cri_handler", FAIL, f"nvidia-smi -L in the sandbox: {container_state or 'no state'}: {short(logs)}")
    cdi_note = ""
    if cdi is not None:
        problem = cdi_container_problem(result, cdi)
        if problem:
            return Step("cri_handler", FAIL, problem)
        cdi_note = f"; CDI device {cdi.device} through the CRI: {', '.join(cdi.paths)} in the container"
        if not cleaned_up(result.get("cdi_rm", {})):
            cleanup.append("cdi_rm")
            note = f"; cleanup failed: {', '.join(cleanup)}"
    return Step("cri_handler", FAIL if cleanup else PASS,
                f"{sandbox}; nvidia-smi -L: {short(logs, 120)}{cdi_note}{note}")


def run_step(name: str, result: dict, what: str) -> Step:
    if result["exit_code"] == 0:
        return Step(name, PASS, f"{what}: {short(result['output'], 120)}")
    return Step(name, FAIL, f"{what} exited {result['exit_code']}: {short(result['output'])}")
