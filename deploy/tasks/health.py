"""
The node's health check (deploy/health/check.py, docs/health.md): every health_check_interval
``gpu-node-health.timer`` starts ``gpu-node-health.service``, which runs the check and writes
/var/lib/gpu-node/health.json; the first-boot unit runs it once at every boot too. This stage puts
the program (one zip application, deploy/tasks/archives.py), its settings (JSON) and the two units in
place, enables the timer and, on a node (not an image root), starts it. Every run that makes a GPU
node installs it (deploy/stages.py), unless health_check=false.
"""

from __future__ import annotations

from pyinfra import host

from ..facts.read_ahead import FactCall, read
from ..facts.units import UnitsEnabled
from ..foundations.pyinfra_api import deploy
from ..foundations.templates import render
from ..health.settings import CONFIG_PATH, STATE_PATH, HealthSettings
from ..node import bake
from ..operations import files, units
from ..reports.health_report import HEALTH_REPORT_PATH
from ..settings import Settings
from . import archives

SERVICE, TIMER = "gpu-node-health.service", "gpu-node-health.timer"
UNIT_DIR = archives.UNIT_DIR


def health_config(settings: Settings) -> str:
    """deploy/health/check.py's settings (deploy/health/settings.py)."""
    return archives.program_settings(HealthSettings, settings, report_path=HEALTH_REPORT_PATH, state_path=STATE_PATH)


def wanted_files(settings: Settings) -> dict[str, tuple[str | bytes, str]]:
    """path -> (content, mode) of every file the health check needs."""
    return {
        archives.HEALTH.path: (archives.HEALTH.content(), "644"),
        CONFIG_PATH: (health_config(settings), "644"),
        f"{UNIT_DIR}/{SERVICE}": (
            render("gpu-node-health.service.j2", archive=archives.HEALTH.path, config=CONFIG_PATH),
            "644",
        ),
        f"{UNIT_DIR}/{TIMER}": (render("gpu-node-health.timer.j2", interval=settings.health_check_interval), "644"),
    }


def units_read() -> FactCall:
    return (UnitsEnabled, {"units": (TIMER,)})


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead: the same calls its operations make."""
    return [*(files.digest_read(path) for path in wanted_files(settings)), units_read()]


@deploy("Health check")
def health_check_units(settings: Settings) -> None:
    archives.put_program_files(
        wanted_files(settings), "the health check", "Reload systemd's units (the health check's units changed)"
    )
    if read(host, units_read()).get(TIMER) != "enabled":
        how = "started by the image's boot" if bake.is_image_root(host.connector) else "started now"
        units.enable_service(
            name=f"Enable {TIMER} (the health check every {settings.health_check_interval}; {how})", service=TIMER
        )
