"""
The TOML layout engine the containerd merge edits with: tomlkit's parse with the text guaranteed
back, the pieces of a table split across a file, new tables and keys in the file's own indent and
style, its line endings kept, and the edit machinery that refuses an edited text meaning anything
but the old one plus exactly the values set. Pure: text in, text out.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import tomlkit
from tomlkit.container import _emits_header
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Comment, InlineTable, Table, Whitespace

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same reader, from PyPI (pyproject.toml); read-only parses import it from here
    import tomli as tomllib


# Parsing with the text guaranteed back: ``parse(text).as_string() == text``. --------------
#
# tomlkit (0.15) records a doubled indent for a table header that follows a sibling under an
# implicit table (``registry.configs."r".auth`` then ``registry.configs."r".tls``, the layout
# containerd's documentation shows), so each round trip indents that header further: a wired
# config would never compare equal and containerd would restart on every run.

# A table header line: its indent and the header itself (arrays of tables too).
HEADER_LINE = re.compile(r"^([ \t]*)(\[\[?[^\]\n]*\]\]?)[ \t]*(?:#.*)?$", re.M)


def _header_tables(body: list[tuple[Any, Any]], key: Any = None, table: Any = None) -> Iterator[Any]:
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
    except Exception as error:  # tomlkit's own faults on legal TOML, see below
        dedented = _parse_dedented(text)
        if dedented is None:
            raise error
        document = dedented
    _repair_header_indents(document, text)
    return document


def _parse_dedented(text: str) -> tomlkit.TOMLDocument | None:
    """
    tomlkit (0.15) fails on an indented header that comes before its parent's (its issue #263
    family), the layout a re-ordered `containerd config default` has. Indentation before a header
    means nothing in TOML: parse without it, then put it back. None when that does not give the
    text back exactly (a header-like line inside a multi-line string, say).
    """
    dedented = HEADER_LINE.sub(lambda match: match.group(0)[len(match.group(1)) :], text)
    if dedented == text:
        return None
    try:
        document = tomlkit.parse(dedented)
    except Exception:  # noqa: BLE001 - the caller raises tomlkit's first complaint
        return None
    _repair_header_indents(document, text)
    return document if document.as_string() == text else None


# What tomlkit raises on legal TOML it cannot read or re-render (bugs of its own, not of the file).
TOMLKIT_FAULTS = (TOMLKitError, AttributeError, KeyError, TypeError, ValueError, IndexError)


class ConfigError(ValueError):
    """A config the merge cannot work on; the message names the file and the problem."""


# Tables: the pieces of a split table, where a new key or table goes, in the file's style. ---

TablePath = tuple[str, ...]
TABLES = (Table, InlineTable)


def indent_of(item: Any) -> str:
    indent: str = item.trivia.indent
    return indent.lstrip("\n")


def fragments(container: Any, path: TablePath, prefix: TablePath = ()) -> list[Any]:
    """
    Every table of the document whose full path is ``path``, in text order.

    tomlkit hands back a merged, read-only proxy for a table split across the file (k3s puts
    ``[...containerd]`` and ``[...containerd.runtimes.runc]`` apart, EKS writes a child before
    its parent), so edits go to the concrete pieces its body holds instead.
    """
    found: list[Any] = []
    for key, item in container.body:
        if key is None or not isinstance(item, TABLES):
            continue
        full = prefix + (key.key,)
        if full == path:
            found.append(item)
        elif path[: len(full)] == full:
            found += fragments(item.value, path, full)
    return found


def written_as_dotted_keys(fragment: Any) -> bool:
    """
    An inline table, or a header-less table holding values (``containerd.snapshotter = ...``):
    a child of it must be a dotted key or inline table, a [header] would name the wrong table.
    """
    if isinstance(fragment, InlineTable):
        return True
    if not isinstance(fragment, Table) or not fragment.is_super_table():
        return False
    return any(
        not isinstance(item, (Table, Whitespace, Comment)) or written_as_dotted_keys(item)
        for key, item in fragment.value.body
        if key is not None
    )


def dotted(path: TablePath) -> str:
    """A table path as TOML writes it: plugins."io.containerd.grpc.v1.cri".containerd"""
    return ".".join(name if name.replace("_", "").replace("-", "").isalnum() else f'"{name}"' for name in path)


def _rank(fragment: Any) -> int:
    """Where a new key goes first: a [header] table, an inline table, a dotted-key table."""
    if isinstance(fragment, InlineTable):
        return 1
    return 2 if fragment.is_super_table() else 0


def holder(document: Any, path: TablePath, key: str | None = None) -> Any:
    """The piece of table ``path`` that defines ``key``, else the one a new key belongs in; None: no such table."""
    pieces = fragments(document, path)
    for piece in pieces:
        if key is not None and key in piece.value:
            return piece
    return min(pieces, key=_rank) if pieces else None


def ensure_table(document: Any, path: TablePath, header: bool = True) -> Any:
    """
    Table ``path``, created under its deepest existing ancestor when missing: header-less
    parents, and a [header] for the table itself unless ``header`` is false.
    """
    existing = holder(document, path)
    if existing is not None:
        return existing
    depth = len(path) - 1
    parent = document
    while depth > 0:
        ancestors = fragments(document, path[:depth])
        if ancestors:
            # The last [header] piece, else the last piece: new tables land after the ones there,
            # and never re-declare a table through an implicit piece of it.
            headers = [piece for piece in ancestors if _rank(piece) == 0]
            parent = (headers or ancestors)[-1]
            break
        depth -= 1
    inline = depth > 0 and written_as_dotted_keys(parent)
    for index in range(depth, len(path)):
        name = path[index]
        if name in (parent if parent is document else parent.value):
            raise ConfigError(f"{dotted(path[: index + 1])} is not a table")
        last = index == len(path) - 1
        parent[name] = tomlkit.inline_table() if inline else tomlkit.table(is_super_table=not (last and header))
        parent = holder(document, path[: index + 1])
    return parent


def table_style(parent: Any, nested: str) -> tuple[str, str, str]:
    """Header indent, key indent and nesting step of the tables under ``parent`` (a runtimes table:
    the first runtime, and its ``nested`` sub-table for the step)."""
    for child in parent.values():
        if not isinstance(child, Table) or child.is_super_table():
            continue
        header = indent_of(child)
        keys = [item for key, item in child.value.body if key is not None and not isinstance(item, (Table, Whitespace))]
        key_indent = indent_of(keys[0]) if keys else header
        inner = child.get(nested)
        step = "  " if header or key_indent else ""
        if isinstance(inner, Table) and not inner.is_super_table():
            inner_indent = indent_of(inner)
            step = inner_indent[len(header) :] if inner_indent.startswith(header) else step
        return header, key_indent, step
    return "", "", ""


def ends_with_blank_line(table: Any) -> bool:
    body = table.value.body if isinstance(table, Table) else []
    if not body:
        return False
    last = body[-1][1]
    if isinstance(last, Table):
        return ends_with_blank_line(last)
    return isinstance(last, Whitespace) and "\n" in last.s


def _last_table(table: Table) -> Table:
    tables = [item for _, item in table.value.body if isinstance(item, Table)]
    return _last_table(tables[-1]) if tables else table


def _indent_tables(table: Table, header: str, key_indent: str, step: str, nested: bool = False) -> None:
    table.trivia.indent = ("\n" if nested else "") + header
    for key, item in table.value.body:
        if isinstance(item, Table):
            _indent_tables(item, header + step, key_indent + step, step, nested=True)
        elif key is not None and not isinstance(item, Whitespace):
            item.trivia.indent = key_indent


def format_new(table: Table, previous_blank: bool | None, header: str, key_indent: str, step: str) -> None:
    """
    Indent a table the merge created like its siblings, one blank line between it and the
    table before it: where the file puts blank lines after tables, it gets one too.
    """
    if not isinstance(table, Table):
        return
    _indent_tables(table, header, key_indent, step)
    if previous_blank is None:
        return  # the first table in a new parent: tomlkit separates it already
    if previous_blank:
        _last_table(table).add(tomlkit.nl())
    else:
        table.trivia.indent = "\n" + header


def line_endings(text: str) -> tuple[str, str, bool]:
    """LF text for tomlkit, the line ending to give back, and whether the text ended with one."""
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    body = text.replace("\r\n", "\n") if crlf else text
    ends = body.endswith("\n") or not body
    return (body if ends else body + "\n"), ("\r\n" if crlf else "\n"), ends


# The edit machinery. ----------------------------------------------------------------------


class Edits:
    """
    The values an edit sets and the array items it drops, applied to the document and recorded
    to check the result by; ``notes``: what the edit says it did.

    ``append_new``: new tables are not placed in the document's tree but appended at its end as
    fully named [headers]; the way out for layouts where tomlkit renders a placed table wrongly.
    """

    def __init__(self, document: Any, append_new: bool = False) -> None:
        self.document = document
        self.append_new = append_new
        self.appended: dict[TablePath, dict[str, Any]] = {}
        self.assigned: list[tuple[TablePath, object]] = []
        self.dropped: dict[str, list[Any]] = {}
        self.notes: list[str] = []

    def table(self, path: TablePath, header: bool = True) -> Any:
        """Table ``path`` to add keys to: the document's own, else a new one (see ``ensure_table``)."""
        existing = holder(self.document, path)
        if existing is not None:
            return existing
        if self.append_new:
            return self.appended.setdefault(path, {})
        return ensure_table(self.document, path, header)

    def set(self, path: TablePath, key: str, value: Any) -> None:
        """Set only a value that differs, so an equal value keeps its formatting and comment."""
        table = holder(self.document, path, key) or self.table(path)
        current = table.get(key)
        current = current.unwrap() if hasattr(current, "unwrap") else current
        # type too: containerd wants a boolean, and 1 == True in Python.
        if type(current) is type(value) and current == value:
            return
        if isinstance(current, dict):
            raise ConfigError(f"{dotted(path + (key,))} is a table, not a value")
        self.assigned.append((path + (key,), value))
        if not isinstance(table, TABLES):
            table[key] = value  # a table to append
            return
        siblings = [
            item for name, item in table.value.body if name is not None and not isinstance(item, (Table, Whitespace))
        ]
        table[key] = value
        if current is None and isinstance(table, Table):
            new: Any = table.value.item(key)  # the item just set (typed with a split table's proxy, which it is not)
            if siblings:
                # A new key lines up with the keys already there.
                new.trivia.indent = indent_of(siblings[0])
            elif not table.is_super_table() and indent_of(table):
                # The first key of an indented [header]: one step in, as its sub-tables are.
                new.trivia.indent = indent_of(table) + "  "

    def drop(self, key: str, values: list[Any]) -> None:
        """Take ``values`` out of the document's top-level array ``key`` (one item per value listed)."""
        array = self.document.get(key)
        for value in values:
            index = [str(item) for item in array].index(value)
            del array[index]
        self.dropped[key] = list(values)

    def appended_text(self) -> str:
        blocks = []
        for path, values in self.appended.items():
            lines = [f"[{dotted(path)}]"] + [
                f"{tomlkit.key(key).as_string()} = {tomlkit.item(value).as_string()}" for key, value in values.items()
            ]
            blocks.append("\n".join(lines) + "\n")
        return "\n".join(blocks)


