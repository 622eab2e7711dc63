"""
The Container Device Interface per runtime: whether a runtime of this version has CDI, and what the
``cdi`` setting (auto, true, false) asks of it; the nvidia runtime's own mode in its config.toml
(``nvidia_runtime_mode``). Pure: the stages give the versions and the text they read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from ..foundations import node_text, toml_layout
from ..foundations.toml_layout import TOMLKIT_FAULTS, ConfigError, Edits, tomllib
from ..runtimes.wiring import RuntimeWiring

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
            "since 1.7 and drops it without a word before): set cdi=auto or false, or install containerd 1.7 or newer"
        )
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
            "set cdi=auto or false, or install Docker 25 or newer"
        )
    if wiring.enable_cdi is None:
        wiring = replace(wiring, enable_cdi=True if has_cdi else None)
    return RuntimeCdi(wiring, bool(wiring.enable_cdi), wiring.enable_cdi)


# The nvidia runtime's config: the toolkit's package ships it commented; `nvidia-ctk config --in-place
# --set nvidia-container-runtime.mode=...` is NVIDIA's way to set the mode, this is the same edit
# with the comments and layout kept (the containerd layout engine's).
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
RUNTIME_SECTION = ("nvidia-container-runtime",)
RUNTIME_DEFAULT_MODE = "auto"  # what the runtime runs with when the file does not say
RUNTIME_CONFIG_HEADER = (
    "# Written by gpu-node (nvidia_runtime_mode): the toolkit's package had left no config;\n"
    "# the nvidia runtime's defaults hold for everything not set here.\n"
)


def runtime_mode_of(text: str | None) -> str:
    """The mode the runtime runs with by this config text (None: no file); raises ConfigError."""
    if text is None:
        return RUNTIME_DEFAULT_MODE
    try:
        config = node_text.parsed(tomllib.loads, text, RUNTIME_CONFIG)
    except node_text.UnreadableText as error:
        raise ConfigError(str(error)) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{RUNTIME_CONFIG} is not valid TOML: {node_text.syntax_error(error, text)}") from None
    section = config.get(RUNTIME_SECTION[0])
    mode = section.get("mode", RUNTIME_DEFAULT_MODE) if isinstance(section, dict) else RUNTIME_DEFAULT_MODE
    return str(mode)


def with_runtime_mode(text: str | None, mode: str) -> str:
    """The runtime's config ``text`` (None: no file) with ``mode`` set, everything else as it was;
    raises ConfigError (one line) for a file that cannot be edited safely."""
    runtime_mode_of(text)  # not TOML: refused with the reader's line and column

    def parse(body: str) -> tomlkit.TOMLDocument:
        try:
            return toml_layout.parse(body)
        except (ParseError, *TOMLKIT_FAULTS) as error:
            raise ConfigError(
                f"{RUNTIME_CONFIG}: its layout cannot be edited safely (tomlkit cannot read it: {type(error).__name__})"
            ) from None

    def apply(document: Any, edits: Edits) -> None:
        edits.set(RUNTIME_SECTION, "mode", mode)

    edited, _ = toml_layout.edit(text if text is not None else RUNTIME_CONFIG_HEADER, RUNTIME_CONFIG, parse, apply)
    return edited


def runtime_mode_refusal(mode: str | None, cdi_on: bool, cdi: str, first_releases: list[str]) -> str | None:
    """Why ``nvidia_runtime_mode`` cannot be had where CDI is ``cdi_on`` (None: it can);
    ``first_releases``: each runtime's first release with CDI (deploy/runtimes/registry.py)."""
    if mode != "cdi" or cdi_on:
        return None
    return (
        "nvidia_runtime_mode=cdi, but CDI is off on this node "
        + (
            "(cdi=false)"
            if cdi == "false"
            else f"(cdi=auto, and no wired runtime of this version has CDI: {' or '.join(first_releases)} at least)"
        )
        + ": the runtime's cdi mode injects devices from the CDI spec, which only a node with CDI on gets; "
        "leave nvidia_runtime_mode unset or auto, or use a runtime with CDI"
    )
