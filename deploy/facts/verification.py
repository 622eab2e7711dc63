"""
Verification facts: everything verify reads, in one command. The runs that prove a container
starts through the nvidia runtime (crictl, ctr, docker) change the node for a moment: they are
probes (deploy/operations/probes.py), not facts.

Every command exits 0 and reports status in its output (a failing fact would fail the host
before the report is written). ``nvidia-smi`` parsing lives here: the driver stage's facts
(deploy/facts/nvidia.py) read the PCI bus and modules, not nvidia-smi.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any

from ..foundations import node_text, shell_scripts
from ..runtimes import registry
from .base import NodeFact

SMI_QUERY_FIELDS = ("index", "uuid", "name", "memory.total", "driver_version")
SMI_QUERY = f"--query-gpu={','.join(SMI_QUERY_FIELDS)} --format=csv,noheader,nounits"
# "Enabled" / "Disabled" per GPU: persistence mode, however it was set (nvidia-persistenced or nvidia-smi -pm)
SMI_PERSISTENCE_QUERY = "--query-gpu=index,persistence_mode --format=csv,noheader"
PERSISTENCED_UNIT = "nvidia-persistenced"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# Values nvidia-smi prints instead of a value.
SMI_MISSING = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]", ""}

# The nvidia-smi man page, "RETURN VALUE".
SMI_EXIT_CODES = {
    2: "a supplied argument or flag is invalid",
    3: "the requested operation is not available on the target device",
    4: "insufficient permissions to access the device",
    6: "no NVIDIA device found (a query to find an object was unsuccessful)",
    8: "a GPU's external power cables are not properly attached",
    9: "NVIDIA driver is not loaded",
    10: "the NVIDIA kernel driver detected an interrupt issue with a GPU",
    12: "the NVML shared library could not be found or loaded",
    13: "the local NVML does not implement this function",
    14: "a GPU's infoROM is corrupted",
    15: "a GPU has fallen off the bus or is otherwise inaccessible",
    127: "nvidia-smi could not be run",
    255: "other error or internal driver error",
}


def smi_value(raw: str) -> str | None:
    value = raw.strip()
    return None if value.lower() in SMI_MISSING else value


def parse_smi_query(lines: list[str]) -> list[dict[str, Any]]:
    """Lines of ``nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version
    --format=csv,noheader,nounits`` -> one dict per GPU; ``[N/A]`` / ``[Not Supported]`` -> None."""
    gpus = []
    for row in csv.reader([line for line in lines if line.strip()], skipinitialspace=True):
        if len(row) != len(SMI_QUERY_FIELDS):
            continue
        values = dict(zip(SMI_QUERY_FIELDS, (smi_value(cell) for cell in row)))
        index = values["index"]
        memory = values["memory.total"]
        gpus.append(
            {
                "index": int(index) if index and index.isdigit() else None,
                "uuid": values["uuid"],
                "name": values["name"],
                "memory_mib": int(memory) if memory and memory.isdigit() else None,
                "driver_version": values["driver_version"],
            }
        )
    return gpus


LIST_GPU_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)")
LIST_MIG_RE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")


def parse_smi_list(lines: list[str]) -> list[dict[str, Any]]:
    """``nvidia-smi -L`` -> GPUs with their MIG devices (empty when MIG is off)."""
    gpus: list[dict[str, Any]] = []
    for line in lines:
        gpu = LIST_GPU_RE.match(line)
        if gpu:
            gpus.append({"index": int(gpu[1]), "name": gpu[2], "uuid": gpu[3], "mig_devices": []})
            continue
        mig = LIST_MIG_RE.match(line)
        if mig and gpus:
            gpus[-1]["mig_devices"].append({"profile": mig[1], "index": int(mig[2]), "uuid": mig[3]})
    return gpus


def explain_smi_failure(exit_code: int, output: str) -> str:
    """Why nvidia-smi failed, in one line, with what to do where it is known."""
    text = " ".join(output.split())
    if "driver/library version mismatch" in text.lower():
        library = re.search(r"NVML library version: (\S+)", text)
        seen = f" (NVML library {library[1]})" if library else ""
        return (
            f"Driver/library version mismatch{seen}: the loaded kernel module and the user-space "
            "library differ; reboot, or unload and reload the nvidia modules"
        )
    if exit_code == 9 or "couldn't communicate with the nvidia driver" in text.lower():
        return f"exit {exit_code}: NVIDIA driver is not loaded (nvidia-smi couldn't communicate with the NVIDIA driver)"
    if "failed to initialize nvml" in text.lower():
        return f"exit {exit_code}: {text[:160]} (user-space driver present without a working kernel driver)"
    meaning = SMI_EXIT_CODES.get(exit_code, "unknown error")
    detail = f": {text[:160]}" if text else ""
    return f"exit {exit_code}: {meaning}{detail}"


# What verify reads beside the runtimes' parts (deploy/runtimes/registry.py RuntimeReadout)
VERIFY_SCRIPT = shell_scripts.body("verify_readout")


def executable_checks(paths: Iterable[str]) -> str:
    """Shell printing ``exec 1 <path>`` for each of ``paths`` that resolves to an executable as a
    runtime's exec would find it (a bare name on the PATH), else ``exec 0 <path>``."""
    return shell_scripts.script("executables", paths)