def _check_result(before: str, after: str, edits: Edits, source: str) -> None:
    """
    The edited text must mean the old one plus exactly the assigned values and dropped items: a
    layout tomlkit renders wrongly is refused rather than installed.
    """
    expected = tomllib.loads(before)
    for path, value in edits.assigned:
        table = expected
        for name in path[:-1]:
            table = table.setdefault(name, {})
        table[path[-1]] = value
    for key, values in edits.dropped.items():
        expected[key] = [item for item in expected[key] if item not in values]
    try:
        actual = tomllib.loads(after)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: its layout cannot be edited safely (the edit would not parse: {error})") from None
    if actual != expected:
        raise ConfigError(f"{source}: its layout cannot be edited safely: {_first_difference(expected, actual)}")


def _first_difference(expected: Any, actual: Any, path: TablePath = ()) -> str:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in list(expected) + [k for k in actual if k not in expected]:
            if expected.get(key) != actual.get(key):
                return _first_difference(expected.get(key), actual.get(key), path + (key,))
    return f"{dotted(path) or 'the document'} would change unasked"


class _LayoutRefused(ConfigError):
    """The edited text does not mean the old one plus the edits, or tomlkit cannot read it back."""


Parse = Callable[[str], tomlkit.TOMLDocument]
Apply = Callable[[tomlkit.TOMLDocument, Edits], None]


