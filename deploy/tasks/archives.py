"""
The zip applications a GPU node runs with its own python3 (``python3 -I ARCHIVE``), from this
package's modules and nothing else: the first-boot unit's (deploy/node/first_boot.py) and the health
check's (deploy/health/check.py). Each module keeps its folder under the archive's package (with an
empty __init__.py: the archive carries no package's own), so their relative imports of each other
hold as in the package. A fixed date and no compression: the same package gives the same bytes,
so a re-run changes nothing.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

from pyinfra import host
from pyinfra.operations import server

from .. import __version__
from ..facts.read_ahead import read
from ..operations import files
from ..reports.health_report import HEALTH_CHECK_PROGRAM
from ..settings import Settings

ZIP_DATE = (1980, 1, 1, 0, 0, 0)
LIBRARY = "/usr/lib/gpu-node"


@dataclass(frozen=True)
class Archive:
    path: str
    package: str
    modules: tuple[str, ...]  # below deploy/, each standard library only
    main: str  # the module whose main() the archive runs

    def content(self) -> bytes:
        """The zip application: package ``package`` with ``modules``, and its __main__."""
        here = Path(__file__).resolve().parent.parent
        # the package's version, which the programs write into their reports as the wheel's __init__ gives it
        members = {
            "__main__.py": f"import sys\nfrom {self.package}.{self.main} import main\nsys.exit(main())\n",
            f"{self.package}/__init__.py": f"__version__ = {__version__!r}\n",
        }
        members.update(
            {
                f"{self.package}/{folder}/__init__.py": ""
                for folder in sorted({name.rpartition("/")[0] for name in self.modules})
            }
        )
        members.update({f"{self.package}/{name}": (here / name).read_text(encoding="utf-8") for name in self.modules})
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for name, text in members.items():
                info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                info.external_attr = 0o644 << 16
                archive.writestr(info, text)
        return buffer.getvalue()


_BOOT_MODULES = (
    "node/first_boot.py",
    "node/boot_settings.py",
    "node/root_files.py",
    "driver/module_type.py",
    "driver/fabric.py",
    "foundations/command_line.py",
)
BOOT = Archive(f"{LIBRARY}/gpu-node-boot.pyz", "gpu_node_boot", _BOOT_MODULES, "node.first_boot")
HEALTH = Archive(
    HEALTH_CHECK_PROGRAM,
    "gpu_node_health",
    (
        *_BOOT_MODULES,
        "driver/next_boot.py",
        "reports/health_report.py",
        "health/check.py",
        "health/journal.py",
        "health/node.py",
        "health/problems.py",
        "health/readings.py",
        "health/settings.py",
        "health/xids.py",
    ),
    "health.check",
)


def program_settings(program_settings_type: type, settings: Settings, **fixed: object) -> str:
    """A node program's settings file (its dataclass ``program_settings_type``: each field the setting
    of its name, or of its ``setting`` metadata; None there: one of ``fixed``), written by json's
    serializer."""
    values: dict[str, object] = dict(fixed)
    for each in fields(program_settings_type):
        setting = each.metadata.get("setting", each.name)
        if setting is not None:
            values[each.name] = getattr(settings, setting)
    return json.dumps(values, indent=2, sort_keys=True) + "\n"


UNIT_DIR = "/etc/systemd/system"


def put_program_files(wanted: dict[str, tuple[str | bytes, str]], what: str, reload_name: str) -> None:
    """A node program's files (path: (content, mode)), each put only where it differs (a fleet's no-op
    pays pyinfra's cost per operation), and systemd's units reloaded where one of its units changed
    (an image root, a bake, has no running systemd: the image's first boot reads them)."""
    changed_units = False
    for path, (content, mode) in wanted.items():
        if files.text_up_to_date(read(host, files.digest_read(path)), content, mode=mode):
            continue
        files.put_text(name=f"Put {path} ({what})", dest=path, content=content, mode=mode)
        changed_units |= path.startswith(UNIT_DIR)
    if changed_units:
        server.shell(name=reload_name, commands=["if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"])
