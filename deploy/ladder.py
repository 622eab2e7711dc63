"""
The verification ladder, pure: from what verify read on a node (deploy/facts/ladder.py), what it
compares against (``VerifyOptions``, from the settings) and the results of the runs it did
(deploy/probes.py), every step with its status and one-line reason. No host, no commands: the
operation in deploy/operations/verification.py reads, runs and records.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass

import yaml
from packaging.version import InvalidVersion, Version

from . import node_text, redact
from .cdi import RUNTIME_CONFIG, SPEC_PATH, CdiUnsupported, for_containerd, runtime_mode_of
from .fabric import fabric_of
from .facts.cdi import REFRESH_PATH_UNIT, spec_stale
from .facts.cuda import TIMED_OUT, TIMEOUT_SECONDS
from .facts.devices import missing_links
from .facts.ladder import (
    FABRIC_MANAGER_UNIT, KUBELET_CONFIG, PERSISTENCED_UNIT, explain_smi_failure, unit_state,
)
from .kernel_coverage import boot_kernels_step
from .driver_version_set import version_set_step
from .containerd.cri import dump_cri_plugin, effective_problems
from .containerd.layout import ConfigError, tomllib
from .report import FAIL, PASS, SKIP, NodeRecord, Step
from .settings import MIN_DRIVER_VERSION, RuntimeWiring, Settings

NO_GPU = "no NVIDIA GPU"
HANDLER = "nvidia"


@dataclass(frozen=True)
class VerifyOptions:
    """What the ladder compares against: the settings it reads, with their defaults from
    deploy/settings.py (``from_settings(parse_settings({}))`` is the default ladder)."""

    require_gpu: bool
    runtimes: tuple[str, ...]
    # what the runtimes stage wires into containerd (Settings.runtime_wiring)
    wiring: RuntimeWiring
    containerd_config_path: str
    image: str
    toolkit_expected: bool
    min_driver: str = MIN_DRIVER_VERSION
    # the data-center settings verify checks the node against
    kernel_modules: str = "auto"
    persistenced: bool = True
    fabric_manager_install: bool = True
    cdi: str = "auto"
    driver_root: str = "/"
    runtime_mode: str | None = None  # nvidia_runtime_mode

    @classmethod
    def from_settings(cls, settings: Settings) -> "VerifyOptions":
        return cls(
            require_gpu=settings.require_gpu,
            runtimes=settings.container_runtimes,
            wiring=settings.runtime_wiring,
            containerd_config_path=settings.containerd_config_path,
            image=settings.verify_image,
            toolkit_expected=settings.nvidia_toolkit_install,
            kernel_modules=settings.nvidia_kernel_modules,
            persistenced=settings.nvidia_persistenced,
            fabric_manager_install=settings.fabric_manager_install,
            cdi=settings.cdi,
            driver_root=settings.nvidia_driver_root,
            runtime_mode=settings.nvidia_runtime_mode,
        )


@dataclass(frozen=True)
class CdiProbe:
    """What verify's CRI probe asks for through ``CDI_devices`` on a CDI node, and the device nodes
    the spec gives it there, which must then be in the container."""

    device: str  # nvidia.com/gpu=GPU-<uuid>, or nvidia.com/gpu=all
    paths: tuple[str, ...]


# ----------------------------------------------------------------------------------------------
# Reading the facts


def gpus_on_pci(readout: dict) -> list[dict]:
    return readout["node"]["gpus"]


def gpu_usable(readout: dict) -> bool:
    """A GPU is there and nvidia-smi talks to it: the runs with --gpus make sense."""
    return bool(gpus_on_pci(readout)) and readout["smi"]["exit_code"] == 0 and bool(readout["smi"]["gpus"])


def kernel_module_version(text: str | None) -> str | None:
    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", (text or "") + " ")
    return match[1] if match else None


def driver_version(readout: dict) -> str | None:
    versions = [gpu["driver_version"] for gpu in readout["smi"]["gpus"] if gpu["driver_version"]]
    return versions[0] if versions else kernel_module_version(readout["kernel_module"])


def parse_cri_runtimes(dump: str) -> dict:
    """``containerd config dump`` -> the CRI plugin's runtimes and default runtime name."""
    # Read only: the standard library's reader, not tomlkit's round-trip parser (about ten times
    # slower, and a fleet's verification parses one dump per node on the controller).
    config = node_text.parsed(tomllib.loads, dump, "`containerd config dump`")
    containerd = config.get("plugins", {}).get(dump_cri_plugin(config), {}).get("containerd", {})
    return {
        "default_runtime": containerd.get("default_runtime_name"),
        "runtimes": containerd.get("runtimes", {}) or {},
        "imports": [path for path in config.get("imports", []) if isinstance(path, str)],
    }


