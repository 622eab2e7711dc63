"""docs/troubleshooting.md quotes the lines gpu-node prints: each entry's line, its placeholders
aside, is made of text the code holds, so a reworded message turns this red until the page follows."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
# pyinfra's own parts of a line: its error prefix, and the host it names
PYINFRA_PREFIXES = ("--> pyinfra error: ", "[<host>] ")
PLACEHOLDER = re.compile(r"<[^<>]+>")
# A line is checked clause by clause: the code builds some lines from several strings, and the verify
# table puts its columns two spaces apart.
CLAUSE = re.compile(r": |; |\s{2,}")


def documented_lines() -> list[tuple[str, str]]:
    """(entry title, the first line of its first code block) for each ``###`` entry."""
    entries = []
    for section in PAGE.read_text().split("\n### ")[1:]:
        title, _, body = section.partition("\n")
        block = re.search(r"^```text\n(.*?)\n", body, re.M)
        entries.append((title.strip(), block.group(1) if block else ""))
    return entries


def module_constants(trees) -> dict[str, str]:
    """Module-level ``NAME = "text"`` of the code, by name (a name two modules bind differently is left out)."""
    found: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found.setdefault(node.targets[0].id, set()).add(node.value.value)
    return {name: next(iter(values)) for name, values in found.items() if len(values) == 1}


def code_strings() -> list[str]:
    """Every string literal of deploy/ and the shipped inventory.py, an f-string's fields that name a
    module constant filled in and its other fields cut (a clause must not span one); and the text of
    every shell script the package ships (deploy/shell/*.sh)."""
    paths = [*sorted((ROOT / "deploy").rglob("*.py")), ROOT / "inventory.py"]
    trees = [ast.parse(path.read_text()) for path in paths]
    constants = module_constants(trees)
    strings = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                parts = []
                for value in node.values:
                    if isinstance(value, ast.Constant):
                        parts.append(str(value.value))
                    elif isinstance(value.value, ast.Name) and value.value.id in constants:
                        text = constants[value.value.id]
                        parts.append(repr(text) if value.conversion == ord("r") else text)
                    else:
                        parts.append("\0")
                strings.append("".join(parts))
    return strings + [path.read_text() for path in sorted((ROOT / "deploy").rglob("*.sh"))]


def clauses(line: str) -> list[str]:
    for prefix in PYINFRA_PREFIXES:
        line = line.removeprefix(prefix)
    return [clause.strip() for fixed in PLACEHOLDER.split(line) for clause in CLAUSE.split(fixed) if clause.strip()]


def test_the_page_has_at_least_15_entries_each_quoting_a_line():
    entries = documented_lines()
    assert len(entries) >= 15
    assert [title for title, line in entries if not line] == []


def test_every_documented_line_is_made_of_text_the_code_holds():
    strings = code_strings()
    missing = []
    for title, line in documented_lines():
        parts = clauses(line)
        # Mostly placeholders would prove nothing: each line keeps 25 characters of the code's words.
        if sum(map(len, parts)) < 25:
            missing.append(f"{title}: fewer than 25 characters of fixed text in {line!r}")
        missing += [f"{title}: {part!r}" for part in parts if not any(part in text for text in strings)]
    assert missing == []
