"""
Text gpu-node did not write itself: a node's files (containerd's config.toml and the files it
imports, daemon.json and Docker's unit, the nvidia runtime's config, CDI specs, the kubelet's
config, the scheduler's manifest, apt's sources) and what its tools print (``containerd config
dump``, ``docker info``, ``kubectl``). Every parser reads such text through ``parsed`` (or, for a
line-by-line reader, ``checked``): text too large, not UTF-8, nested deeper than any real config,
or holding a number Python will not convert raises ``UnreadableText``, one line naming its source
(and the line, where there is one), instead of an exception that would stop every host of the run.
Pure: text in, value out.
"""

from __future__ import annotations

import base64
import binascii
import re
import sys
from collections.abc import Callable
from typing import TypeVar

import yaml

from . import shell_scripts

if sys.version_info >= (3, 11):
    import tomllib
else:  # as deploy/foundations/toml_layout.py reads it
    import tomli as tomllib

# A file is read whole onto the controller, which parses it there for every host of the run, an
# edit several times (tomlkit takes about 2 s a MiB): 1 MiB is fifty times the largest config the
# tests know (containerd's fully documented CRI config, 20 KiB). The node sends at most one byte
# more (``base64_read``), so a larger file costs no more than that to refuse.
MAX_FILE_BYTES = 1024 * 1024
# containerd's deepest setting is seven tables down, Kubernetes objects reach about twenty
# (managedFields); deeper nesting is refused before code that walks it recursively meets it.
MAX_DEPTH = 64

T = TypeVar("T")


class UnreadableText(ValueError):
    """Text no parser may read: the message names its source and the problem, in one line."""


def base64_read(quoted_path: str) -> str:
    """Shell words printing a file's first ``MAX_FILE_BYTES`` + 1 bytes as one base64 line: every
    byte survives pyinfra's connector (which takes command output as UTF-8), and a file too large to
    read costs one byte more than the bound to refuse."""
    return f"head -c {MAX_FILE_BYTES + 1} < {quoted_path} | base64 -w0"


def base64_reader() -> str:
    """Shell defining ``read_base64 FILE``: ``base64_read`` as a function, for deploy/shell/'s scripts."""
    return shell_scripts.script("read_base64", max_bytes=MAX_FILE_BYTES + 1)


def decode(data: bytes) -> str:
    """A node's bytes as text, bytes that are not UTF-8 kept as lone surrogates: nothing is lost,
    and ``checked`` names the line of the first one."""
    return data.decode("utf-8", "surrogateescape")


_NOT_UTF8 = re.compile("[\udc80-\udcff]")


# C0 and C1 control characters (ESC, CR, BEL ending an OSC title, CSI as one byte: 0x9b) and the
# lone surrogates ``decode`` keeps for bytes that are not UTF-8, which no UTF-8 terminal can print.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` for a terminal, each of those characters written as a Python string escape (``\\x1b``,
    ``\\r``, ``\\udc80``): text a node sent can neither move the cursor, erase nor retitle what an
    operator reads (the node and fleet reports' tables, the fleet view's lines)."""
    return _UNPRINTABLE.sub(lambda match: repr(match.group())[1:-1], text)


def checked(text: str, source: str, max_bytes: int | None = MAX_FILE_BYTES) -> str:
    """``text`` when a parser may read it: at most ``max_bytes`` bytes (None: the caller bounds it)
    and UTF-8 throughout (text from ``decode``)."""
    if max_bytes is not None and len(text) * 4 > max_bytes:
        size = len(text.encode("utf-8", "surrogateescape"))
        if size > max_bytes:
            raise UnreadableText(f"{source} is larger than gpu-node reads ({max_bytes // 1024} KiB)")
    bad = _NOT_UTF8.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise UnreadableText(f"{source} is not UTF-8 text: byte 0x{ord(bad.group()) - 0xDC00:02x} on line {line}")
    return text


def parsed(parse: Callable[[str], T], text: str, source: str, max_bytes: int | None = MAX_FILE_BYTES) -> T:
    """
    ``parse(text)`` once the text is ``checked``, and its value no deeper than ``MAX_DEPTH``. The
    parser's own errors for text it does not accept pass through, for the caller to word with the
    line they name; what no parser should meet raises ``UnreadableText``.
    """
    checked(text, source, max_bytes)
    try:
        value = parse(text)
    except RecursionError:
        raise UnreadableText(f"{source} nests values deeper than gpu-node reads ({MAX_DEPTH} levels)") from None
    except ValueError as error:
        # Python refuses to convert an integer literal this long (a guard against slow conversion).
        if "integer string conversion" not in str(error):
            raise
        raise UnreadableText(f"{source} holds a number of more than {sys.get_int_max_str_digits()} digits") from None
    _check_shape(value, source, len(text) + 1)
    return value


def syntax_error(error: Exception, text: str) -> str:
    """A parser's complaint about text it does not accept, in one line with the line it names:
    PyYAML's spans several lines (a quoted excerpt of the text among them), tomllib names no line
    for text that stops short."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return " ".join(f"{error.context or ''} {error.problem or ''}".split()) + where
    message = " ".join(str(error).split())
    if isinstance(error, tomllib.TOMLDecodeError):
        message = message.replace("(at end of document)", f"(at the end of the text, line {text.count(chr(10)) + 1})")
    return message


def _check_shape(value: object, source: str, budget: int) -> None:
    """Refuse a value nested deeper than ``MAX_DEPTH``, or holding more values than ``budget``:
    text holds no more values than characters unless YAML aliases repeat them (a "billion laughs"
    document, whose expansion any later walk would pay for). Walked with a list, not recursion."""
    if not isinstance(value, (dict, list)):
        return
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = list(item.values()) if isinstance(item, dict) else item
        budget -= len(children)
        if budget < 0:
            raise UnreadableText(f"{source} repeats values through aliases into more than its text holds")
        if children and depth >= MAX_DEPTH:
            raise UnreadableText(f"{source} nests values deeper than gpu-node reads ({MAX_DEPTH} levels)")
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def decode_b64(text: str, what: str, keep_bytes: bool = False) -> str:
    """Base64 text a command printed, decoded; a note naming ``what`` when it is not base64.
    ``keep_bytes``: a file a parser reads, whose bytes that are not UTF-8 its guard names
    (``decode``); else they read as U+FFFD."""
    try:
        data = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return f"(could not decode {what})"
    return decode(data) if keep_bytes else data.decode("utf-8", "replace")


def short(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters: what a step's reason quotes of a node's output."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
