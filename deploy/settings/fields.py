"""
Reading the settings' declarations: the type inside a field's annotation, its choices, what it
allows in words (for the error line, docs/settings.md and --help), and a ``--data`` value as the
field's type reads it. Pure.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo

from .values import Allowed


def unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """(the type inside ``X | None`` and ``Annotated[X, ...]``, the Annotated metadata, whether None is allowed)."""
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        optional, annotation = len(inner) < len(get_args(annotation)), inner[0]
    metadata: list[Any] = []
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        metadata += extra
    return annotation, metadata, optional


def choices(annotation: Any) -> tuple[str, ...]:
    """The names a ``Literal`` or a tuple of one allows (empty for other types)."""
    if get_origin(annotation) is tuple:
        annotation = get_args(annotation)[0]
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def allowed_values(item: FieldInfo) -> str:
    """What a setting allows, in words: from its type, bounds and choices."""
    annotation, metadata, _ = unwrap(item.annotation)
    metadata = [*item.metadata, *metadata]
    described = [entry.text for entry in metadata if isinstance(entry, Allowed)]
    if described:
        return described[0]
    if annotation is bool:
        return "true or false (also 1/0, yes/no)"
    if annotation is int:
        bounds = [f">= {entry.ge}" for entry in metadata if hasattr(entry, "ge")]
        bounds += [f"<= {entry.le}" for entry in metadata if hasattr(entry, "le")]
        return " ".join(["an integer", *bounds])
    if get_origin(annotation) is tuple and choices(annotation):
        return "a comma-separated list of " + ", ".join(choices(annotation))
    if choices(annotation):
        return "one of " + ", ".join(choices(annotation))
    raise TypeError(f"no words for what {annotation} allows: give its type an Allowed(...)")


def from_command_line(item: FieldInfo, value: Any) -> Any:
    """
    A ``--data`` value as the setting's type reads it: text stripped, '' or 'none' unset where
    None is allowed, choices case-insensitive, a comma-separated list split (duplicates folded),
    and a bool given to a number left as the text it was (pydantic would read true as 1).
    """
    annotation, _, optional = unwrap(item.annotation)
    names = {name.lower(): name for name in choices(annotation)}
    if isinstance(value, str):
        value = value.strip()
        if optional and value.lower() in ("", "none"):
            return None
    if annotation is int and isinstance(value, bool):
        return str(value).lower()
    if get_origin(annotation) is tuple and names:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, (list, tuple)):
            stripped = (str(entry).strip() for entry in items)
            return tuple(dict.fromkeys(names.get(entry.lower(), entry) for entry in stripped if entry))
    if isinstance(value, str) and names:
        return names.get(value.lower(), value)
    return value