def read_cri(readout: dict) -> tuple[dict | None, str | None]:
    """The one reading of ``containerd config dump``: (the CRI runtimes, None) or (None, why not)."""
    dump = readout["containerd"]["dump"]
    if readout["containerd"]["dump_exit_code"] == 0 and dump:
        try:
            return parse_cri_runtimes(dump), None
        except Exception as error:  # a TOML error or an unexpected shape; the reason is what matters
            return None, f"cannot parse its output: {error}"
    if readout["containerd"]["path"]:
        return None, _short(redact.daemon_output(dump or "no output"))
    return None, None


def configured_binaries(readout: dict, cri: dict | None) -> set[str]:
    """The nvidia runtime's binary as containerd's parsed dump and ``docker info`` name it."""
    binaries = set()
    if cri:
        binary = ((cri["runtimes"].get(HANDLER) or {}).get("options") or {}).get("BinaryName")
        if binary:
            binaries.add(binary)
    if readout["docker"]["runtimes"].get(HANDLER):
        binaries.add(readout["docker"]["runtimes"][HANDLER])
    return binaries


def kubelet_cgroup_driver(text: str) -> str:
    config = node_text.parsed(yaml.safe_load, text, KUBELET_CONFIG) or {}
    # The kubelet's own default when the file does not set it.
    return str(config.get("cgroupDriver") or "cgroupfs") if isinstance(config, dict) else "cgroupfs"


# ----------------------------------------------------------------------------------------------
# The ladder


def gpu_steps(readout: dict, options: VerifyOptions) -> list[Step]:
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
        steps.append(Step(
            "kernel_module", FAIL,
            "nvidia kernel module not loaded (/proc/driver/nvidia/version missing): reboot after the "
            "driver install, or check dmesg for why nvidia did not load (Secure Boot signing?)",
        ))

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
        steps.append(Step("driver_version", FAIL if pci else SKIP,
                          ("" if pci else f"{NO_GPU}: ") + "no driver version (no loaded module, no nvidia-smi answer)"))
    elif loaded and library and loaded != library:
        steps.append(Step("driver_version", FAIL,
                          f"kernel module {loaded} but user-space library {library}: reboot, or reload the nvidia modules"))
    else:
        try:
            ok = Version(version) >= Version(options.min_driver)
        except InvalidVersion:
            ok = False
        steps.append(Step("driver_version", PASS if ok else FAIL,
                          f"driver {version} {'>=' if ok else '<'} {options.min_driver} (lowest accepted)"))
    return steps


# modinfo's license of each flavour of the nvidia module
MODULE_LICENSES = {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}
# cuInit's CUDA_ERROR_SYSTEM_NOT_READY: on an NVSwitch node, the fabric is not up (Fabric Manager)
SYSTEM_NOT_READY = 802


def loaded_flavour(readout: dict) -> str | None:
    """The loaded module's flavour, from /proc/driver/nvidia/version ("... Open Kernel Module ...")."""
    text = readout["kernel_module"]
    if not text:
        return None
    return "open" if "Open Kernel Module" in text else "proprietary"


