"""
What verify reads of Docker and checks there (its row of deploy/runtimes/registry.py): its part of
verify's one read (deploy/shell/verify_readout_docker.sh: ``docker info``), its config step against
the wiring, the nvidia runtime's binary it names, and what the report says of it. Pure.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from ...foundations import node_text
from ...reports.node_report import FAIL, PASS, Step
from ..wiring import HANDLER, RuntimeWiring


class DockerOptions(Protocol):
    """What Docker's step compares against (deploy/verification/options.py VerifyOptions)."""

    wiring: RuntimeWiring


def default_reading() -> dict[str, Any]:
    return {
        "path": None,
        "active": None,
        "info_exit_code": None,
        "runtimes": {},
        "default_runtime": None,
        "cgroup_driver": None,
        "image_present": False,
    }


def parse_docker_info(text: str) -> dict[str, Any]:
    """``docker info --format '{{json .Runtimes}}|{{.DefaultRuntime}}|{{.CgroupDriver}}'``."""
    runtimes_json, _, rest = text.strip().rpartition("|")
    runtimes_json, _, default = runtimes_json.rpartition("|")
    try:
        runtimes = node_text.parsed(json.loads, runtimes_json, "`docker info`") or {}
        if not isinstance(runtimes, dict):
            raise ValueError("not an object")
    except ValueError:
        return {"runtimes": {}, "default_runtime": None, "cgroup_driver": None, "info_error": text[:300]}
    return {
        "runtimes": {name: value.get("path") if isinstance(value, dict) else None for name, value in runtimes.items()},
        "default_runtime": default or None,
        "cgroup_driver": rest or None,
    }


def read_line(reading: dict[str, Any], key: str, rest: str) -> None:
    if key == "docker_path":
        reading["path"] = rest or None
    elif key == "docker_active":
        reading["active"] = rest or "unknown"
    elif key == "docker_info_rc" and rest.isdigit():
        reading["info_exit_code"] = int(rest)
    elif key == "docker_info":
        reading.update(parse_docker_info(node_text.decode_b64(rest, "docker info") if rest else ""))
    elif key == "docker_image":
        reading["image_present"] = rest == "1"


LINE_KEYS = ("docker_path", "docker_active", "docker_info_rc", "docker_info", "docker_image")


def configured_binary(reading: dict[str, Any]) -> str | None:
    """The nvidia runtime's binary as ``docker info`` names it."""
    binary: str | None = reading["runtimes"].get(HANDLER)
    return binary


def config_step(reading: dict[str, Any], options: DockerOptions) -> Step:
    """An installed Docker's own view (``docker info``) against the wiring."""
    if reading["info_exit_code"] != 0 or reading.get("info_error"):
        return Step("docker_config", FAIL, f"docker info failed (dockerd {reading['active'] or 'not running'})")
    problems = []
    path = reading["runtimes"].get(HANDLER)
    if not path:
        problems.append("no 'nvidia' runtime in docker info")
    if options.wiring.make_default and reading["default_runtime"] != HANDLER:
        problems.append(f"default runtime is {reading['default_runtime']!r}, not 'nvidia'")
    if options.wiring.systemd_cgroup and reading["cgroup_driver"] != "systemd":
        problems.append(f"cgroup driver is {reading['cgroup_driver']!r}, not 'systemd' (systemd_cgroup=true)")
    if problems:
        return Step("docker_config", FAIL, "; ".join(problems))
    return Step(
        "docker_config",
        PASS,
        f"runtime nvidia ({path}), default runtime {reading['default_runtime']}, "
        f"cgroup driver {reading['cgroup_driver']}",
    )


def summary(reading: dict[str, Any]) -> str:
    return f"docker (default {reading['default_runtime'] or '?'})"


def docker_run(reading: dict[str, Any], image: str, container_name: str) -> tuple[str, ...]:
    """``docker run`` of a throwaway container with every GPU."""
    return ("docker", "run", "--rm", "--gpus", "all", "--name", container_name, image)
