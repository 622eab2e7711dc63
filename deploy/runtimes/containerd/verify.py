"""
What verify reads of containerd and checks there (its row of deploy/runtimes/registry.py): its part
of verify's one read (deploy/shell/verify_readout_containerd.sh), its ``config dump`` parsed once,
its config step against the wiring, the nvidia runtime's binary it names, the runtimes the kubelet
starts pods with through it, and what the report says of it. Pure.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...foundations import node_text, redact
from ...foundations.toml_layout import tomllib
from ...reports.node_report import FAIL, PASS, Step
from ..cdi import CdiUnsupported, for_containerd
from ..wiring import HANDLER, RuntimeWiring
from .cri import dump_cri_plugin, effective_problems
from .installations import PLAIN_SOCKET

# The shell variables its part of the read takes, for a plain containerd (the installation in effect
# gives its own: deploy/operations/verification.py).
READ_VALUES = {"containerd_binary": "containerd", "containerd_service": "containerd", "containerd_socket": PLAIN_SOCKET}


class ContainerdOptions(Protocol):
    """What containerd's steps compare against (deploy/verification/options.py VerifyOptions)."""

    wiring: RuntimeWiring
    containerd_config_path: str


def default_reading() -> dict[str, Any]:
    """containerd's reading before any line: ``version`` to ``dump`` are ContainerdConfig's (its version and
    ``config dump``, read with it), which deploy/operations/verification.py adds with the installation's
    ``socket``."""
    return {
        "path": None,
        "version": None,
        "major": None,
        "minor": None,
        "active": None,
        "dump_exit_code": None,
        "dump": None,
        "image_present": False,
        "ctr_path": None,
    }


def read_line(reading: dict[str, Any], key: str, rest: str) -> None:
    if key == "ctrd_path":
        reading["path"] = rest or None
    elif key == "ctrd_active":
        reading["active"] = rest or "unknown"
    elif key == "ctr_path":
        reading["ctr_path"] = rest or None
    elif key == "ctr_image":
        reading["image_present"] = rest == "1"


LINE_KEYS = ("ctrd_path", "ctrd_active", "ctr_path", "ctr_image")


def parse_cri_runtimes(dump: str) -> dict[str, Any]:
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


def read_cri(reading: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The one reading of ``containerd config dump``: (the CRI runtimes, None) or (None, why not)."""
    dump = reading["dump"]
    if reading["dump_exit_code"] == 0 and dump:
        try:
            return parse_cri_runtimes(dump), None
        except Exception as error:  # noqa: BLE001 - a TOML error or an unexpected shape; the reason is what matters
            return None, f"cannot parse its output: {error}"
    if reading["path"]:
        return None, node_text.short(redact.daemon_output(dump or "no output"))
    return None, None


def prepared(reading: dict[str, Any]) -> dict[str, Any]:
    """The reading with its dump parsed, once for every step (``cri``, or why not: ``cri_error``)."""
    cri, error = read_cri(reading)
    return {**reading, "cri": cri, "cri_error": error}


def configured_binary(reading: dict[str, Any]) -> str | None:
    """The nvidia runtime's binary as the parsed dump names it."""
    nvidia = ((reading.get("cri") or {}).get("runtimes") or {}).get(HANDLER) or {}
    return (nvidia.get("options") or {}).get("BinaryName")


def kubelet_cgroups(reading: dict[str, Any]) -> list[tuple[str, bool]]:
    """The runtimes the kubelet starts pods with through containerd's CRI (nvidia and the default),
    and whether each has SystemdCgroup on."""
    cri = reading.get("cri")
    if not cri:
        return []
    checks: list[tuple[str, bool]] = []
    for name in (HANDLER, cri["default_runtime"] or "runc"):
        runtime = cri["runtimes"].get(name)
        if runtime is not None and name not in (label for label, _ in checks):
            checks.append((name, bool((runtime.get("options") or {}).get("SystemdCgroup", False))))
    return checks


def _imports_note(cri: dict[str, Any], options: ContainerdOptions) -> str:
    """Which other files containerd reads: one of them overrides what config.toml says."""
    others = [path for path in cri.get("imports", []) if path != options.containerd_config_path]
    if not others:
        return ""
    return (
        f" (containerd also reads {', '.join(others)}: the last of them holding this section "
        f"overrides {options.containerd_config_path})"
    )


def config_step(reading: dict[str, Any], options: ContainerdOptions) -> Step:
    """An installed containerd's own view (its dump) against the wiring."""
    cri = reading["cri"]
    if cri is None:
        return Step("containerd_config", FAIL, f"`containerd config dump` failed: {reading['cri_error']}")
    nvidia = cri["runtimes"].get(HANDLER)
    try:
        checked = for_containerd(options.wiring, reading["major"], reading["minor"], reading["version"]).checked
    except CdiUnsupported as error:
        return Step("containerd_config", FAIL, str(error))
    where, problems = effective_problems(reading["dump"], checked)
    if not nvidia:
        return Step(
            "containerd_config",
            FAIL,
            f"no {where}.runtimes.{HANDLER} in `containerd config dump` ({options.containerd_config_path})"
            f"{_imports_note(cri, options)}: run the runtimes stage",
        )
    opts = nvidia.get("options") or {}
    active = reading["active"]
    if active not in (None, "active"):
        problems.append(f"containerd is {active}")
    if problems:
        return Step("containerd_config", FAIL, f"{where}: " + "; ".join(problems) + _imports_note(cri, options))
    return Step(
        "containerd_config",
        PASS,
        f"containerd {reading['version']}: {where}.runtimes.{HANDLER} BinaryName={opts.get('BinaryName')} "
        f"SystemdCgroup={str(bool(opts.get('SystemdCgroup'))).lower()}, default runtime {cri['default_runtime']}",
    )


def summary(reading: dict[str, Any]) -> str:
    return f"containerd {reading['version'] or '?'}"


def ctr_run(reading: dict[str, Any], image: str, container_name: str) -> tuple[str, ...]:
    """``ctr run`` of a throwaway container with the first GPU, as NVIDIA's guides do."""
    return (
        reading["ctr_path"] or "ctr",
        "--address",
        reading.get("socket") or PLAIN_SOCKET,
        "run",
        "--rm",
        "--gpus",
        "0",
        image,
        container_name,
    )