def installed_flavour(readout: dict) -> str | None:
    """The flavour of the module installed for the running kernel, from modinfo's license."""
    license_ = readout["kernel_module_license"]
    return MODULE_LICENSES.get(license_, f"unknown (license {license_})") if license_ else None


def flavour_summary(readout: dict) -> str | None:
    loaded, installed = loaded_flavour(readout), installed_flavour(readout)
    if loaded:
        return loaded
    return f"{installed} (installed, not loaded)" if installed else None


def flavour_step(readout: dict, options: VerifyOptions) -> Step:
    loaded, installed = loaded_flavour(readout), installed_flavour(readout)
    wanted = options.kernel_modules
    setting = f"nvidia_kernel_modules = {wanted}"
    license_note = f" (modinfo license {readout['kernel_module_license']})" if installed else ""
    if loaded:
        if wanted != "auto" and loaded != wanted:
            return Step("module_flavour", FAIL,
                        f"the {loaded} nvidia kernel module is loaded but {setting}: run the driver stage, then reboot")
        if installed and installed != loaded:
            return Step("module_flavour", FAIL,
                        f"the {loaded} nvidia kernel module is loaded but the {installed} one is installed"
                        f"{license_note}: reboot to load it")
        return Step("module_flavour", PASS,
                    f"{loaded} kernel module loaded (/proc/driver/nvidia/version; {setting})")
    if installed and wanted != "auto" and installed != wanted:
        return Step("module_flavour", FAIL,
                    f"the {installed} nvidia kernel module is installed{license_note} but {setting}: run the driver stage")
    prefix = "" if gpus_on_pci(readout) else f"{NO_GPU}: "
    if installed:
        return Step("module_flavour", SKIP,
                    f"{prefix}nvidia kernel module not loaded; the installed one is {installed}{license_note}")
    return Step("module_flavour", SKIP, f"{prefix}no nvidia kernel module loaded or installed")


def persistence_modes(readout: dict) -> dict[int, str]:
    return readout["smi"]["persistence"] if readout["smi"]["exit_code"] == 0 else {}


def persistence_summary(readout: dict) -> str:
    modes = persistence_modes(readout)
    text = f"{PERSISTENCED_UNIT} {unit_state(readout, PERSISTENCED_UNIT)}"
    if modes:
        enabled = sum(mode == "Enabled" for mode in modes.values())
        text += f", mode on {enabled}/{len(modes)} GPU(s)"
    return text


def persistence_step(readout: dict, options: VerifyOptions) -> Step:
    state = unit_state(readout, PERSISTENCED_UNIT)
    modes = persistence_modes(readout)
    disabled = sorted(index for index, mode in modes.items() if mode != "Enabled")
    seen = f"{PERSISTENCED_UNIT} {state}"
    if not options.persistenced:
        return Step("persistence", SKIP, f"nvidia_persistenced is false ({seen})")
    if not gpus_on_pci(readout):
        return Step("persistence", SKIP, f"{NO_GPU} ({seen})")
    if state != "active":
        return Step("persistence", FAIL,
                    f"{seen}: the driver is set up and torn down with every CUDA client; "
                    f"systemctl enable --now {PERSISTENCED_UNIT}")
    if disabled:
        listed = ", ".join(str(index) for index in disabled)
        return Step("persistence", FAIL, f"{seen} but persistence mode is off on GPU {listed} (nvidia-smi)")
    if not modes:
        return Step("persistence", PASS, f"{seen} (persistence mode not read: nvidia-smi did not answer)")
    return Step("persistence", PASS, f"{seen}; persistence mode Enabled on {len(modes)} GPU(s)")


def fabric_manager_summary(readout: dict) -> str:
    if not fabric_of(readout["node"]).needs_fabric_manager:
        return "not needed"
    return unit_state(readout, FABRIC_MANAGER_UNIT)


