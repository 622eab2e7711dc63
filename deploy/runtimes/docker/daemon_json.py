"""
Docker's engine: daemon.json read strictly, the NVIDIA runtime merged in (data in, data out),
rendered through templates/daemon.json.j2, and what dockerd will run once the flags of its unit
(``unit.py``) have their say. Pure.

Every key already in the file keeps its value and its place; the merge sets only
``runtimes.nvidia``, ``default-runtime``, the systemd cgroup driver in ``exec-opts`` and,
when asked, ``features.cdi``.

dockerd refuses to start when a directive comes both as a flag (a systemd drop-in's
``--exec-opt``, ``--default-runtime``, ...) and in daemon.json, so a setting the unit's flags
already give is left to the flags; what dockerd will run with (flags + file) is then checked
against what was meant before anything changes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ...foundations import node_text, templates
from ...foundations.toml_layout import ConfigError
from ...runtimes.wiring import RuntimeWiring
from ..engine import JSON, Effective, RuntimeEngine, Wired
from .unit import DockerdFlag

SYSTEMD_CGROUP_OPT = "native.cgroupdriver=systemd"


class DaemonConfigError(ConfigError):
    """A daemon.json the merge cannot work on; the message names the file and the problem."""


@dataclass
class DockerMerged:
    config: dict[str, Any]
    changed: bool
    notes: list[str] = field(default_factory=list)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DaemonConfigError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _reject_constant(name: str) -> NoReturn:
    raise DaemonConfigError(f"{name} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if math.isinf(value):
        # Rendered back it would read Infinity, which is not JSON.
        raise DaemonConfigError(f"the number {number[:20]}... is too large for a 64-bit float")
    return value


def _strict_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant, parse_float=_finite)


def parse_daemon_json(text: str, source: str) -> dict[str, Any]:
    """Strict JSON (no duplicate keys, no NaN), an object at the top; empty text is an empty object."""
    try:
        if not node_text.checked(text, source).strip():
            return {}
        data = node_text.parsed(_strict_json, text, source)
    except node_text.UnreadableText as error:
        raise DaemonConfigError(str(error)) from None
    except json.JSONDecodeError as error:
        # error's message ends with "line L column C (char N)".
        raise DaemonConfigError(f"{source} is not valid JSON: {error}") from None
    except DaemonConfigError as error:
        raise DaemonConfigError(f"{source} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise DaemonConfigError(f"{source} is not a JSON object: it holds a {type(data).__name__} at the top level")
    return data


# key -> (types, what) for the keys Docker reads with a fixed type; used when the installed
# dockerd is older than 23.0 and cannot check a candidate itself (`dockerd --validate`).
_STRING_LIST = (list, "a list of strings")
SCHEMA = {
    "runtimes": (dict, "an object of runtimes"),
    "default-runtime": (str, "a string"),
    "exec-opts": _STRING_LIST,
    "features": (dict, "an object of booleans"),
    "registry-mirrors": _STRING_LIST,
    "insecure-registries": _STRING_LIST,
    "storage-opts": _STRING_LIST,
    "dns": _STRING_LIST,
    "log-driver": (str, "a string"),
    "log-opts": (dict, "an object of strings"),
    "storage-driver": (str, "a string"),
    "data-root": (str, "a string"),
    "bridge": (str, "a string"),
    "iptables": (bool, "true or false"),
    "ip6tables": (bool, "true or false"),
    "live-restore": (bool, "true or false"),
    "debug": (bool, "true or false"),
}


# Runtimes every dockerd knows (moby daemon/config: builtinRuntimes; 20.10 also had the v1 shim).
BUILTIN_RUNTIMES = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")


def is_containerd_shim_name(name: str) -> bool:
    """
    moby's isPermissibleC8dRuntimeName (Docker 23+): a name containerd resolves to a shim binary
    on PATH, never a path: no `/`, and a non-empty part before a first `.`.
    """
    prefix, dot, _ = name.partition(".")
    return "/" not in name and bool(dot) and bool(prefix)


def default_runtime_problem(
    config: dict[str, Any], docker_major: int | None = None, flag_runtimes: Sequence[str] = ()
) -> str | None:
    """
    Whether dockerd can start with this ``default-runtime``: a built-in or configured runtime (file or
    --add-runtime), or from Docker 23 on a containerd shim name. `dockerd --validate` does not check
    this (dockerd only does when it starts), so it is checked here for every version.
    """
    default = config.get("default-runtime")
    runtimes = found if isinstance(found := config.get("runtimes"), dict) else {}
    if not isinstance(default, str) or default in (*BUILTIN_RUNTIMES, *runtimes, *flag_runtimes):
        return None
    if not is_containerd_shim_name(default):
        return (
            f"default-runtime {default!r} is not a configured runtime (nor a containerd shim name like "
            'io.containerd.runsc.v1): add it to "runtimes" or correct the name'
        )
    if docker_major is not None and docker_major < 23:
        return (
            f"default-runtime {default!r} is a containerd shim name, which dockerd accepts from Docker 23 "
            f'on; this dockerd is {docker_major}: name a runtime from "runtimes" or upgrade Docker'
        )
    return None


def check_schema(
    config: dict[str, Any], source: str, docker_major: int | None = None, flag_runtimes: Sequence[str] = ()
) -> None:
    """
    The checks `dockerd --validate` would make on the keys this tool touches and the common ones,
    for ``docker_major`` (None: assume a current dockerd); ``flag_runtimes``: --add-runtime names.
    """
    problems = []
    for key, (kind, what) in SCHEMA.items():
        if key not in config:
            continue
        value = config[key]
        if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            problems.append(f"{key} must be {what}")
    for name, runtime in (config.get("runtimes") or {}).items() if isinstance(config.get("runtimes"), dict) else ():
        if not isinstance(runtime, dict) or not isinstance(runtime.get("path", ""), str):
            problems.append(f"runtimes.{name} must be an object with a string path")
        elif "runtimeArgs" in runtime and not (
            isinstance(runtime["runtimeArgs"], list) and all(isinstance(a, str) for a in runtime["runtimeArgs"])
        ):
            problems.append(f"runtimes.{name}.runtimeArgs must be a list of strings")
    features = config.get("features")
    if isinstance(features, dict):
        problems += [
            f"features.{name} must be true or false" for name, value in features.items() if not isinstance(value, bool)
        ]
    default_problem = default_runtime_problem(config, docker_major, flag_runtimes)
    if default_problem:
        problems.append(default_problem)
    drivers = [
        opt
        for opt in config.get("exec-opts") or ()
        if isinstance(opt, str) and opt.replace(" ", "").startswith("native.cgroupdriver=")
    ]
    if len(set(drivers)) > 1:
        problems.append(f"exec-opts sets the cgroup driver twice: {drivers}")
    if problems:
        raise DaemonConfigError(f"{source}: " + "; ".join(problems))


def merge_daemon_config(existing: dict[str, Any], wiring: RuntimeWiring) -> DockerMerged:
    """``existing`` with the NVIDIA runtime wired in; keys, values and order otherwise kept."""
    config = json.loads(json.dumps(existing))  # a deep copy, same order
    notes: list[str] = []

    runtimes = config.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise DaemonConfigError("runtimes must be an object")
    nvidia = found if isinstance(found := runtimes.get("nvidia"), dict) else {}
    # Docker reads runtimeArgs (nvidia-ctk writes `args`, which Docker ignores).
    runtimes["nvidia"] = {**nvidia, "path": wiring.binary, "runtimeArgs": nvidia.get("runtimeArgs", [])}

    if wiring.make_default:
        config["default-runtime"] = "nvidia"
    elif config.get("default-runtime") == "nvidia":
        config["default-runtime"] = "runc"
        notes.append("default-runtime was nvidia: set back to runc (nvidia_runtime_default=false)")

    if wiring.systemd_cgroup:
        options = config.get("exec-opts", [])
        if not isinstance(options, list):
            raise DaemonConfigError("exec-opts must be a list of strings")
        kept = []
        for option in options:
            is_driver = isinstance(option, str) and option.replace(" ", "").startswith("native.cgroupdriver=")
            if is_driver and option != SYSTEMD_CGROUP_OPT:
                notes.append(f"exec-opts: replaced {option!r} with {SYSTEMD_CGROUP_OPT!r} (systemd_cgroup=true)")
                option = SYSTEMD_CGROUP_OPT
            if option not in kept:
                kept.append(option)
        if SYSTEMD_CGROUP_OPT not in kept:
            kept.append(SYSTEMD_CGROUP_OPT)
        config["exec-opts"] = kept

    if wiring.enable_cdi or (wiring.enable_cdi is False and (config.get("features") or {}).get("cdi") is True):
        features = config.setdefault("features", {})
        if not isinstance(features, dict):
            raise DaemonConfigError("features must be an object")
        features["cdi"] = wiring.enable_cdi

    return DockerMerged(config=config, changed=config != existing, notes=notes)


def render_daemon_json(config: dict[str, Any]) -> str:
    return templates.render("daemon.json.j2", config=config)


CGROUP_DRIVER_OPT = "native.cgroupdriver"


def _cgroup_driver(option: str) -> str | None:
    key, sep, value = option.replace(" ", "").partition("=")
    return value if sep and key == CGROUP_DRIVER_OPT else None


def flag_conflicts(config: dict[str, Any], flags: Sequence[DockerdFlag], path: str) -> list[str]:
    """
    What moby's findConfigurationConflicts refuses: a key of daemon.json that a set flag also
    gives (whatever the values); ``runtimes`` is exempt (dockerd merges --add-runtime with it).
    """
    conflicts = []
    for flag in flags:
        for key in flag.config_keys:
            if key in config and key != "runtimes":
                conflicts.append(f"{path} sets {key!r} and {flag.describe()} sets it too")
                break
    return conflicts


def leave_to_flags(candidate: dict[str, Any], existing: dict[str, Any], flags: Sequence[DockerdFlag]) -> dict[str, Any]:
    """
    ``candidate`` without the keys the merge added that the unit's flags already give.
    ``runtimes`` stays: dockerd merges --add-runtime with it, the file's entry winning a shared name.
    """
    given = {key for flag in flags for key in flag.config_keys} - {"runtimes"}
    return {key: value for key, value in candidate.items() if key in existing or key not in given}


@dataclass
class EffectiveSetting:
    value: Any
    source: str


def effective_settings(config: dict[str, Any], flags: Sequence[DockerdFlag], path: str) -> dict[str, EffectiveSetting]:
    """What dockerd will run with from flags and daemon.json: cgroup driver, default runtime, nvidia runtime."""
    result: dict[str, EffectiveSetting] = {}
    exec_flags = [flag for flag in flags if flag.name == "exec-opt"]
    if exec_flags:
        drivers = [flag for flag in exec_flags if _cgroup_driver(flag.value)]
        result["cgroup driver"] = (
            EffectiveSetting(_cgroup_driver(drivers[-1].value), drivers[-1].describe())
            if drivers
            else EffectiveSetting(
                None,
                f"{exec_flags[0].describe()}, whose --exec-opt flags replace {path}'s "
                "exec-opts and set no cgroup driver",
            )
        )
    else:
        options = [
            option for option in config.get("exec-opts") or () if isinstance(option, str) and _cgroup_driver(option)
        ]
        result["cgroup driver"] = (
            EffectiveSetting(_cgroup_driver(options[-1]), f"{path} exec-opts")
            if options
            else EffectiveSetting(None, f"neither {path} nor the unit's flags")
        )

    default_flags = [flag for flag in flags if flag.name == "default-runtime"]
    if default_flags:
        result["default runtime"] = EffectiveSetting(default_flags[-1].value, default_flags[-1].describe())
    elif config.get("default-runtime"):
        result["default runtime"] = EffectiveSetting(config["default-runtime"], f"{path} default-runtime")
    else:
        result["default runtime"] = EffectiveSetting("runc", "dockerd's own default")

    # A runtime both files and flags name: the file's wins (moby's MergeDaemonConfigurations merges the
    # flags into the file's config without overriding; measured on dockerd 20.10).
    nvidia_flags = [flag for flag in flags if flag.name == "add-runtime" and flag.value.startswith("nvidia=")]
    runtimes = found if isinstance(found := config.get("runtimes"), dict) else {}
    in_file = nvidia if isinstance(nvidia := runtimes.get("nvidia"), dict) else None
    if in_file is None and nvidia_flags:
        result["nvidia runtime"] = EffectiveSetting(
            nvidia_flags[-1].value.partition("=")[2], nvidia_flags[-1].describe()
        )
    else:
        result["nvidia runtime"] = EffectiveSetting(in_file.get("path") if in_file else None, f"{path} runtimes.nvidia")

    feature_flags = [flag for flag in flags if flag.name == "feature" and flag.value.partition("=")[0] == "cdi"]
    if feature_flags:
        value = feature_flags[-1].value.partition("=")[2] or "true"
        result["cdi"] = EffectiveSetting(value.lower() == "true", feature_flags[-1].describe())
    else:
        features = found if isinstance(found := config.get("features"), dict) else {}
        result["cdi"] = EffectiveSetting(features.get("cdi") is True, f"{path} features.cdi")
    return result


def effective_problems(effective: dict[str, EffectiveSetting], wiring: RuntimeWiring) -> list[str]:
    """Where what dockerd would run differs from ``wiring``: each names the winning flag or file and what to do."""
    problems = []
    driver = effective["cgroup driver"]
    if wiring.systemd_cgroup and driver.value != "systemd":
        problems.append(
            f"dockerd would run with cgroup driver {driver.value or '(not set)'}, decided by {driver.source}; "
            "systemd_cgroup=true needs systemd: make that flag --exec-opt native.cgroupdriver=systemd or "
            "remove the unit's --exec-opt flags (daemon.json then sets it), or set systemd_cgroup=false"
        )
    default = effective["default runtime"]
    if wiring.make_default and default.value != "nvidia":
        problems.append(
            f"dockerd's default runtime would be {default.value}, set by {default.source}; "
            "nvidia_runtime_default=true needs nvidia: make that flag --default-runtime=nvidia or remove it, "
            "or set nvidia_runtime_default=false"
        )
    elif not wiring.make_default and default.value == "nvidia":
        problems.append(
            f"dockerd's default runtime would be nvidia, set by {default.source}, but "
            "nvidia_runtime_default=false: remove that flag or set nvidia_runtime_default=true"
        )
    runtime = effective["nvidia runtime"]
    if runtime.value != wiring.binary:
        problems.append(
            f"dockerd's nvidia runtime would be {runtime.value or '(undefined)'}, from {runtime.source}; "
            f"gpu-node wires {wiring.binary}: point it there"
        )
    cdi = effective["cdi"]
    if wiring.enable_cdi and not cdi.value:
        problems.append(
            f"CDI would stay off, decided by {cdi.source}; cdi needs it on: "
            "make that flag --feature cdi=true or remove it, or set cdi=false"
        )
    return problems


# The engine. ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerRunning:
    """What dockerd runs with: its daemon.json (``path``, as parsed) and the flags its unit passes."""

    config: dict[str, Any]
    flags: Sequence[DockerdFlag]
    path: str


@dataclass(frozen=True)
class DockerEngine:
    """Docker's daemon.json."""

    file_format: str = JSON

    def parse(self, text: str, source: str) -> dict[str, Any]:
        return parse_daemon_json(text, source)

    def wire(self, document: dict[str, Any], wiring: RuntimeWiring, source: str) -> Wired[dict[str, Any]]:
        try:
            merged = merge_daemon_config(document, wiring)
        except DaemonConfigError as error:
            raise DaemonConfigError(f"{source}: {error}") from None
        return Wired(merged.config, merged.notes)

    def render(self, document: dict[str, Any]) -> str:
        return render_daemon_json(document)

    def effective(self, running: DockerRunning, wiring: RuntimeWiring) -> Effective:
        return Effective(
            running.path,
            tuple(effective_problems(effective_settings(running.config, running.flags, running.path), wiring)),
        )


_: RuntimeEngine[dict[str, Any], DockerRunning] = DockerEngine()
