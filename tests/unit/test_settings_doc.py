"""docs/settings.md is generated from deploy/settings/sections/: it must be current, and say what the code does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from test_settings import DOCUMENTED_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "settings_doc.py"
_spec = importlib.util.spec_from_file_location("settings_doc", SCRIPT)
settings_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(settings_doc)


def test_the_committed_settings_reference_is_current():
    committed = (REPO / "docs" / "settings.md").read_text()
    assert committed == settings_doc.render(), (
        f"docs/settings.md is out of date: run {settings_doc.COMMAND} and commit the result"
    )


def test_the_reference_has_one_row_per_setting_with_its_documented_default():
    rows = {
        line.split(" | ")[0].strip("| `"): line.split(" | ")
        for line in (REPO / "docs" / "settings.md").read_text().splitlines()
        if line.startswith("| `")
    }
    assert sorted(rows) == sorted(DOCUMENTED_DEFAULTS)
    for key, default in DOCUMENTED_DEFAULTS.items():
        if default is None:
            expected = "unset"
        elif isinstance(default, bool):
            expected = f"`{str(default).lower()}`"
        elif isinstance(default, tuple):
            expected = f"`{','.join(default)}`" if default else "none"
        else:
            expected = f"`{default}`"
        assert rows[key][1] == expected, key


def test_the_reference_shows_bounds_and_choices():
    text = (REPO / "docs" / "settings.md").read_text()
    assert "| `service_restart_timeout` | `30` | an integer >= 5 <= 600 |" in text
    assert "| `gpu_sharing` | `none` | one of none, time-slicing, mps, gpushare |" in text
    assert "| `container_runtimes` | `containerd` | a comma-separated list of containerd, docker |" in text