def fabric_manager_step(readout: dict, options: VerifyOptions) -> Step:
    fabric = fabric_of(readout["node"])
    state = unit_state(readout, FABRIC_MANAGER_UNIT)
    if not fabric.needs_fabric_manager:
        installed = f" ({FABRIC_MANAGER_UNIT} {state})" if state not in ("not installed", "unknown") else ""
        return Step("fabric_manager", SKIP, f"{fabric.evidence}: Fabric Manager not needed{installed}")
    if state == "active":
        return Step("fabric_manager", PASS, f"{FABRIC_MANAGER_UNIT} active ({fabric.evidence})")
    hint = (f"systemctl enable --now {FABRIC_MANAGER_UNIT}" if state != "not installed" else
            "install Fabric Manager at the driver's version" +
            ("" if options.fabric_manager_install else " (fabric_manager_install is false)"))
    return Step("fabric_manager", FAIL,
                f"{FABRIC_MANAGER_UNIT} {state} on a node with {fabric.evidence}: CUDA cannot start "
                f"without it; {hint}")


def cuda_summary(readout: dict) -> str:
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
            f", CUDA {cuda['driver_version']}" if cuda["driver_version"] else "")
    return f"error {code} {cuda['error_name'] or ''}".strip()


def cuda_error(cuda: dict) -> str:
    """cuInit's failure as the library itself names it."""
    code = cuda["init_result"]
    named = f"CUDA error {code} {cuda['error_name'] or '(the library gives it no name)'}"
    return named + (f": {cuda['error_string']}" if cuda["error_string"] else "")


def cuda_step(readout: dict, options: VerifyOptions) -> Step:
    """cuInit through the driver's libcuda.so.1 (deploy/facts/cuda.py): CUDA starts, not only nvidia-smi."""
    cuda = readout["cuda"]
    fabric = fabric_of(readout["node"])
    # Where a GPU should answer, a failure fails; elsewhere it is reported as what the library said.
    expected = bool(gpus_on_pci(readout)) or fabric.needs_fabric_manager or options.require_gpu

    def failed(why: str) -> Step:
        return Step("cuda", FAIL, why) if expected else Step("cuda", SKIP, f"{NO_GPU} ({why})")

    if cuda["python"] is None:
        return Step("cuda", SKIP, "not checked: no python3 (nor /usr/libexec/platform-python) on the node "
                                  "to call cuInit through libcuda.so.1 with ctypes")
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
        return failed(f"Fabric Manager not running ({error}; {fabric.evidence}, {FABRIC_MANAGER_UNIT} {state}): "
                      f"systemctl enable --now {FABRIC_MANAGER_UNIT}")
    return failed(f"cuInit: {error} ({library})")


def datacenter_steps(readout: dict, options: VerifyOptions) -> list[Step]:
    """The module's flavour, persistence, Fabric Manager and CUDA's own start."""
    return [
        flavour_step(readout, options),
        persistence_step(readout, options),
        fabric_manager_step(readout, options),
        cuda_step(readout, options),
    ]


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