def parse_executables(lines: Iterable[str]) -> dict[str, bool]:
    """``exec 1 <path>`` / ``exec 0 <path>`` lines -> {path: executable}."""
    found = {}
    for line in lines:
        kind, _, rest = line.strip().partition(" ")
        if kind == "exec":
            flag, _, path = rest.strip().partition(" ")
            found[path] = flag == "1"
    return found


class Executables(NodeFact[dict[str, Any]]):
    """
    Whether each path resolves to an executable, as a runtime's exec would find it (a bare name is
    looked up on the PATH).

    .. code:: python

        {"/usr/bin/nvidia-container-runtime": True, "nvidia-container-runtime-experimental": False}
    """

    def command(self, paths: Iterable[str]) -> str:
        return executable_checks(paths).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_executables(output)


class VerifyReadout(NodeFact[dict[str, Any]]):
    """
    What verify reads besides the node facts (``NodeSurvey``, deploy/facts/nvidia.py:
    PCI GPUs, modules, versions, read with it in one command): ``/proc/driver/nvidia/version``,
    the installed module's license (``modinfo``: open or proprietary), ``nvidia-smi`` (query, exit
    code, ``-L``, persistence mode), the nvidia-persistenced and nvidia-fabricmanager units'
    states, the toolkit, whether the given runtime ``binaries`` are executable, the kubelet config,
    crictl, and each runtime's part under its name (deploy/runtimes/registry.py: the containerd the
    node's installation runs, its binary, unit and ctr, its version and ``config dump`` being
    ContainerdConfig's, read with it; ``docker info``).

    .. code:: python

        {
            "kernel_module": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.216.03 ...",  # or None
            "kernel_module_license": "Dual MIT/GPL",  # modinfo's; None: no module for this kernel
            "smi": {"path": "/usr/bin/nvidia-smi", "exit_code": 0, "output": "...", "gpus": [...],
                    "list": [...], "persistence": {0: "Enabled"}},  # path None: not installed
            "units": {"nvidia-persistenced": {"LoadState": "loaded", "ActiveState": "active"},
                      "nvidia-fabricmanager": {"LoadState": "not-found", "ActiveState": "inactive"}},
            "toolkit_version": "1.17.8",  # None: nvidia-ctk not found
            "runtime_path": "/usr/bin/nvidia-container-runtime",
            "executables": {"/usr/bin/nvidia-container-runtime": True},
            "containerd": {"path": ..., "active": "active", "image_present": False, "ctr_path": "/usr/bin/ctr",
                           # ContainerdConfig's, filled in by deploy/operations/verification.py:
                           "version": "1.6.20~ds1", "major": 1, "minor": 6,
                           "dump_exit_code": 0, "dump": "version = 2 ..."},  # on a failure: its output
            "kubelet_config": "apiVersion: ...",  # None: no /var/lib/kubelet/config.yaml
            "docker": {"path": ..., "active": "active", "info_exit_code": 0, "runtimes": {...},
                       "default_runtime": "runc", "cgroup_driver": "systemd", "image_present": False},
            "crictl_path": None,
        }
    """

    def command(
        self, image: str, binaries: Iterable[str] = (), runtime_values: dict[str, dict[str, str]] | None = None
    ) -> str:
        """``runtime_values``: {runtime: {variable: value}} for a runtime installed another way than the
        plain one (containerd's installation in effect: its binary, unit and socket)."""
        watched = (PERSISTENCED_UNIT, FABRIC_MANAGER_UNIT)
        values = {
            name: value
            for runtime in registry.RUNTIMES
            for name, value in {**runtime.readout.values, **(runtime_values or {}).get(runtime.name, {})}.items()
        }
        readout = (
            shell_scripts.assignments(
                smi_query=SMI_QUERY,
                smi_persistence_query=SMI_PERSISTENCE_QUERY,
                keys=" ".join(f"unit:{unit}" for unit in watched),
                units=" ".join(watched),
                kubelet_config=KUBELET_CONFIG,
                image=image,
                **values,
            )
            + VERIFY_SCRIPT
            + "".join(shell_scripts.body(runtime.readout.script) for runtime in registry.RUNTIMES)
            + shell_scripts.body("verify_readout_end")
        )
        # the executables' lines after the rest: every line is keyed
        return (node_text.base64_reader() + readout + executable_checks(binaries)).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "kernel_module": None,
            "kernel_module_license": None,
            "smi": {"path": None, "exit_code": None, "output": "", "gpus": [], "list": [], "persistence": {}},
            "units": {},
            "toolkit_version": None,
            "runtime_path": None,
            "executables": {},
            **{runtime.name: runtime.readout.default() for runtime in registry.RUNTIMES},
            "kubelet_config": None,
            "crictl_path": None,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        smi = state["smi"]
        readings = {key: state[runtime.name] for runtime in registry.RUNTIMES for key in runtime.readout.keys}
        readers = {key: runtime.readout.read_line for runtime in registry.RUNTIMES for key in runtime.readout.keys}
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind in readers:
                readers[kind](readings[kind], kind, rest)
            elif kind == "kmod_version":
                state["kernel_module"] = rest or None
            elif kind == "kmod_license":
                state["kernel_module_license"] = rest or None
            elif kind == "smi_persistence":
                smi["persistence"] = parse_smi_persistence(
                    node_text.decode_b64(rest, "nvidia-smi persistence_mode") if rest else ""
                )
            elif kind == "unit":
                unit, _, properties = rest.partition(" ")
                if unit:
                    state["units"][unit] = dict(pair.split("=", 1) for pair in properties.split() if "=" in pair)
            elif kind == "smi_path":
                smi["path"] = rest or None
            elif kind == "smi_rc" and rest.lstrip("-").isdigit():
                smi["exit_code"] = int(rest)
            elif kind == "smi_out":
                smi["output"] = node_text.decode_b64(rest, "nvidia-smi output") if rest else ""
            elif kind == "smi_list":
                smi["list"] = parse_smi_list((node_text.decode_b64(rest, "nvidia-smi -L") if rest else "").splitlines())
            elif kind == "ctk_version":
                match = re.search(r"version\s+v?([0-9][^\s,]*)", rest)
                state["toolkit_version"] = match[1] if match else (rest or None)
            elif kind == "ncr_path":
                state["runtime_path"] = rest or None
            elif kind == "kubelet_config":
                state["kubelet_config"] = node_text.decode_b64(rest, KUBELET_CONFIG, keep_bytes=True) if rest else ""
            elif kind == "crictl_path":
                state["crictl_path"] = rest or None
        state["executables"] = parse_executables(output)
        if smi["exit_code"] == 0:
            smi["gpus"] = parse_smi_query(smi["output"].splitlines())
        return state


def parse_smi_persistence(text: str) -> dict[int, str]:
    """``nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader`` -> {index: "Enabled"}."""
    modes = {}
    for row in csv.reader([line for line in text.splitlines() if line.strip()], skipinitialspace=True):
        if len(row) == 2 and row[0].strip().isdigit():
            modes[int(row[0])] = row[1].strip()
    return modes


def unit_state(readout: dict[str, Any], unit: str) -> str:
    """A systemd unit's state in one word: "active", "inactive", "failed", ..., "not installed",
    or "unknown" (no systemctl answer)."""
    properties = readout["units"].get(unit)
    if not properties:
        return "unknown"
    if properties.get("LoadState") == "not-found":
        return "not installed"
    return properties.get("ActiveState") or "unknown"
