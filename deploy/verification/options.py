"""
What verify compares a node against (``VerifyOptions``), from the settings, and the names every
subject's steps share. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..settings import MIN_DRIVER_VERSION, RuntimeWiring, Settings

NO_GPU = "no NVIDIA GPU"
HANDLER = "nvidia"


def _setting(name: str, **default):
    """A VerifyOptions field read from the setting ``name``."""
    return field(metadata={"setting": name}, **default)


@dataclass(frozen=True)


class VerifyOptions:
    """What the steps compare against: the settings they read, with their defaults from
    deploy/settings.py (``from_settings(parse_settings({}))`` is the default verify)."""

    require_gpu: bool = _setting("require_gpu")
    runtimes: tuple[str, ...] = _setting("container_runtimes")
    # what the runtimes stage wires into containerd (Settings.runtime_wiring)
    wiring: RuntimeWiring = _setting("runtime_wiring")
    containerd_config_path: str = _setting("containerd_config_path")
    image: str = _setting("verify_image")
    toolkit_expected: bool = _setting("nvidia_toolkit_install")
    min_driver: str = MIN_DRIVER_VERSION
    # the data-center settings verify checks the node against
    kernel_module_type: str = _setting("nvidia_kernel_modules", default="auto")
    persistenced: bool = _setting("nvidia_persistenced", default=True)
    fabric_manager_install: bool = _setting("fabric_manager_install", default=True)
    cdi: str = _setting("cdi", default="auto")
    driver_root: str = _setting("nvidia_driver_root", default="/")
    runtime_mode: str | None = _setting("nvidia_runtime_mode", default=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> "VerifyOptions":
        return cls(**{each.name: getattr(settings, each.metadata["setting"])
                      for each in fields(cls) if "setting" in each.metadata})
