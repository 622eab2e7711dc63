"""
What verify compares a node against (``VerifyOptions``), from the settings, and the names every
subject's steps share. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import date
from typing import Any

from ..driver.versions import MIN_DRIVER_VERSION
from ..runtimes.wiring import RuntimeWiring, runtime_wiring
from ..settings import Settings
from ..settings.values import AutoTrueFalse, Cdi, ContainerRuntime, KernelModules, RuntimeMode

NO_GPU = "no NVIDIA GPU"


def _setting(name: str) -> Any:
    """A VerifyOptions field read from the setting ``name``: its value, and so its default, are the
    setting's (tests/unit/test_verify_options.py holds each field's type to the setting's)."""
    return field(metadata={"setting": name})


@dataclass(frozen=True)
class VerifyOptions:
    """What the steps compare against: the settings they read, under verify's own names
    (``from_settings(parse_settings({}))`` is the default verify)."""

    require_gpu: bool = _setting("require_gpu")
    runtimes: tuple[ContainerRuntime, ...] = _setting("container_runtimes")
    containerd_config_path: str = _setting("containerd_config_path")
    image: str = _setting("verify_image")
    toolkit_expected: bool = _setting("nvidia_toolkit_install")
    # the data-center settings verify checks the node against
    kernel_module_type: KernelModules = _setting("nvidia_kernel_modules")
    persistenced: bool = _setting("nvidia_persistenced")
    fabric_manager_install: bool = _setting("fabric_manager_install")
    cdi: Cdi = _setting("cdi")
    driver_root: str = _setting("nvidia_driver_root")
    runtime_mode: RuntimeMode | None = _setting("nvidia_runtime_mode")
    # the modules' signing and its key (deploy/driver/signing.py: the generated key where these are unset)
    module_signing: AutoTrueFalse = _setting("module_signing")
    signing_key: str | None = _setting("module_signing_key")
    signing_cert: str | None = _setting("module_signing_cert")
    # what the runtimes stage wires into containerd (deploy/runtimes/wiring.py)
    wiring: RuntimeWiring = field(default_factory=RuntimeWiring)
    min_driver: str = MIN_DRIVER_VERSION
    # the day the driver branch's end of life is compared with (deploy/driver/branches.py)
    today: date = field(default_factory=date.today)

    @classmethod
    def from_settings(cls, settings: Settings) -> VerifyOptions:
        return cls(
            wiring=runtime_wiring(settings),
            **{
                each.name: getattr(settings, each.metadata["setting"])
                for each in fields(cls)
                if "setting" in each.metadata
            },
        )
