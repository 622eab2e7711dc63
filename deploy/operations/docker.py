"""
Wire the NVIDIA runtime into Docker's daemon.json: a pure merge (data in, data out), its
rendering through templates/daemon.json.j2, and the operation that installs it safely.

Every key already in the file keeps its value and its place; the merge sets only
``runtimes.nvidia``, ``default-runtime``, the systemd cgroup driver in ``exec-opts`` and,
when asked, ``features.cdi``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import PyinfraCommand

from deploy import redact
from deploy.facts.docker import DockerState
from deploy.operations import safe_install
from deploy.settings import RuntimeWiring

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
SYSTEMD_CGROUP_OPT = "native.cgroupdriver=systemd"


class DaemonConfigError(ValueError):
    """A daemon.json the merge cannot work on; the message names the file and the problem."""


@dataclass
class DockerMerged:
    config: dict
    changed: bool
    notes: list[str] = field(default_factory=list)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DaemonConfigError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _reject_constant(name: str):
    raise DaemonConfigError(f"{name} is not JSON")


def parse_daemon_json(text: str, source: str) -> dict:
    """Strict JSON (no duplicate keys, no NaN), an object at the top; empty text is an empty object."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        # error's message ends with "line L column C (char N)".
        raise DaemonConfigError(f"{source} is not valid JSON: {error}") from None
    except DaemonConfigError as error:
        raise DaemonConfigError(f"{source} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise DaemonConfigError(
            f"{source} is not a JSON object: it holds a {type(data).__name__} at the top level"
        )
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


def check_schema(config: dict, source: str) -> None:
    """The checks `dockerd --validate` would make on the keys this tool touches and the common ones."""
    problems = []
    for key, (kind, what) in SCHEMA.items():
        if key not in config:
            continue
        value = config[key]
        if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
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
        problems += [f"features.{name} must be true or false"
                     for name, value in features.items() if not isinstance(value, bool)]
    default = config.get("default-runtime")
    runtimes = config.get("runtimes") if isinstance(config.get("runtimes"), dict) else {}
    if isinstance(default, str) and default not in ("runc", *runtimes):
        problems.append(f"default-runtime {default!r} is not a configured runtime")
    drivers = [opt for opt in config.get("exec-opts") or () if isinstance(opt, str)
               and opt.replace(" ", "").startswith("native.cgroupdriver=")]
    if len(set(drivers)) > 1:
        problems.append(f"exec-opts sets the cgroup driver twice: {drivers}")
    if problems:
        raise DaemonConfigError(f"{source}: " + "; ".join(problems))


def merge_daemon_config(existing: dict, wiring: RuntimeWiring) -> DockerMerged:
    """``existing`` with the NVIDIA runtime wired in; keys, values and order otherwise kept."""
    config = json.loads(json.dumps(existing))  # a deep copy, same order
    notes: list[str] = []

    runtimes = config.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise DaemonConfigError("runtimes must be an object")
    nvidia = runtimes.get("nvidia") if isinstance(runtimes.get("nvidia"), dict) else {}
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

    if wiring.enable_cdi:
        features = config.setdefault("features", {})
        if not isinstance(features, dict):
            raise DaemonConfigError("features must be an object")
        features["cdi"] = True

    return DockerMerged(config=config, changed=config != existing, notes=notes)


def render_daemon_json(config: dict) -> str:
    environment = Environment(
        loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, keep_trailing_newline=True
    )
    environment.filters["to_json"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
    return environment.get_template("daemon.json.j2").render(config=config)


@operation()
def configure_nvidia_runtime(path: str, wiring: RuntimeWiring, service: str = "docker",
                             restart_timeout: int = 30, restart_pending: bool = False,
                             before_restart: Sequence[PyinfraCommand] = ()):
    """
    Merge the NVIDIA runtime into daemon.json at ``path`` and install it safely.

    + path: daemon.json
    + wiring: what to set (``RuntimeWiring``)
    + service: the unit restarted on change
    + restart_timeout: seconds docker has to become active before rollback
    + restart_pending: an interrupted run installed this config without restarting ``service``
    + before_restart: commands run after the candidate's check, before the swap and restart (a drain)
    """
    state = host.get_fact(DockerState, path=path)
    if not state["dockerd"]:
        yield from safe_install.fail_host(
            "docker is in container_runtimes but dockerd is not installed: install Docker Engine, "
            "or set docker_install=true to install the distribution's Docker package"
        )
        return
    current = state["config"]
    try:
        existing = parse_daemon_json(current, path) if current is not None else {}
        merged = merge_daemon_config(existing, wiring)
    except DaemonConfigError as error:
        message = str(error)
        yield from safe_install.fail_host(message if message.startswith(path) else f"{path}: {message}")
        return

    if current is not None and not merged.changed:
        yield from safe_install.file_in_place(path, service, restart_pending, restart_timeout, before_restart,
                                              f"{path} already wires the nvidia runtime")
        return
    for note in merged.notes:
        host.log_styled(f"{path}: {note}", fg="yellow")

    content = render_daemon_json(merged.config)
    redact.log_masked_diff(host, path, current, content, "json")
    if state["can_validate"]:
        validator = safe_install.Validator(
            argv=[state["dockerd"], "--validate", "--config-file", "{candidate}"],
            what="dockerd --validate",
        )
    else:
        # dockerd older than 23.0: strict parse of what will be written, plus the schema checks.
        validator = None
        try:
            check_schema(parse_daemon_json(content, path), path)
        except DaemonConfigError as error:
            yield from safe_install.fail_host(str(error))
            return
    yield from safe_install.install_file._inner(
        path=path, content=content, validator=validator, service=service,
        restart_timeout=restart_timeout,
        before_restart=before_restart,
    )
