"""
The Container Device Interface per runtime: whether a runtime of this version has CDI, and what the
``cdi`` setting (auto, true, false) asks of it. Pure: the stages give the versions they read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deploy.settings import RuntimeWiring

# Where the spec goes (containerd and Docker read /etc/cdi and /var/run/cdi by default), and the dirs
# a containerd 1.7 config that names its own must keep.
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
SPEC_PATH = "/var/run/cdi/nvidia.yaml"
# containerd's CRI reads enable_cdi since 1.7, and has CDI on by default since 2.0.
CONTAINERD_CDI_SINCE = (1, 7)
CONTAINERD_CDI_DEFAULT_SINCE = (2, 0)
# dockerd takes `features.cdi` since 25.0 (on by default since 28.2).
DOCKER_CDI_SINCE = 25


class CdiUnsupported(Exception):
    """cdi=true, and a wired runtime has no CDI: one line naming it."""


@dataclass(frozen=True)
class RuntimeCdi:
    """What the wiring writes for CDI in one runtime, what the runtime's effective config must then
    show, and whether CDI is on there afterwards."""

    wiring: RuntimeWiring  # enable_cdi: written on, off, or left (None)
    on: bool
    expected: bool | None = None  # enable_cdi the runtime's own dump must show (None: not checked)

    @property
    def checked(self) -> RuntimeWiring:
        """The wiring the effective config is checked against."""
        return replace(self.wiring, enable_cdi=self.expected)


def for_containerd(wiring: RuntimeWiring, major: int | None, minor: int | None, version: str | None) -> RuntimeCdi:
    """``wiring`` with cdi=auto decided for this containerd; raises CdiUnsupported for cdi=true on 1.6."""
    release = (major, minor) if major is not None and minor is not None else None
    has_cdi = release is not None and release >= CONTAINERD_CDI_SINCE
    default_on = release is not None and release >= CONTAINERD_CDI_DEFAULT_SINCE
    if wiring.enable_cdi and release is not None and not has_cdi:
        raise CdiUnsupported(
            f"cdi=true, but containerd {version or '.'.join(map(str, release))} has no CDI (it reads enable_cdi "
            "since 1.7 and drops it without a word before): set cdi=auto or false, or install containerd 1.7 or newer")
    if default_on:
        # 2.x has it on without being asked: nothing to write, and false turns off only what
        # gpu-node turned on; its own dump must still show it on where CDI is wanted.
        return RuntimeCdi(replace(wiring, enable_cdi=None), True, None if wiring.enable_cdi is False else True)
    if wiring.enable_cdi is None:
        wiring = replace(wiring, enable_cdi=True if has_cdi else None)
    return RuntimeCdi(wiring, bool(wiring.enable_cdi), wiring.enable_cdi)


def for_docker(wiring: RuntimeWiring, major: int | None, version: str | None) -> RuntimeCdi:
    """``wiring`` with cdi=auto decided for this dockerd; raises CdiUnsupported for cdi=true before 25."""
    has_cdi = major is not None and major >= DOCKER_CDI_SINCE
    if wiring.enable_cdi and major is not None and not has_cdi:
        raise CdiUnsupported(
            f"cdi=true, but Docker {version or major} has no CDI (dockerd takes features.cdi since 25.0): "
            "set cdi=auto or false, or install Docker 25 or newer")
    if wiring.enable_cdi is None:
        wiring = replace(wiring, enable_cdi=True if has_cdi else None)
    return RuntimeCdi(wiring, bool(wiring.enable_cdi), wiring.enable_cdi)
