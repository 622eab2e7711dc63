"""
The first-boot unit's settings file: where it goes, where the boot's report goes, and its shape
(``BootSettings``). Shared by the deploy, which writes it (deploy/tasks/boot.py), and the unit's
program, which reads it (deploy/node/first_boot.py): a run that installs the unit need not import
the program. Standard library only: the boot archive carries it (deploy/tasks/archives.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .root_files import settings_from_file, settings_from_text

CONFIG_PATH = "/etc/gpu-node/boot.json"
REPORT_PATH = "/var/lib/gpu-node/boot-report.json"


@dataclass(frozen=True)
class BootSettings:
    """What the deploy decided for this node (deploy/tasks/boot.py writes it as JSON): the settings of
    these names (``setting`` where the field's name is not the setting's) and where the report goes.
    The boot archive carries the standard library alone, not the settings model:
    tests/unit/test_first_boot.py holds each field's type and default to its setting's."""

    kernel_modules_load: bool = True
    nvidia_kernel_modules: str = "auto"
    cdi: str = "auto"
    driver_root: str = field(default="/", metadata={"setting": "nvidia_driver_root"})
    require_gpu: bool = False
    nvidia_persistenced: bool = True
    fabric_manager_install: bool = True
    report_path: str = field(default=REPORT_PATH, metadata={"setting": None})

    @classmethod
    def from_text(cls, text: str, source: str) -> BootSettings:
        """The settings ``text`` (JSON, as deploy/tasks/boot.py writes it) holds, each of its type;
        ValueError in one line naming ``source`` otherwise."""
        return settings_from_text(cls, text, source, "the boot settings", paths=("report_path",))

    @classmethod
    def from_file(cls, path: str, top: str = "/") -> BootSettings:
        """``from_text`` of ``path``, read only when root alone can have written it and every folder
        above it (deploy/node/root_files.py; ``top``: where that walk starts); ValueError in one line."""
        return settings_from_file(cls, path, "the boot settings", top=top, paths=("report_path",))
