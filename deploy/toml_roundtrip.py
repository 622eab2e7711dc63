"""
tomlkit's parse, with the text it came from guaranteed back: ``parse(text).as_string() == text``.

tomlkit (0.15) records a doubled indent for a table header that follows a sibling under an
implicit table (``registry.configs."r".auth`` then ``registry.configs."r".tls``, the layout
containerd's documentation shows), so each round trip indents that header further: a wired
config would never compare equal and containerd would restart on every run.
"""

from __future__ import annotations

import re
import sys

import tomlkit
from tomlkit.container import _emits_header
from tomlkit.items import AoT, Table

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same reader, from PyPI (pyproject.toml); read-only parses import it from here
    import tomli as tomllib

# A table header line: its indent and the header itself (arrays of tables too).
HEADER_LINE = re.compile(r"^([ \t]*)(\[\[?[^\]\n]*\]\]?)[ \t]*(?:#.*)?$", re.M)


def _header_tables(body: list, key=None, table=None):
    """The tables of a tomlkit body that render a [header] line, in the order they render."""
    if table is not None and (table.is_aot_element() or _emits_header(key, table)):
        yield table
    for child_key, item in body:
        if isinstance(item, Table):
            yield from _header_tables(item.value.body, child_key, item)
        elif isinstance(item, AoT):
            for element in item.body:
                yield from _header_tables(element.value.body, child_key, element)


def _repair_header_indents(document: tomlkit.TOMLDocument, text: str) -> None:
    """Take each header's indent from the text itself; keep tomlkit's reading when that does not restore the text."""
    if document.as_string() == text:
        return
    tables = list(_header_tables(document.body))
    written = HEADER_LINE.findall(text)
    rendered = HEADER_LINE.findall(document.as_string())
    if not (len(tables) == len(written) == len(rendered)):
        return
    previous = [table.trivia.indent for table in tables]
    for table, (indent, header), (now, again) in zip(tables, written, rendered):
        if header == again and indent != now:
            table.trivia.indent = table.trivia.indent[: len(table.trivia.indent) - len(now)] + indent
    if document.as_string() != text:
        for table, indent in zip(tables, previous):
            table.trivia.indent = indent


def parse(text: str) -> tomlkit.TOMLDocument:
    """tomlkit.parse (raising its ParseError), header indents as written."""
    try:
        document = tomlkit.parse(text)
    except Exception as error:  # noqa: BLE001 - tomlkit's own faults on legal TOML, see below
        document = _parse_dedented(text)
        if document is None:
            raise error
    _repair_header_indents(document, text)
    return document


def _parse_dedented(text: str) -> tomlkit.TOMLDocument | None:
    """
    tomlkit (0.15) fails on an indented header that comes before its parent's (its issue #263
    family), the layout a re-ordered `containerd config default` has. Indentation before a header
    means nothing in TOML: parse without it, then put it back. None when that does not give the
    text back exactly (a header-like line inside a multi-line string, say).
    """
    dedented = HEADER_LINE.sub(lambda match: match.group(0)[len(match.group(1)):], text)
    if dedented == text:
        return None
    try:
        document = tomlkit.parse(dedented)
    except Exception:  # noqa: BLE001 - the caller raises tomlkit's first complaint
        return None
    _repair_header_indents(document, text)
    return document if document.as_string() == text else None
