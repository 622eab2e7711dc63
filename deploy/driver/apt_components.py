"""
apt components (contrib, non-free ...) added to a release's Debian entries, in one-line ``.list``
files and deb822 ``.sources`` files alike, each file edited in place and the rest left byte for
byte. Pure: text in, text out. A reader of our own: an edit must leave every other byte of the
file as it was, which a parser that writes the file back from its model would not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def _release_suite(suite: str, codename: str) -> bool:
    return suite == codename or suite.startswith(codename + "-")


def _one_line_entries(text: str) -> Iterator[tuple[int, str, list[str], list[str]]]:
    """(line index, uri, suites, components) of each ``deb`` line of a one-line sources file."""
    for index, line in enumerate(text.split("\n")):
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 3:
            yield index, words[0].rstrip("/"), [words[1]], words[2:]


def _deb822_paragraphs(text: str) -> Iterator[tuple[int, int, dict[str, str], dict[str, tuple[int, int]]]]:
    """(start, end line index, fields, {field: (first line, last line)}) per paragraph."""
    lines = text.split("\n")
    start = None
    for index in range(len(lines) + 1):
        blank = index == len(lines) or not lines[index].strip()
        if not blank and start is None:
            start = index
        if blank and start is not None:
            fields, spans, key = {}, {}, None
            for number in range(start, index):
                line = lines[number]
                if line.startswith("#"):
                    continue
                if line[:1] in (" ", "\t") and key:
                    fields[key] += " " + line.strip()
                    spans[key] = (spans[key][0], number)
                elif ":" in line:
                    key, _, value = line.partition(":")
                    key = key.strip().lower()
                    fields[key] = value.strip()
                    spans[key] = (number, number)
            yield start, index, fields, spans
            start = None


def add_apt_components(sources: dict[str, Any], codename: str, components: Sequence[str]) -> tuple[dict[str, str], int]:
    """
    Add ``components`` to every Debian entry of the release (its suites are ``codename`` or
    ``codename-*`` and it carries ``main``), unless an entry for the same URI and suite already
    has them. Returns ({path: new text} for the files that change, number of release entries).
    Files are edited in place, one line each; everything else stays byte for byte.
    """
    present: dict[tuple[str, str], set[str]] = {}
    # (path, where: a deb822 paragraph's Components lines (first, last) or a one-line entry's line, uris, suites,
    # components)
    edits: list[tuple[str, tuple[int, int] | int | None, list[str], list[str], list[str]]] = []
    for path, text in sorted(sources.items()):
        if path.endswith(".sources"):
            for _start, _end, fields, spans in _deb822_paragraphs(text):
                if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
                    continue
                uris = [uri.rstrip("/") for uri in fields.get("uris", "").split()]
                suites = fields.get("suites", "").split()
                have = fields.get("components", "").split()
                for uri in uris:
                    for suite in suites:
                        present.setdefault((uri, suite), set()).update(have)
                edits.append((path, spans.get("components"), uris, suites, have))
        else:
            for index, uri, suites, have in _one_line_entries(text):
                present.setdefault((uri, suites[0]), set()).update(have)
                edits.append((path, index, [uri], suites, have))

    changed: dict[str, list[str | None]] = {}
    release_entries = 0
    for path, where, uris, suites, have in edits:
        if "main" not in have or not suites or not all(_release_suite(s, codename) for s in suites):
            continue
        release_entries += 1
        missing = [
            component
            for component in components
            if any(component not in present[(uri, suite)] for uri in uris for suite in suites)
        ]
        if not missing or where is None:
            continue
        lines = changed.setdefault(path, sources[path].split("\n"))
        if isinstance(where, tuple):
            first, last = where
            lines[first] = "Components: " + " ".join(have + missing)
            for number in range(first + 1, last + 1):
                lines[number] = None
        else:
            code, hash_, comment = str(lines[where]).partition("#")
            lines[where] = code.rstrip() + " " + " ".join(missing) + (" #" + comment if hash_ else "")
        for uri in uris:
            for suite in suites:
                present[(uri, suite)].update(missing)
    return {
        path: "\n".join(line for line in lines if line is not None) for path, lines in changed.items()
    }, release_entries
