"""
The first-boot unit (deploy/node/first_boot.py, docs/without-controller.md): at every boot, before
``gpu-node-ready.target``, the node loads the kernel module its GPUs need, regenerates the CDI
spec, starts persistenced and Fabric Manager, verifies and writes its report. This stage puts the
program (one zip application: deploy/node/first_boot.py with the standard-library modules it
reuses: deploy/node/root_files.py, the pure deploy/driver/module_type.py and deploy/driver/fabric.py,
deploy/foundations/command_line.py), its settings (JSON) and the two units in place and enables
them; it starts nothing (the next boot runs it; ``systemctl start gpu-node-ready.target`` runs it
now).
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import fields
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from .. import __version__
from ..node import first_boot
from ..facts.read_ahead import FactCall, read
from ..facts.units import UnitsEnabled
from ..operations import files, units
from ..settings import Settings
from ..foundations.templates import render

ARCHIVE = "/usr/lib/gpu-node/gpu-node-boot.pyz"
SERVICE, TARGET = "gpu-node-boot.service", "gpu-node-ready.target"
UNIT_DIR = "/etc/systemd/system"
# The modules the node runs, from this package: the decisions are the deploy's own (no twin). Each
# keeps its folder under gpu_node_boot/ (with an empty __init__.py: the archive carries no package's
# own), so their relative imports of each other hold as in the package.
ARCHIVE_MODULES = ("node/first_boot.py", "node/root_files.py", "driver/module_type.py", "driver/fabric.py",
                   "foundations/command_line.py")
MAIN = "import sys\nfrom gpu_node_boot.node.first_boot import main\nsys.exit(main())\n"
# A fixed date and no compression: the same package gives the same bytes, so a re-run changes nothing.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def boot_archive() -> bytes:
    """The zip application ``python3 -I ARCHIVE`` runs: package gpu_node_boot, and its __main__."""
    here = Path(__file__).resolve().parent.parent
    # the package's version, which first_boot writes into its report as the wheel's __init__ gives it
    members = {"__main__.py": MAIN, "gpu_node_boot/__init__.py": f"__version__ = {__version__!r}\n"}
    members.update({f"gpu_node_boot/{folder}/__init__.py": "" for folder in sorted(
        {name.rpartition("/")[0] for name in ARCHIVE_MODULES})})
    members.update({f"gpu_node_boot/{name}": (here / name).read_text(encoding="utf-8") for name in ARCHIVE_MODULES})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, text in members.items():
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.external_attr = 0o644 << 16
            archive.writestr(info, text)
    return buffer.getvalue()


def boot_config(settings: Settings) -> str:
    """deploy/node/first_boot.py's settings (``BootSettings``: each field the setting it names), written
    by json's serializer."""
    values: dict[str, object] = {"report_path": first_boot.REPORT_PATH}
    for each in fields(first_boot.BootSettings):
        setting = each.metadata.get("setting", each.name)
        if setting is not None:
            values[each.name] = getattr(settings, setting)
    return json.dumps(values, indent=2, sort_keys=True) + "\n"


def wanted_files(settings: Settings) -> dict[str, tuple[str | bytes, str]]:
    """path -> (content, mode) of every file the first-boot unit needs."""
    return {
        ARCHIVE: (boot_archive(), "644"),
        first_boot.CONFIG_PATH: (boot_config(settings), "644"),
        f"{UNIT_DIR}/{SERVICE}": (render("gpu-node-boot.service.j2", archive=ARCHIVE, config=first_boot.CONFIG_PATH),
                                  "644"),
        f"{UNIT_DIR}/{TARGET}": (render("gpu-node-ready.target.j2", service=SERVICE), "644"),
    }


def units_read() -> FactCall:
    return (UnitsEnabled, {"units": (SERVICE, TARGET)})


def reads(settings: Settings) -> list[FactCall]:
    """What this stage decides on, for preflight to read ahead: the same calls its operations make."""
    return [*(files.digest_read(path) for path in wanted_files(settings)), units_read()]


@deploy("First-boot unit")
def first_boot_unit(settings: Settings):
    # Operations only for what differs: a fleet's no-op pays pyinfra's cost per operation.
    changed_units = False
    for path, (content, mode) in wanted_files(settings).items():
        if files.text_up_to_date(read(host, files.digest_read(path)), content, mode=mode):
            continue
        files.put_text(name=f"Put {path} (the first-boot unit)", dest=path, content=content, mode=mode)
        changed_units |= path.startswith(UNIT_DIR)
    if changed_units:
        # systemd reads a changed unit at its next reload; an image root (a bake) has no running
        # systemd (its own test: /run/systemd/system): the image's first boot reads it.
        server.shell(name="Reload systemd's units (the first-boot unit changed)",
                     commands=["if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"])
    enabled = read(host, units_read())
    if any(enabled.get(unit) != "enabled" for unit in (SERVICE, TARGET)):
        units.enable_unit_files(name=f"Enable {SERVICE} and {TARGET} (run at every boot, not now)",
                                units=[SERVICE, TARGET], enabled=enabled)
