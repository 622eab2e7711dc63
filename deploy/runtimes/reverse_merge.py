"""
Taking gpu-node's wiring back out of a runtime config someone changed since gpu-node last wrote it:
every value where the file before gpu-node and what gpu-node last wrote differ is a value gpu-node
set; each one the file still holds goes back to its value before gpu-node (or out, where it had
none), and a table gpu-node added goes when nothing is left in it. Every other value stays, and in
TOML the file's layout and comments too (the containerd merge's layout engine, its edits checked
to mean exactly the values put back). Pure: data and text in, data and text out.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError

from ..foundations import node_text, toml_layout
from ..foundations.toml_layout import TOMLKIT_FAULTS, ConfigError, tomllib

Path = tuple[str, ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # a value a file does not hold


@dataclass(frozen=True)
class Change:
    """One value gpu-node set: ``before`` in the file before gpu-node, ``written`` what it wrote
    (MISSING: not there)."""

    path: Path
    before: Any
    written: Any


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types (TOML's true is not 1), MISSING only to itself."""
    if a is MISSING or b is MISSING:
        return a is b
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def _tables(value: Any) -> bool:
    return isinstance(value, dict)


def changes(original: dict[str, Any], written: dict[str, Any], path: Path = ()) -> list[Change]:
    """Every value where ``original`` and ``written`` differ, leaf by leaf (tables are followed;
    arrays and a value that is a table on one side only are whole values)."""
    found = []
    for key in [*original, *(key for key in written if key not in original)]:
        before, after = original.get(key, MISSING), written.get(key, MISSING)
        here = (*path, key)
        if _tables(before) and _tables(after):
            found += changes(before, after, here)
        elif _tables(after) and before is MISSING:
            found += changes({}, after, here)
        elif _tables(before) and after is MISSING:
            found += changes(before, {}, here)
        elif not same(before, after):
            found.append(Change(here, before, after))
    return found


def added_tables(original: dict[str, Any], written: dict[str, Any], path: Path = ()) -> list[Path]:
    """The tables ``written`` holds that ``original`` does not (gpu-node added them), deepest first."""
    found = []
    for key, value in written.items():
        if not _tables(value):
            continue
        before = original.get(key, MISSING)
        here = (*path, key)
        found += added_tables(before if _tables(before) else {}, value, here)
        if not _tables(before):
            found.append(here)
    return found


def value_at(tree: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return MISSING
        tree = tree[key]
    return tree


def _put(tree: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    if value is MISSING:
        tree.pop(path[-1], None)
    else:
        tree[path[-1]] = copy.deepcopy(value)


@dataclass(frozen=True)
class Reverted:
    """``live`` with gpu-node's values put back: the result, the changes undone, the tables removed."""

    result: dict[str, Any]
    undone: list[Change]
    removed_tables: list[Path]

    @property
    def changed(self) -> bool:
        return bool(self.undone or self.removed_tables)


def reverted(live: dict[str, Any], original: dict[str, Any], written: dict[str, Any]) -> Reverted:
    """``live`` with each value gpu-node set that it still holds put back to the original's."""
    result = copy.deepcopy(live)
    undone = []
    for change in changes(original, written):
        now = value_at(live, change.path)
        if same(now, change.written) and not same(now, change.before):
            _put(result, change.path, change.before)
            undone.append(change)
    removed = []
    for table in added_tables(original, written):
        if value_at(result, table) == {}:
            _put(result, table, MISSING)
            removed.append(table)
    return Reverted(result, undone, removed)


# TOML, its layout kept. ---------------------------------------------------------------------------


def _values(text: str, source: str) -> dict[str, Any]:
    try:
        return node_text.parsed(tomllib.loads, text, source)
    except node_text.UnreadableText as error:
        raise ConfigError(str(error)) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source} is not valid TOML: {node_text.syntax_error(error, text)}") from None


def _remove(document: Any, path: Path) -> None:
    """Remove the key or table ``path`` from wherever the document defines it."""
    piece = toml_layout.holder(document, path[:-1], path[-1]) if len(path) > 1 else document
    container = piece.value if isinstance(piece, tomlkit.items.Table) else piece
    if piece is None or path[-1] not in container:
        # a table under an implicit parent: walk the document's own proxies
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
        return
    del piece[path[-1]]


def reverse_toml(live: str, original: str, written: str, source: str) -> tuple[str, Reverted]:
    """
    ``live`` (a TOML file's text) with gpu-node's values put back (``reverted``), its layout and
    comments kept; ConfigError (one line naming ``source``) where the text cannot be edited safely.
    """
    result = reverted(
        _values(live, source),
        _values(original, f"{source} (before gpu-node)"),
        _values(written, f"{source} (as gpu-node wrote it)"),
    )
    if not result.changed:
        return live, result
    body, newline, ended = toml_layout.line_endings(live)
    try:
        document = toml_layout.parse(body)
        edits = toml_layout.Edits(document)
        for change in result.undone:
            if change.before is MISSING:
                _remove(document, change.path)
            else:
                edits.set(change.path[:-1], change.path[-1], copy.deepcopy(change.before))
        for table in result.removed_tables:
            _remove(document, table)
        edited = tomlkit.dumps(document)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    except (ParseError, *TOMLKIT_FAULTS) as error:
        raise ConfigError(f"{source}: its layout cannot be edited safely (tomlkit: {type(error).__name__})") from None
    try:
        means = tomllib.loads(edited)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: its layout cannot be edited safely (the edit would not parse: {error})") from None
    if not same(means, result.result):
        raise ConfigError(
            f"{source}: its layout cannot be edited safely (the edit would mean more than the values put back)"
        )
    # tomlkit keeps a comment in the table above it: one written under gpu-node's table would go with it.
    lost = sorted(_comments(live) - _comments(written) - _comments(edited))
    if lost:
        raise ConfigError(
            f"{source}: its layout cannot be edited safely (a comment someone added would go with a "
            f"table gpu-node added: {lost[0]!r})"
        )
    if not ended and edited.endswith("\n"):
        edited = edited[:-1]
    return (edited.replace("\n", newline) if newline != "\n" else edited), result


def _comments(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip().startswith("#")}


def described(result: Reverted) -> str:
    """What the reverse merge did, in words: ``runtimes.nvidia`` ... (a few paths)."""
    paths = [toml_layout.dotted(change.path) for change in result.undone] + [
        toml_layout.dotted(t) for t in result.removed_tables
    ]
    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return shown