def cgroup_steps(readout: dict, options: VerifyOptions, cri: dict | None) -> list[Step]:
    if readout["kubelet_config"] is None:
        return [Step("cgroup_driver", SKIP, f"no {KUBELET_CONFIG} (the kubelet is not configured yet)")]
    try:
        driver = kubelet_cgroup_driver(readout["kubelet_config"])
    except node_text.UnreadableText as error:
        return [Step("cgroup_driver", FAIL, str(error))]
    except yaml.YAMLError as error:
        return [Step("cgroup_driver", FAIL, f"cannot parse {KUBELET_CONFIG}: "
                                            f"{node_text.syntax_error(error, readout['kubelet_config'])}")]
    kubelet_systemd = driver == "systemd"
    checks = []
    if "containerd" in options.runtimes and cri:
        for name in (HANDLER, cri["default_runtime"] or "runc"):
            runtime = cri["runtimes"].get(name)
            if runtime is not None and name not in (label for label, _ in checks):
                checks.append((name, bool((runtime.get("options") or {}).get("SystemdCgroup", False))))
    if not checks:
        return [Step("cgroup_driver", SKIP, f"kubelet cgroupDriver: {driver}; no containerd runtime to compare with")]
    wrong = [(name, value) for name, value in checks if value != kubelet_systemd]
    if wrong:
        listed = ", ".join(f"containerd runtime {name} SystemdCgroup = {str(value).lower()}" for name, value in wrong)
        fix = "systemd_cgroup=true" if kubelet_systemd else "systemd_cgroup=false"
        return [Step("cgroup_driver", FAIL,
                     f"{listed} but kubelet cgroupDriver: {driver} ({KUBELET_CONFIG}): set {fix} and re-run "
                     "deploy/gpu_node.py (or change the kubelet's cgroupDriver)")]
    return [Step("cgroup_driver", PASS,
                 f"kubelet cgroupDriver: {driver} matches SystemdCgroup = {str(kubelet_systemd).lower()}")]


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


