"""
What wiring a runtime (containerd or Docker) to the NVIDIA runtime sets, as the runtimes stage does
it and verify expects it: from the settings, with CDI per runtime decided by deploy/runtimes/cdi.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

NVIDIA_CONTAINER_RUNTIME = "/usr/bin/nvidia-container-runtime"
# What containerd must pass on for the runtime's cdi mode to see the CDI annotations (as NVIDIA's
# GPU Operator writes it on the nvidia runtime when CDI is on).
CDI_ANNOTATIONS = "cdi.k8s.io/*"
# The runtime handler the wiring adds to every runtime (CRI's runtime handler, Docker's runtime name).
HANDLER = "nvidia"


@dataclass(frozen=True)
class RuntimeWiring:
    """What wiring a runtime (containerd or Docker) to the NVIDIA runtime sets."""

    binary: str = NVIDIA_CONTAINER_RUNTIME
    make_default: bool = True
    systemd_cgroup: bool = True
    # CDI in the runtime's own config: True turned on, False turned off, None left as the runtime has
    # it (cdi=auto until the runtime's version says whether it has CDI: deploy/runtimes/cdi.py)
    enable_cdi: bool | None = None
    # containerd passes a container's annotations matching these to the nvidia runtime (its CDI
    # mode reads cdi.k8s.io/ annotations); merged with the file's own
    container_annotations: tuple[str, ...] = ()


class WiringSettings(Protocol):
    """The settings the wiring is made from (deploy/settings/, below which it sits; frozen, so read-only here)."""

    @property
    def nvidia_runtime_default(self) -> bool: ...
    @property
    def systemd_cgroup(self) -> bool: ...
    @property
    def cdi(self) -> str: ...
    @property
    def nvidia_runtime_mode(self) -> str | None: ...


def runtime_wiring(settings: WiringSettings) -> RuntimeWiring:
    """What the runtimes stage wires into containerd and Docker, and verify expects there; cdi=auto
    is decided per runtime from its version (deploy/runtimes/cdi.py)."""
    return RuntimeWiring(
        make_default=settings.nvidia_runtime_default,
        systemd_cgroup=settings.systemd_cgroup,
        enable_cdi={"true": True, "false": False}.get(settings.cdi),
        container_annotations=(CDI_ANNOTATIONS,) if settings.nvidia_runtime_mode == "cdi" else (),
    )
