"""
The docs claim no more than their tests show (tests/unit/test_readme.py keeps the tests they name
existing):

- a sentence of README.md or docs/*.md with one of the strong words (proven, real, every, never)
  that names a test running a stand-in says "stand-in", and one naming a test that proves a subset
  says what is left out ("only", "except", "skip", "subset"). What a test runs is read from the test
  itself: a test function whose name says ``standin`` or whose docstring says "stand-in" (a test
  file: every test in it does), and one whose name says ``plan_only`` or whose docstring says
  "subset" (a test file: its module docstring);
- the README's first paragraph says what the tests stand on and links docs/support.md;
- aarch64, which no node container runs, is named as plan-tested;
- no doc tells to install gpu-node by name from a package index, where it is not published;
- the CHANGELOG's first section is the package's version.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

STRONG = re.compile(r"\b(prove[ns]?|real|every|never)\b", re.I)
NAMED_TEST = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")
STAND_IN_NAME, STAND_IN_TEXT = re.compile(r"standin", re.I), re.compile(r"stand-in", re.I)
SUBSET_NAME, SUBSET_TEXT = re.compile(r"plan_only|subset", re.I), re.compile(r"\bsubset\b", re.I)
LEFT_OUT = re.compile(r"\b(only|except|skip\w*|subset)\b", re.I)
# What says stand-in in a sentence: the word, or the name of a test it names.
SAYS_STAND_IN = re.compile(r"stand-?in", re.I)


def split_sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences: it ends at ". " before a capital, a backtick or a parenthesis, a clause
    at "; ", outside `code` and parentheses; not at ":", which joins a claim to the tests it names."""
    parts, start, depth, in_code = [], 0, 0, False
    for index, char in enumerate(paragraph):
        if char == "`":
            in_code = not in_code
        elif not in_code and char in "([":
            depth += 1
        elif not in_code and char in ")]":
            depth = max(depth - 1, 0)
        elif (
            not in_code
            and depth == 0
            and paragraph.startswith(" ", index + 1)
            and (char == ";" or char == "." and re.match(r" [A-Z`(*]", paragraph[index + 1 : index + 3]))
        ):
            parts.append(paragraph[start : index + 1].strip())
            start = index + 1
    parts.append(paragraph[start:].strip())
    return [part for part in parts if part]


def sentences(text: str) -> list[str]:
    """Prose sentences, table rows and list items of a Markdown page, code blocks left out."""
    found: list[str] = []
    paragraph: list[str] = []

    def end_paragraph() -> None:
        if paragraph:
            found.extend(split_sentences(" ".join(paragraph)))
            paragraph.clear()

    in_code = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_code = not in_code
            end_paragraph()
        elif in_code:
            continue
        elif not stripped or stripped.startswith("|"):
            end_paragraph()
            if stripped:
                found.append(stripped)
        else:
            if re.match(r"(- |\d+\. |#)", stripped):
                end_paragraph()
            paragraph.append(stripped)
    end_paragraph()
    return found


@cache
def functions_of(path: str) -> tuple[ast.Module, dict[str, ast.FunctionDef]]:
    module = ast.parse((ROOT / path).read_text())
    return module, {
        node.name: node
        for node in ast.walk(module)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }


def marks(path: str, name: str) -> set[str]:
    """What the named test says it runs: {"stand-in", "subset"}, either or none."""
    if not (ROOT / path).is_file():
        return set()  # tests/unit/test_readme.py names the missing file
    module, functions = functions_of(path)

    def of(function: ast.FunctionDef) -> set[str]:
        docstring = ast.get_docstring(function) or ""
        said = set()
        if STAND_IN_NAME.search(function.name) or STAND_IN_TEXT.search(docstring):
            said.add("stand-in")
        if SUBSET_NAME.search(function.name) or SUBSET_TEXT.search(docstring):
            said.add("subset")
        return said

    if name:
        return of(functions[name]) if name in functions else set()
    said = {"subset"} if SUBSET_TEXT.search(ast.get_docstring(module) or "") else set()
    if functions and all("stand-in" in of(function) for function in functions.values()):
        said.add("stand-in")
    return said


