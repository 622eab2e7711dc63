"""The host safety section: what may happen to the node now (module loads, a reboot) and what preflight demands."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class HostSafetySettings(Section):
    """Host safety"""

    kernel_modules_load: bool = Field(
        True, description="load modules and apply sysctls now (tests in containers set false)"
    )
    reboot_allowed: bool = Field(False, description="reboot when the new driver needs it")
    require_gpu: bool = Field(False, description="fail (instead of reporting 'no GPU') when no NVIDIA GPU is found")
    min_free_disk_mb: int = Field(2048, ge=0, description="free space preflight wants on / and /var before installing")