def _short(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# crictl logs through logrus (`time=... level=fatal msg="..."`) and klog (`E1123 14:34:14 ...`);
# its fatal line carries the error, the rest repeats it or warns about a missing /etc/crictl.yaml.
LOGRUS_LINE = re.compile(r'level=(\w+) msg="((?:[^"\\]|\\.)*)"')
KLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


def crictl_message(text: str) -> str:
    """What crictl said went wrong: the messages of its error and fatal lines, unquoted."""
    messages = []
    for line in text.splitlines():
        logged = LOGRUS_LINE.search(line)
        if logged:
            if logged[1] in ("error", "fatal"):
                try:
                    messages.append(json.loads(f'"{logged[2]}"'))
                except ValueError:
                    messages.append(logged[2])
        elif line.strip() and not KLOG_LINE.match(line):
            messages.append(line.strip())
    return "; ".join(messages) or text


def without_crictl_warnings(text: str) -> str:
    """A container's logs as ``crictl logs`` printed them, without crictl's own warnings (every call
    warns when /etc/crictl.yaml is missing)."""
    return "\n".join(line for line in text.splitlines()
                     if not ((logged := LOGRUS_LINE.search(line)) and line.startswith("time=")
                             and logged[1] == "warning"))


def _cleaned_up(step: dict) -> bool:
    """Done, or the sandbox is gone already: on a kubelet node the kubelet may remove it first."""
    output = step.get("output", "")
    return step.get("exit_code", 1) == 0 or "code = NotFound" in output or "not found" in output


def cri_cdi_probe(readout: dict, options: VerifyOptions) -> CdiProbe | None:
    """The CDI device the CRI probe's second container asks for: on a CDI node with a usable GPU and a
    spec, the first GPU the driver sees by its UUID where the spec names it, else ``all``; None: no
    such container (the cdi step says why)."""
    state = readout["cdi"]
    if not (cdi_expected(readout, options) and gpu_usable(readout) and state["spec"]):
        return None
    try:
        cdi_spec_names(state["spec"])
    except ValueError:
        return None
    spec = node_text.parsed(yaml.safe_load, state["spec"], SPEC_PATH)
    devices = {str(device.get("name")): device for device in spec["devices"] if isinstance(device, dict)}
    uuids = [gpu["uuid"] for gpu in readout["smi"]["gpus"] if gpu.get("uuid")]
    name = uuids[0] if uuids and uuids[0] in devices else "all"
    if name not in devices:
        return None
    paths = _device_node_paths(devices[name]) + _device_node_paths(spec)
    return CdiProbe(f"{spec['kind']}={name}", tuple(dict.fromkeys(paths))) if paths else None


def _device_node_paths(holder: dict) -> list[str]:
    """The container paths of the device nodes a spec's or a device's ``containerEdits`` give."""
    edits = holder.get("containerEdits") if isinstance(holder.get("containerEdits"), dict) else {}
    nodes = edits.get("deviceNodes") if isinstance(edits.get("deviceNodes"), list) else []
    return [str(node["path"]) for node in nodes if isinstance(node, dict) and node.get("path")]


def cdi_container_problem(result: dict, cdi: CdiProbe) -> str | None:
    """What went wrong with the CRI probe's CDI container (None: it had every device node the spec
    gives ``cdi.device``)."""
    for name in ("create", "start", "logs"):
        step = result.get(f"cdi_{name}", {})
        if step.get("exit_code", 1) != 0:
            said = _short(crictl_message(step.get("output", "")), 300)
            return f"crictl {name} with CDI device {cdi.device} failed: {said}"
    container_state = result.get("cdi_state", {}).get("output", "")
    if container_state.strip() != "CONTAINER_EXITED 0":
        return f"the container given CDI device {cdi.device}: {container_state or 'no state'}"
    logs = without_crictl_warnings(result.get("cdi_logs", {}).get("output", ""))
    seen = {line.removeprefix("device ").strip() for line in logs.splitlines() if line.startswith("device ")}
    missing = [path for path in cdi.paths if path not in seen]
    if missing:
        return (f"the container given CDI device {cdi.device} through the CRI lacks {', '.join(missing)} "
                f"(the spec gives them): containerd did not inject it")
    return None


def cri_step(result: dict, gpu: bool, image: str, cdi: CdiProbe | None = None) -> Step:
    runp = result.get("runp")
    if not runp:
        return Step("cri_handler", FAIL, "crictl produced no result")
    if runp["exit_code"] != 0:
        return Step("cri_handler", FAIL,
                    f"crictl runp --runtime {HANDLER} (host-network sandbox) failed: "
                    f"{_short(crictl_message(runp['output']), 300)}")
    cleanup = [name for name in ("stopp", "rmp") if not _cleaned_up(result.get(name, {}))]
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
            return Step("cri_handler", FAIL, f"crictl {name} failed: {_short(output, 300)}")
    container_state = result.get("state", {}).get("output", "")
    logs = without_crictl_warnings(result.get("logs", {}).get("output", ""))
    if container_state.strip() != "CONTAINER_EXITED 0":
        return Step("cri_handler", FAIL, f"nvidia-smi -L in the sandbox: {container_state or 'no state'}: {_short(logs)}")
    cdi_note = ""
    if cdi is not None:
        problem = cdi_container_problem(result, cdi)
        if problem:
            return Step("cri_handler", FAIL, problem)
        cdi_note = f"; CDI device {cdi.device} through the CRI: {', '.join(cdi.paths)} in the container"
        if not _cleaned_up(result.get("cdi_rm", {})):
            cleanup.append("cdi_rm")
            note = f"; cleanup failed: {', '.join(cleanup)}"
    return Step("cri_handler", FAIL if cleanup else PASS,
                f"{sandbox}; nvidia-smi -L: {_short(logs, 120)}{cdi_note}{note}")


def run_step(name: str, result: dict, what: str) -> Step:
    if result["exit_code"] == 0:
        return Step(name, PASS, f"{what}: {_short(result['output'], 120)}")
    return Step(name, FAIL, f"{what} exited {result['exit_code']}: {_short(result['output'])}")


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


def cdi_expected(readout: dict, options: VerifyOptions) -> bool:
    """Whether the node should run CDI: asked, or (auto) its containerd has it (as the CDI stage decides;
    Docker's version is not read here)."""
    if options.cdi != "auto":
        return options.cdi == "true"
    ctrd = readout["containerd"]
    return ("containerd" in options.runtimes and bool(ctrd["path"])
            and for_containerd(options.wiring, ctrd["major"], ctrd["minor"], ctrd["version"]).on)


def cdi_spec_names(text: str) -> list[str]:
    """The device names a CDI spec gives (raises ValueError when it is not a spec)."""
    try:
        spec = node_text.parsed(yaml.safe_load, text, SPEC_PATH)
    except yaml.YAMLError as error:
        raise ValueError(f"{SPEC_PATH} is not YAML: {_short(node_text.syntax_error(error, text))}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), list) or "kind" not in spec:
        raise ValueError(f"{SPEC_PATH} is not a CDI spec (no kind or devices)")
    return [str(device.get("name")) for device in spec["devices"] if isinstance(device, dict)]


def cdi_summary(readout: dict, options: VerifyOptions) -> str:
    if not cdi_expected(readout, options):
        return "off"
    state = readout["cdi"]
    if state["spec"] is None:
        return "on, no spec"
    return "on, spec stale" if spec_stale(state) else "on, spec current"


def cdi_step(readout: dict, options: VerifyOptions) -> Step:
    """The CDI spec: there, current, naming every GPU the driver sees by UUID; the refresh running."""
    if not cdi_expected(readout, options):
        return Step("cdi", SKIP, f"CDI is off (cdi={options.cdi})")
    state = readout["cdi"]
    regenerate = f"regenerate it: `nvidia-ctk cdi generate --output={SPEC_PATH}` (or run the deploy)"
    if state["refresh_unit"] and (state["refresh_enabled"], state["refresh_active"]) != ("enabled", "active"):
        return Step("cdi", FAIL, f"{REFRESH_PATH_UNIT} is {state['refresh_enabled'] or 'not enabled'} and "
                                 f"{state['refresh_active'] or 'inactive'}: the spec will not follow driver changes")
    uuids = [gpu["uuid"] for gpu in readout["smi"]["gpus"] if gpu.get("uuid")]
    if state["spec"] is None:
        if not gpu_usable(readout):
            return Step("cdi", SKIP, f"{NO_GPU}: no CDI spec until the driver answers with one")
        return Step("cdi", FAIL, f"no CDI spec at {SPEC_PATH}: {regenerate}")
    try:
        names = cdi_spec_names(state["spec"])
    except ValueError as error:
        return Step("cdi", FAIL, f"{error}: {regenerate}")
    if spec_stale(state):
        return Step("cdi", FAIL, f"{SPEC_PATH} is older than the driver's module index or nvidia-ctk: {regenerate}")
    missing = [uuid for uuid in uuids if uuid not in names]
    if missing:
        return Step("cdi", FAIL, f"{SPEC_PATH} does not name {', '.join(missing)}, which the driver sees: {regenerate}")
    return Step("cdi", PASS, f"{SPEC_PATH} names every GPU the driver sees ({len(uuids)} by UUID)"
                + (f"; {REFRESH_PATH_UNIT} active" if state["refresh_unit"] else ""))


def runtime_mode_step(readout: dict, options: VerifyOptions) -> Step:
    """The nvidia runtime's mode in its config.toml is the one nvidia_runtime_mode asks."""
    if options.runtime_mode is None:
        return Step("runtime_mode", SKIP, f"nvidia_runtime_mode is unset: {RUNTIME_CONFIG} is left as it is")
    text = readout["cdi"].get("runtime_config")
    try:
        mode = runtime_mode_of(text)
    except ConfigError as error:
        return Step("runtime_mode", FAIL, str(error))
    where = RUNTIME_CONFIG if text is not None else f"no {RUNTIME_CONFIG}, so the runtime's default"
    if mode != options.runtime_mode:
        return Step("runtime_mode", FAIL, f"{where}: mode {mode!r}, not {options.runtime_mode!r} "
                                          "(nvidia_runtime_mode): run the deploy")
    return Step("runtime_mode", PASS, f"{where}: mode {mode!r}")


def dev_char_step(readout: dict, options: VerifyOptions) -> Step:
    """Every NVIDIA device node linked in /dev/char, where the systemd cgroup driver needs it."""
    if not options.wiring.systemd_cgroup:
        return Step("dev_char", SKIP, "systemd_cgroup is false: systemd does not manage the containers' devices")
    devices = readout["device_links"]
    if not devices:
        return Step("dev_char", SKIP, f"no NVIDIA device nodes under {posixpath.join(options.driver_root, 'dev')}")
    missing = missing_links(devices)
    if missing:
        listed = ", ".join(f"{device['node']} ({device['id']})" for device in missing)
        return Step("dev_char", FAIL, f"no /dev/char link for {listed}: a systemd daemon-reload takes it from "
                                      "running containers; run the deploy (its device links stage)")
    return Step("dev_char", PASS, f"{len(devices)} NVIDIA device node(s) linked in /dev/char")


def ladder(readout: dict, options: VerifyOptions, runs: dict[str, dict],
           cri: dict | None, cri_error: str | None) -> list[Step]:
    """Every step, in order, from the facts, containerd's parsed dump (``read_cri``) and the results
    of the runs that were done."""
    steps = gpu_steps(readout, options)
    steps += datacenter_steps(readout, options)
    steps.append(boot_kernels_step(readout.get("kernels")))
    steps.append(version_set_step(readout["node"]["loaded_version"], readout.get("kernels")))
    steps += toolkit_steps(readout, options, cri)
    steps += containerd_steps(readout, options, cri, cri_error)
    steps += cgroup_steps(readout, options, cri)
    steps.append(cdi_step(readout, options))
    steps.append(runtime_mode_step(readout, options))
    steps.append(dev_char_step(readout, options))
    plan = planned_runs(readout, options)
    gpu = gpu_usable(readout)
    if plan["cri_handler"] is not None:
        steps.append(Step("cri_handler", SKIP, plan["cri_handler"]))
    else:
        steps.append(cri_step(runs.get("cri_handler", {}), gpu, options.image, cri_cdi_probe(readout, options)))
    if plan["ctr_run"] is not None:
        steps.append(Step("ctr_run", SKIP, plan["ctr_run"]))
    else:
        steps.append(run_step("ctr_run", runs["ctr_run"], "ctr run --gpus 0 nvidia-smi"))
    steps += docker_steps(readout, options)
    if plan["docker_run"] is not None:
        steps.append(Step("docker_run", SKIP, plan["docker_run"]))
    else:
        steps.append(run_step("docker_run", runs["docker_run"], "docker run --gpus all nvidia-smi"))
    return steps


def node_record(name: str, readout: dict, options: VerifyOptions, steps: list[Step]) -> NodeRecord:
    smi_gpus = readout["smi"]["gpus"]
    if smi_gpus:
        gpus = [f"{gpu['name'] or '?'} ({gpu['uuid'] or 'no UUID'})" for gpu in smi_gpus]
    else:
        gpus = [f"{gpu['slot']} 10de:{gpu['device'].removeprefix('0x')}" for gpu in gpus_on_pci(readout)]
    runtime = []
    if "containerd" in options.runtimes and readout["containerd"]["path"]:
        runtime.append(f"containerd {readout['containerd']['version'] or '?'}")
    if "docker" in options.runtimes and readout["docker"]["path"]:
        runtime.append(f"docker (default {readout['docker']['default_runtime'] or '?'})")
    return NodeRecord(
        host=name,
        gpus=gpus,
        driver=driver_version(readout),
        toolkit=readout["toolkit_version"],
        runtime=", ".join(runtime) or None,
        module_flavour=flavour_summary(readout),
        persistence=persistence_summary(readout),
        fabric_manager=fabric_manager_summary(readout),
        cuda=cuda_summary(readout),
        cdi=cdi_summary(readout, options),
        # A reason quotes what the node printed, which can carry a URL's user-info.
        steps=[Step(step.name, step.status, redact.mask_text(step.reason)) for step in steps],
    )
