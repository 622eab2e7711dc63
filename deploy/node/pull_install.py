"""
Install pull mode's units on this node, from the installed package (docs/without-controller.md):

    /opt/gpu-node/bin/python -m gpu_node.node.pull_install

Once /etc/gpu-node/settings.toml is there, root's alone and valid (deploy/node/pull_settings.py;
otherwise one line, and nothing is written or enabled), it writes gpu-node-pull.service (the
deploy run @local by this Python, from deploy/pull.py) and gpu-node-pull.timer, and enables the
timer. Run again after an upgrade: it rewrites them. Recorded as every change gpu-node makes
(deploy/node/records.py), so the undo run (deploy/undo.py) takes them off again: the timer
stopped and disabled, both files removed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from ..foundations.command_line import ArgumentParser, program
from ..foundations.templates import render
from ..reports.node_report import write_text_file
from ..settings import SettingsError
from . import pull_settings
from . import records as node_records

UNIT_DIR = "/etc/systemd/system"
SERVICE, TIMER = "gpu-node-pull.service", "gpu-node-pull.timer"
FIRST, EVERY, SPREAD = "5min", "30min", "5min"


def exec_word(value: str) -> str:
    """``value`` as one word of a unit's ExecStart: systemd splits on spaces and expands ``%`` and
    ``$`` there, so anything but a plain path is double-quoted with those escaped."""
    if re.fullmatch(r"[A-Za-z0-9_@+=:,./-]+", value):
        return value
    escaped = re.sub(r'(["\\])', r"\\\1", value).replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def unit_texts(python: str, entry: str) -> dict[str, str]:
    return {
        SERVICE: render("gpu-node-pull.service.j2", python=exec_word(python), entry=exec_word(entry)),
        TIMER: render("gpu-node-pull.timer.j2", first=FIRST, every=EVERY, spread=SPREAD),
    }


def records_before(paths: list[str]) -> str:
    """Shell: the timer's state and the unit files as they are before this writes them (once: a
    later run keeps the first record)."""
    return "\n".join(
        [
            f"{node_records.record_units([TIMER])} || exit 1",
            *(f"{node_records.record_file(shlex.quote(path))} || exit 1" for path in paths),
        ]
    )


def records_after(paths: list[str]) -> str:
    """Shell: what this wrote, for the undo to know the files as gpu-node left them."""
    return node_records.LIBRARY + "\n".join(f"{node_records.wrote_file(shlex.quote(path))} || exit 1" for path in paths)


def shell(script: str, what: str) -> bool:
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"gpu-node pull_install: {what} failed: {result.stderr.strip()}", file=sys.stderr)
    return result.returncode == 0


def main(argv: list[str] | None = None, unit_dir: str = UNIT_DIR) -> int:
    ArgumentParser(prog=program(f"{__package__}.pull_install"), description=__doc__).parse_args(argv)
    try:
        pull_settings.settings_from_file()
    except SettingsError as refusal:
        print(f"gpu-node pull_install: {refusal}", file=sys.stderr)
        return 1
    entry = str(Path(__file__).resolve().parent.parent / "pull.py")
    texts = unit_texts(sys.executable, entry)
    paths = [str(Path(unit_dir) / name) for name in texts]
    if not shell(records_before(paths), f"recording the units before the change ({node_records.RECORDS_DIR})"):
        return 1
    for path, text in zip(paths, texts.values()):
        os.chmod(write_text_file(Path(path), text), 0o644)
    if not shell(records_after(paths), f"recording the units written ({node_records.RECORDS_DIR})"):
        return 1
    for args in (["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", TIMER]):
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            print(f"gpu-node pull_install: {' '.join(args)} failed: {result.stderr.strip()}", file=sys.stderr)
            return 1
    print(f"gpu-node pull_install: {TIMER} enabled ({unit_dir}/{SERVICE} runs {entry})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
