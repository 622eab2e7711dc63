"""
Every deploy/ path a comment, docstring or doc page names (``deploy/<folder>/<module>.py``, a folder with
its slash) exists: the restructure into domain folders (issue 46) left mentions of modules that had moved.
CHANGELOG.md is history and keeps the paths of its day.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a path under deploy/ as prose writes it: a file of code, shell or data, or a folder (its trailing slash)
NAMED = re.compile(r"(?<![\w./-])deploy/(?:[\w-]+/)*(?:[\w-]+\.(?:py|sh|json|toml|j2)\b|[\w-]+/)")


def stale_mentions(root: Path, files: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(root)}:{number}: {match.group(0)}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in NAMED.finditer(line)
        if not (root / match.group(0)).exists()
    ]


def searched(root: Path) -> list[Path]:
    return [
        *sorted(root.glob("deploy/**/*.py")),
        *sorted(root.glob("deploy/shell/*.sh")),
        *sorted(path for path in root.glob("tests/**/*.py") if path.name != Path(__file__).name),
        *sorted(root.glob("docs/**/*.md")),
        root / "README.md",
    ]


def test_every_deploy_path_named_in_the_code_tests_and_docs_exists():
    assert stale_mentions(ROOT, searched(ROOT)) == []


def test_the_check_reads_a_moved_module_and_a_gone_folder_as_stale(tmp_path):
    (tmp_path / "deploy" / "reports").mkdir(parents=True)
    (tmp_path / "deploy" / "reports" / "exit_status.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "as deploy/reports/exit_status.py says (once deploy/exit_status.py), beside deploy/engines/ and deploy/\n"
    )
    (tmp_path / "README.md").write_text("")
    assert stale_mentions(tmp_path, searched(tmp_path)) == [
        "docs/page.md:1: deploy/exit_status.py",
        "docs/page.md:1: deploy/engines/",
    ]
