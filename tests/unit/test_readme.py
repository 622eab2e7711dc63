"""The README and docs/ keep their promises: cited tests and linked files exist, nothing outside the repository is cited."""

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_every_test_the_docs_cite_exists():
    """The fault table's last column is a promise: each cited file and test function is real."""
    cited = [
        found for page in [README, *DOCS] for found in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?", page.read_text())
    ]
    assert len(cited) > 20
    missing = []
    for path, name in cited:
        source = ROOT / path
        if not source.exists():
            missing.append(path)
            continue
        if name:
            functions = {
                node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.FunctionDef)
            }
            if name not in functions:
                missing.append(f"{path}::{name}")
    assert missing == []


def test_every_file_the_docs_name_exists():
    """Module names in docs/architecture.md and docs/contributing.md follow the code."""
    named = {
        (page.name, path)
        for page in [README, *DOCS]
        for path in re.findall(
            r"`((?:deploy|tests|scripts|bench|templates|docs|group_data)/[\w./-]*\w)", page.read_text()
        )
    }
    assert len(named) > 20
    assert sorted(f"{page}: {path}" for page, path in named if not (ROOT / path).exists()) == []


def test_every_relative_link_of_the_docs_points_to_a_file_in_the_repository():
    broken = []
    for page in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).resolve().is_file():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_stays_short():
    assert len(README.read_text().splitlines()) < 200


# DESIGN.md, FACTS.md, the old lab folder, anything of ../shared but the corpus folder itself, or a
# file inside the corpus folder.
OUTSIDE = re.compile(r"DESIGN" r"\.md|FACTS" r"\.md|shared" r"/lab\b|\.\./shared(?!/corpus\b)|shared/corpus/[\w.-]")


def test_no_tracked_file_cites_a_design_file_or_folder_outside_the_repository():
    """The project stands on its own: docs/ says what a contributor needs. The corpus folder may be
    named only as the default of GPU_NODE_CORPUS; the lab has no default."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    offenders = []
    for name in tracked.stdout.split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path == Path(__file__):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []


def test_the_readme_distribution_table_names_real_families_and_every_family():
    from deploy.distros.families import FAMILIES

    section = README.read_text().split("## Supported distributions", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ") and "`" in line]
    named = {token for row in rows for token in re.findall(r"`([\w-]+)`", row[1])}
    known = {distro_id: family.name for family in FAMILIES for distro_id in family.ids}
    assert sorted(named - set(known)) == []
    assert sorted({family.name for family in FAMILIES} - {known[distro_id] for distro_id in named}) == []
    managers = {known[token]: row[2].strip() for row in rows for token in re.findall(r"`([\w-]+)`", row[1])}
    assert {family.name: family.package_manager.name for family in FAMILIES} == managers


def test_the_defaults_the_readme_repeats_are_those_of_docs_settings():
    """The few defaults the README repeats are those of docs/settings.md (generated from the code)."""

    def defaults(text: str) -> dict[str, str]:
        return {key: default for key, default in re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", text, re.M)}

    repeated = defaults(README.read_text().split("What a first run usually sets", 1)[1])
    assert len(repeated) >= 5
    reference = defaults((ROOT / "docs" / "settings.md").read_text())
    assert {key: reference.get(key) for key in repeated} == repeated
