"""
The health check's settings file: where it goes, where the check keeps its state, and its shape
(``HealthSettings``). Shared by the deploy, which writes it (deploy/tasks/health.py) and names it in
the first-boot unit (deploy/tasks/boot.py), and the check, which reads it (deploy/health/check.py):
a run that installs the check need not import the check. Standard library only: the health
archive carries it (deploy/tasks/archives.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..node.root_files import settings_from_file, settings_from_text
from ..reports.health_report import HEALTH_REPORT_PATH

CONFIG_PATH = "/etc/gpu-node/health-check.json"
STATE_PATH = "/var/lib/gpu-node/health.state"  # not *.json: the fleet view reads those as reports

WHAT, PATHS = "the health check's settings", ("driver_root", "report_path", "state_path")


@dataclass(frozen=True)
class HealthSettings:
    """What the deploy decided for this node (deploy/tasks/health.py writes it as JSON): the settings of
    these names (``setting`` where the field's name is not the setting's), where the report and the
    state go. tests/unit/test_health_check.py holds each field's type and default to its setting's."""

    nvidia_persistenced: bool = True
    fabric_manager_install: bool = True
    driver_root: str = field(default="/", metadata={"setting": "nvidia_driver_root"})
    report_path: str = field(default=HEALTH_REPORT_PATH, metadata={"setting": None})
    state_path: str = field(default=STATE_PATH, metadata={"setting": None})

    @classmethod
    def from_text(cls, text: str, source: str) -> HealthSettings:
        """The settings ``text`` (JSON, as deploy/tasks/health.py writes it) holds, each of its type;
        ValueError in one line naming ``source`` otherwise."""
        return settings_from_text(cls, text, source, WHAT, paths=PATHS)

    @classmethod
    def from_file(cls, path: str, top: str = "/") -> HealthSettings:
        """``from_text`` of ``path``, read only when root alone can have written it and every folder
        above it (deploy/node/root_files.py; ``top``: where that walk starts)."""
        return settings_from_file(cls, path, WHAT, top=top, paths=PATHS)
