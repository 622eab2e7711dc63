"""
The container runtimes gpu-node wires to the NVIDIA runtime, in one table (``RUNTIMES``): the values
``container_runtimes`` allows, how CDI is decided for each from its version, what verify reads of
each and checks there, the GPU containers it starts through each, and what the node's report says
of it. Verify, the CDI stage, the settings and the report iterate this table; what a run does to a
runtime on a host (install it, wire its config) is its stage (deploy/stages.py). Adding a runtime:
docs/contributing.md. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..reports.node_report import Step
from .cdi import CONTAINERD_CDI_SINCE, DOCKER_CDI_SINCE, RuntimeCdi, for_containerd, for_docker
from .containerd import verify as containerd_verify
from .docker import verify as docker_verify
from .wiring import RuntimeWiring

# The probes a GpuRun names (deploy/operations/probes.py): a pod sandbox with the nvidia runtime
# handler through the runtime's CRI socket, as the kubelet starts pods (CrictlRun); a throwaway
# container with the GPUs (ContainerRun).
CRI, CONTAINER = "cri", "container"


@dataclass(frozen=True)
class RuntimeReadout:
    """A runtime's part of verify's one read (deploy/facts/verification.py VerifyReadout): its shell
    (deploy/shell/<script>.sh, printing lines keyed by ``keys`` and adding its systemd unit to the
    read's), the shell variables it takes (their values for a plain install), and its reading: a dict
    with at least ``path`` (None: not installed) and ``active`` (its unit's ActiveState)."""

    script: str
    keys: tuple[str, ...]
    default: Callable[[], dict[str, Any]]
    # (reading, key, the rest of the line): one of its lines read into its reading
    read_line: Callable[[dict[str, Any], str, str], None]
    values: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuRun:
    """A container verify starts through a runtime with the GPUs, to prove it can, and its step: by
    the ``CRI`` probe (the reading's ``socket``) or the ``CONTAINER`` probe (``command``'s words, the
    container's own command after them)."""

    name: str  # its step's name in the report
    probe: str
    what: str = ""  # how its step names the run
    pull: str = ""  # what puts the image on the node, named when it is missing
    # (reading, image, container name) -> the words that start the container
    command: Callable[[dict[str, Any], str, str], tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Runtime:
    """A container runtime gpu-node wires to the nvidia runtime."""

    name: str  # its value in container_runtimes; its key in verify's readout and in its steps' names
    title: str  # as messages name it
    # CDI: the wiring decided for it from its version reading ({"major", "minor", "version"}; an
    # unknown version reads as no CDI), or CdiUnsupported for cdi=true where it has none
    cdi: Callable[[RuntimeWiring, dict[str, Any]], RuntimeCdi]
    cdi_since: str  # its first release with CDI, as a refusal names it
    readout: RuntimeReadout
    # Verify: an installed, wired runtime's ``<name>_config`` step, from its reading and the options
    # (deploy/verification/options.py VerifyOptions)
    config_step: Callable[[dict[str, Any], Any], Step]
    # the nvidia runtime's binary its config names (verify checks it is executable)
    configured_binary: Callable[[dict[str, Any]], str | None]
    summary: Callable[[dict[str, Any]], str]  # the report's runtime column
    runs: tuple[GpuRun, ...] = ()
    # its reading with what its steps derive from it, made once (containerd's parsed dump)
    prepared: Callable[[dict[str, Any]], dict[str, Any]] = lambda reading: reading
    # the runtimes the kubelet starts pods with through its CRI, each with whether it has the systemd
    # cgroup driver (compared with the kubelet's); None: not a CRI runtime
    kubelet_cgroups: Callable[[dict[str, Any]], list[tuple[str, bool]]] | None = None


def _containerd_cdi(wiring: RuntimeWiring, reading: dict[str, Any]) -> RuntimeCdi:
    return for_containerd(wiring, reading.get("major"), reading.get("minor"), reading.get("version"))


def _docker_cdi(wiring: RuntimeWiring, reading: dict[str, Any]) -> RuntimeCdi:
    return for_docker(wiring, reading.get("major"), reading.get("version"))


CONTAINERD = Runtime(
    name="containerd",
    title="containerd",
    cdi=_containerd_cdi,
    cdi_since="containerd " + ".".join(map(str, CONTAINERD_CDI_SINCE)),
    readout=RuntimeReadout(
        script="verify_readout_containerd",
        keys=containerd_verify.LINE_KEYS,
        default=containerd_verify.default_reading,
        read_line=containerd_verify.read_line,
        values=containerd_verify.READ_VALUES,
    ),
    config_step=containerd_verify.config_step,
    configured_binary=containerd_verify.configured_binary,
    summary=containerd_verify.summary,
    runs=(
        GpuRun("cri_handler", CRI),
        GpuRun(
            "ctr_run",
            CONTAINER,
            what="ctr run --gpus 0 nvidia-smi",
            pull="ctr image pull",
            command=containerd_verify.ctr_run,
        ),
    ),
    prepared=containerd_verify.prepared,
    kubelet_cgroups=containerd_verify.kubelet_cgroups,
)
DOCKER = Runtime(
    name="docker",
    title="Docker",
    cdi=_docker_cdi,
    cdi_since=f"Docker {DOCKER_CDI_SINCE}",
    readout=RuntimeReadout(
        script="verify_readout_docker",
        keys=docker_verify.LINE_KEYS,
        default=docker_verify.default_reading,
        read_line=docker_verify.read_line,
    ),
    config_step=docker_verify.config_step,
    configured_binary=docker_verify.configured_binary,
    summary=docker_verify.summary,
    runs=(
        GpuRun(
            "docker_run",
            CONTAINER,
            what="docker run --gpus all nvidia-smi",
            pull="docker pull",
            command=docker_verify.docker_run,
        ),
    ),
)

RUNTIMES: tuple[Runtime, ...] = (CONTAINERD, DOCKER)


def runtime_names() -> tuple[str, ...]:
    return tuple(runtime.name for runtime in RUNTIMES)


def runtime_named(name: str) -> Runtime:
    """The table's runtime ``name`` (KeyError: none of that name)."""
    for runtime in RUNTIMES:
        if runtime.name == name:
            return runtime
    raise KeyError(name)
