"""
Verify's CDI steps: whether the node should run CDI, its spec (there, current, naming every GPU),
the nvidia runtime's mode, and the device the CRI probe's CDI container asks for. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from ..facts.cdi import REFRESH_PATH_UNIT, spec_stale
from ..foundations import node_text
from ..foundations.node_text import short
from ..foundations.toml_layout import ConfigError
from ..reports.node_report import FAIL, PASS, SKIP, Step
from ..runtimes import registry
from ..runtimes.cdi import RUNTIME_CONFIG, SPEC_PATH, runtime_mode_of
from .options import NO_GPU, VerifyOptions
from .readout import crictl_message, gpu_usable, without_crictl_warnings


@dataclass(frozen=True)
class CdiProbe:
    """What verify's CRI probe asks for through ``CDI_devices`` on a CDI node, and the device nodes
    the spec gives it there, which must then be in the container."""

    device: str  # nvidia.com/gpu=GPU-<uuid>, or nvidia.com/gpu=all
    paths: tuple[str, ...]


def cdi_expected(readout: dict[str, Any], options: VerifyOptions) -> bool:
    """Whether the node should run CDI: asked, or (auto) a wired runtime's version has it, as the CDI
    stage decides (a runtime whose reading holds no version, Docker's, counts as without)."""
    if options.cdi != "auto":
        return options.cdi == "true"
    return any(
        runtime.name in options.runtimes
        and readout[runtime.name]["path"]
        and runtime.cdi(options.wiring, readout[runtime.name]).on
        for runtime in registry.RUNTIMES
    )


def cdi_spec_names(text: str) -> list[str]:
    """The device names a CDI spec gives (raises ValueError when it is not a spec)."""
    try:
        spec = node_text.parsed(yaml.safe_load, text, SPEC_PATH)
    except yaml.YAMLError as error:
        raise ValueError(f"{SPEC_PATH} is not YAML: {short(node_text.syntax_error(error, text))}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), list) or "kind" not in spec:
        raise ValueError(f"{SPEC_PATH} is not a CDI spec (no kind or devices)")
    return [str(device.get("name")) for device in spec["devices"] if isinstance(device, dict)]


def cdi_summary(readout: dict[str, Any], options: VerifyOptions) -> str:
    if not cdi_expected(readout, options):
        return "off"
    state = readout["cdi"]
    if state["spec"] is None:
        return "on, no spec"
    return "on, spec stale" if spec_stale(state) else "on, spec current"


def cdi_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    """The CDI spec: there, current, naming every GPU the driver sees by UUID; the refresh running."""
    if not cdi_expected(readout, options):
        return Step("cdi", SKIP, f"CDI is off (cdi={options.cdi})")
    state = readout["cdi"]
    regenerate = f"regenerate it: `nvidia-ctk cdi generate --output={SPEC_PATH}` (or run the deploy)"
    if state["refresh_unit"] and (state["refresh_enabled"], state["refresh_active"]) != ("enabled", "active"):
        return Step(
            "cdi",
            FAIL,
            f"{REFRESH_PATH_UNIT} is {state['refresh_enabled'] or 'not enabled'} and "
            f"{state['refresh_active'] or 'inactive'}: the spec will not follow driver changes",
        )
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
    return Step(
        "cdi",
        PASS,
        f"{SPEC_PATH} names every GPU the driver sees ({len(uuids)} by UUID)"
        + (f"; {REFRESH_PATH_UNIT} active" if state["refresh_unit"] else ""),
    )


def runtime_mode_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
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
        return Step(
            "runtime_mode",
            FAIL,
            f"{where}: mode {mode!r}, not {options.runtime_mode!r} (nvidia_runtime_mode): run the deploy",
        )
    return Step("runtime_mode", PASS, f"{where}: mode {mode!r}")


def cri_cdi_probe(readout: dict[str, Any], options: VerifyOptions) -> CdiProbe | None:
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


def _device_node_paths(holder: dict[str, Any]) -> list[str]:
    """The container paths of the device nodes a spec's or a device's ``containerEdits`` give."""
    edits = found if isinstance(found := holder.get("containerEdits"), dict) else {}
    nodes = listed if isinstance(listed := edits.get("deviceNodes"), list) else []
    return [str(node["path"]) for node in nodes if isinstance(node, dict) and node.get("path")]


def cdi_container_problem(result: dict[str, Any], cdi: CdiProbe) -> str | None:
    """What went wrong with the CRI probe's CDI container (None: it had every device node the spec
    gives ``cdi.device``)."""
    for name in ("create", "start", "logs"):
        step = result.get(f"cdi_{name}", {})
        if step.get("exit_code", 1) != 0:
            said = short(crictl_message(step.get("output", "")), 300)
            return f"crictl {name} with CDI device {cdi.device} failed: {said}"
    container_state = result.get("cdi_state", {}).get("output", "")
    if container_state.strip() != "CONTAINER_EXITED 0":
        return f"the container given CDI device {cdi.device}: {container_state or 'no state'}"
    logs = without_crictl_warnings(result.get("cdi_logs", {}).get("output", ""))
    seen = {line.removeprefix("device ").strip() for line in logs.splitlines() if line.startswith("device ")}
    missing = [path for path in cdi.paths if path not in seen]
    if missing:
        return (
            f"the container given CDI device {cdi.device} through the CRI lacks {', '.join(missing)} "
            f"(the spec gives them): containerd did not inject it"
        )
    return None
