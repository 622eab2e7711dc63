"""The verification section: where the reports go and the image verify runs in."""

from __future__ import annotations

from pydantic import Field

from ..values import ControllerPath, ImageReference
from .base import Section


class VerifySettings(Section):
    """Verification"""

    verify_report_path: ControllerPath = Field(
        "gpu-node-report.json", description="where the controller writes the JSON node report"
    )
    fleet_report_path: ControllerPath = Field(
        "gpu-node-fleet.json",
        description="where the controller writes the JSON fleet report (one row per node; the first host's value); "
        "its HTML page goes beside it, .html for its suffix",
    )
    verify_image: ImageReference = Field(
        "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04", description="image the verification runs nvidia-smi in"
    )
