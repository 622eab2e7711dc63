"""
The first-boot unit (deploy/node/first_boot.py, docs/without-controller.md): at every boot, before
``gpu-node-ready.target``, the node loads the kernel module its GPUs need, regenerates the CDI
spec, starts persistenced and Fabric Manager, verifies and writes its report. This stage puts the
program (one zip application, deploy/tasks/archives.py: deploy/node/first_boot.py with the
standard-library modules it reuses: deploy/node/boot_settings.py, deploy/node/root_files.py, the
pure deploy/driver/module_type.py and deploy/driver/fabric.py, deploy/foundations/command_line.py),
its settings (JSON, deploy/node/boot_settings.py's shape) and the two units in place and enables them; it starts nothing (the next boot runs it; ``systemctl start
gpu-node-ready.target`` runs it now). With health_check, the unit runs the node's health check
(deploy/tasks/health.py installs it) once it prepared the GPUs.
"""

from __future__ import annotations

from pyinfra import host

from ..facts.read_ahead import FactCall, read
from ..facts.units import UnitsEnabled
from ..foundations.pyinfra_api import deploy
from ..foundations.templates import render
from ..health.settings import CONFIG_PATH as HEALTH_CONFIG
from ..node.boot_settings import CONFIG_PATH, REPORT_PATH, BootSettings
from ..operations import files, units
from ..settings import Settings
from . import archives

ARCHIVE = archives.BOOT.path
SERVICE, TARGET = "gpu-node-boot.service", "gpu-node-ready.target"
UNIT_DIR = archives.UNIT_DIR


def boot_archive() -> bytes:
    """The zip application ``python3 -I ARCHIVE`` runs (deploy/tasks/archives.py)."""
    return archives.BOOT.content()


def boot_config(settings: Settings) -> str:
    """deploy/node/first_boot.py's settings (deploy/node/boot_settings.py)."""
    return archives.program_settings(BootSettings, settings, report_path=REPORT_PATH)


def wanted_files(settings: Settings) -> dict[str, tuple[str | bytes, str]]:
    """path -> (content, mode) of every file the first-boot unit needs."""
    return {
        ARCHIVE: (boot_archive(), "644"),
        CONFIG_PATH: (boot_config(settings), "644"),
        f"{UNIT_DIR}/{SERVICE}": (
            render(
                "gpu-node-boot.service.j2",
                archive=ARCHIVE,
                config=CONFIG_PATH,
                health_archive=archives.HEALTH.path if settings.health_check else None,
                health_config=HEALTH_CONFIG,
            ),
            "644",
        ),
        f"{UNIT_DIR}/{TARGET}": (render("gpu-node-ready.target.j2", service=SERVICE), "644"),
    }


def units_read() -> FactCall:
    return (UnitsEnabled, {"units": (SERVICE, TARGET)})


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead: the same calls its operations make."""
    return [*(files.digest_read(path) for path in wanted_files(settings)), units_read()]


@deploy("First-boot unit")
def first_boot_unit(settings: Settings) -> None:
    archives.put_program_files(
        wanted_files(settings), "the first-boot unit", "Reload systemd's units (the first-boot unit changed)"
    )
    enabled = read(host, units_read())
    if any(enabled.get(unit) != "enabled" for unit in (SERVICE, TARGET)):
        units.enable_unit_files(
            name=f"Enable {SERVICE} and {TARGET} (run at every boot, not now)", units=[SERVICE, TARGET], enabled=enabled
        )