def overclaims(text: str, where: str) -> list[str]:
    """The sentences of a page (``text``) whose strong word its named tests do not bear out."""
    found = []
    for sentence in sentences(text):
        if not STRONG.search(sentence):
            continue
        for path, name in NAMED_TEST.findall(sentence):
            said = marks(path, name)
            missing = [
                mark
                for mark, qualifier in (("stand-in", SAYS_STAND_IN), ("subset", LEFT_OUT))
                if mark in said and not qualifier.search(sentence)
            ]
            if missing:
                test = f"{path}::{name}" if name else path
                found.append(f"{where}: names {test} ({', '.join(missing)}) in: {sentence[:160]}")
    return found


def test_strong_words_stay_out_of_sentences_whose_test_runs_a_stand_in_or_a_subset():
    assert [line for page in PAGES for line in overclaims(page.read_text(), page.name)] == []


def test_the_rule_reads_a_stand_in_and_a_subset_from_the_tests_themselves():
    """The rule's own reading, on sentences about tests whose marks are known."""
    standin = "tests/e2e/test_family_ubuntu.py"  # every test in it is named standin
    subset = "tests/unit/test_hostile_values_run.py"  # its docstring: gpushare's proof is a subset
    assert marks(standin, "") == {"stand-in"} and marks(subset, "") == {"subset"}
    page = (
        f"Ubuntu's apt is real here: `{standin}`. Ubuntu's apt runs over stand-in packages: `{standin}`.\n\n"
        f"| hostile values | never run: `{subset}` |\n| hostile values | never run, except gpushare's compared: `{subset}` |\n"
    )
    assert [line.split(" in: ")[1] for line in overclaims(page, "page")] == [
        f"Ubuntu's apt is real here: `{standin}`.",
        f"| hostile values | never run: `{subset}` |",
    ]


def test_the_readme_opens_with_what_its_tests_stand_on():
    first = README.read_text().split("\n\n", 2)[1]
    assert "](docs/support.md)" in first
    for words in ("no GPU", "stand-in", "lab"):
        assert words in first, words


def test_aarch64_is_named_as_plan_tested_only():
    named = [
        f"{page.name}: {sentence}"
        for page in PAGES
        for sentence in sentences(page.read_text())
        if "aarch64" in sentence
    ]
    assert named, "the README names its architectures"
    assert [line for line in named if not re.search(r"\bplan", line)] == []


# `pip install gpu-node`, `pip install "gpu_node==0.3.0"`, `[pip, install, "gpu-node"]`: a name, not a path or a wheel file
INSTALL_BY_NAME = re.compile(
    r"\bpip[3x]?\b[\s\",']{1,4}install\b[\s\",\[\]']+(?:-\S+\s+)*[\"']?gpu[-_]node(?:[=<>!~]=?[\w.*]+)?(?![\w./-])",
    re.I,
)


def test_no_doc_tells_to_install_gpu_node_by_name_from_an_index():
    """gpu-node is installed from its repository (`pip install .`) or a wheel built from it; no index publishes it."""
    docs = [
        README,
        ROOT / "CHANGELOG.md",
        *sorted(
            path
            for path in (ROOT / "docs").rglob("*")
            if path.is_file() and path.suffix in (".md", ".yaml", ".yml", ".sh", ".toml")
        ),
    ]
    told = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in docs
        for match in INSTALL_BY_NAME.finditer(path.read_text())
    ]
    assert told == []


def test_install_by_name_is_what_the_check_reads():
    for line in (
        "pip install gpu-node",
        "/opt/gpu-node/bin/pip install gpu-node` (or the wheel)",
        '[/opt/gpu-node/bin/pip, install, "gpu-node==0.2.0"]',
        "pip install -U gpu_node",
        "python3 -m pip install 'gpu-node>=0.3'",
    ):
        assert INSTALL_BY_NAME.search(line), line
    for line in (
        "pip install .",
        "pip install gpu_node-0.3.0-py3-none-any.whl",
        "pip install dist/gpu_node-0.3.0.whl",
        "installs the package `gpu_node`",
        "pip install /opt/gpu-node",
        "## 0. Install gpu-node on the controller",
    ):
        assert not INSTALL_BY_NAME.search(line), line


def test_the_changelogs_first_section_is_the_packages_version():
    """What the CHANGELOG lists first is what the package built from this tree is: no "Unreleased"
    changes in a wheel that calls itself the version before them."""
    from deploy import __version__

    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0].split()[0] == __version__, headings[0]