def edit(text: str, source: str, parse_document: Parse, apply: Apply) -> tuple[str, Edits]:
    """
    Parse ``text`` with ``parse_document`` (LF text in), let ``apply(document, edits)`` edit it,
    check and render the result in the text's own line endings; also the ``Edits`` it made.
    A ConfigError names ``source``.
    """
    body, newline, ended = line_endings(text)
    try:
        edited, edits = _edit_once(body, source, parse_document, apply, append_new=False)
    except _LayoutRefused as placed:
        # tomlkit rendered a table placed in the tree wrongly: append new tables at the end instead.
        try:
            edited, edits = _edit_once(body, source, parse_document, apply, append_new=True)
        except _LayoutRefused:
            raise ConfigError(str(placed)) from None
    if not ended and edited.endswith("\n"):
        edited = edited[:-1]
    return (edited.replace("\n", newline) if newline != "\n" else edited), edits


def _edit_once(body: str, source: str, parse_document: Parse, apply: Apply, append_new: bool) -> tuple[str, Edits]:
    document = parse_document(body)
    edits = Edits(document, append_new=append_new)
    try:
        apply(document, edits)
        edited = tomlkit.dumps(document)
    except _LayoutRefused:
        raise
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    except TOMLKIT_FAULTS as error:
        raise _LayoutRefused(
            f"{source}: its layout cannot be edited safely (tomlkit cannot edit it: {type(error).__name__})"
        ) from None
    if edits.appended:
        edited = (edited if edited.endswith("\n") else edited + "\n") + "\n" + edits.appended_text()
    if edited != body:
        try:
            _check_result(body, edited, edits, source)
        except ConfigError as error:
            raise _LayoutRefused(str(error)) from None
        try:
            parse(edited)
        except Exception:  # noqa: BLE001 - any tomlkit fault: the next run could not read it back
            raise _LayoutRefused(
                f"{source}: its layout cannot be edited safely (tomlkit could not read "
                "the edited file back, so a second run could not check it)"
            ) from None
    return edited, edits
