"""The driver stage's part for kernel updates: an NVIDIA module for every installed kernel
(deploy/operations/kernel_modules.py), from the family's table (deploy/distros/families.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..distros.families import Platform
from ..operations import driver_reload, kernel_modules
from ..settings import Settings

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta


def kernel_headers_template(platform: Platform) -> str | None:
    """The family's headers package of one kernel ({kernel}), None where it names none."""
    return next((template for template in platform.family.driver.headers if "{kernel}" in template), None)


def cover_installed_kernels(settings: Settings, platform: Platform) -> None:
    kernel_modules.cover_installed_kernels(
        name="Build the NVIDIA module for every installed kernel",
        manager=platform.family.package_manager,
        headers_template=kernel_headers_template(platform),
        following=platform.family.driver.headers_following,
        lock_timeout=settings.apt_lock_timeout,
    )


def refuse_reboot_without_module(**arguments: Any) -> None:
    kernel_modules.refuse_reboot_without_module(
        name="Refuse a reboot into a kernel without the NVIDIA module", **arguments
    )


KERNELS_READ = kernel_modules.KERNELS_READ  # read ahead by the driver stage's preflight


def reload_without_reboot(settings: Settings, driver: OperationMeta) -> None:
    """After a driver change (``driver``: its install operation): reload where nothing holds the GPU."""
    driver_reload.reload_driver(
        name="Reload the NVIDIA modules where nothing holds the GPU",
        load=settings.kernel_modules_load,
        _if=driver.did_change,
    )
