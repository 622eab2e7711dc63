"""
Keep credentials found in existing runtime configs out of what this tool prints.

containerd's config.toml can hold registry credentials (``registry.configs."HOST".auth``,
the older ``registry.auths``, k3s's generated config), daemon.json or a ``hosts.toml``
can hold tokens and headers (``X-Api-Key``, ``Authorization``), and any URL can carry a user and
password (a mirror endpoint ``https://bob:pw@mirror``, a proxy). The ``--diff`` output of the
runtime operations, the errors built from config content or daemon output, a failed host's line
and the verify report go through here: key names and layout stay, the values of credential keys
(and everything under a credential table) become ``***``, and so do the user-info of every URL
and the credentials after ``Bearer`` or ``Basic``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tomlkit
from tomlkit.items import AoT, Array, InlineTable, Item, Table

from . import toml_layout

if TYPE_CHECKING:
    from pyinfra.api import Host

MASK = "***"
# A key whose name holds one of these words is a credential, and so is everything under it:
# containerd's auth tables (username, password, auth, identitytoken), auths, Authorization and
# X-Api-Key headers, api_key, bearer_token... Each is an extended regular expression that sed -E
# reads the same way (deploy/operations/safe_install.py filters daemon output with it).
SECRET_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "token",
    "secret",
    "auth",
    "credential",
    "bearer",
    "cookie",
    "api[-_. ]?key",
    "access[-_. ]?key",
    "private[-_. ]?key",
)
_SECRET_KEY = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    return _SECRET_KEY.search(str(name)) is not None


# Text anywhere ------------------------------------------------------------------------------

# The user-info of a URL: from the scheme to the last @ before the host (a password may hold an
# unencoded @); the host, port and path stay.
_URL_USERINFO = re.compile(r"""([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#"'<>]*@""")
# An HTTP credential after its scheme word: "Authorization: Bearer eyJ...", "Basic Ym9i...".
_SCHEME_CREDENTIAL = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)


def mask_text(text: str) -> str:
    """``text`` with the user-info of every URL and every Bearer / Basic credential replaced by ``***``."""
    return _SCHEME_CREDENTIAL.sub(r"\1 " + MASK, _URL_USERINFO.sub(r"\1" + MASK + "@", text))


# TOML -------------------------------------------------------------------------------------


def _masked_item(old: Item) -> Item:
    new = tomlkit.item(MASK)
    new._trivia = old.trivia  # keep indent and comment: the masked line lines up with the real one
    return new


def _mask_array(array: Array, secret: bool) -> None:
    for value in array:
        if isinstance(value, InlineTable):
            _mask_toml_body(value.value.body, secret)
        elif isinstance(value, Array):
            _mask_array(value, secret)


def _mask_toml_body(body: list[tuple[Any, Item]], secret: bool) -> None:
    """
    Walk a tomlkit body (the list of (key, item) pairs it renders from) and swap masked items
    in place: going around tomlkit's mapping interface keeps it from re-indenting tables.
    """
    for index, (key, item) in enumerate(body):
        if key is None:
            continue  # a comment or blank line
        hidden = secret or is_secret_key(key.key)
        if isinstance(item, (Table, InlineTable)):
            _mask_toml_body(item.value.body, hidden)
        elif isinstance(item, AoT):
            for table in item.body:
                _mask_toml_body(table.value.body, hidden)
        elif hidden:
            body[index] = (key, _masked_item(item))
        elif isinstance(item, Array):
            _mask_array(item, hidden)


def mask_toml(text: str) -> str:
    """``text`` with every credential value replaced by ``"***"`` (and ``mask_text``'s); comments
    and layout kept."""
    document = toml_layout.parse(text)
    _mask_toml_body(document.body, False)
    return mask_text(document.as_string())


# tomlkit quotes the offending character (the first character of a value, say): drop it.
_QUOTED_CHARACTER = re.compile(r""":?\s*(?:'(?:[^'\\]|\\.)*'|"'")""")


def toml_error(error: Exception) -> str:
    """A tomlkit parse error without the characters it quotes from the file: kind, line, column."""
    message = _QUOTED_CHARACTER.sub("", str(error))
    return " ".join(message.split())


# containerd 1.6 (go-toml v1) quotes a mistyped value: "Can't convert 987654321(int64) to string".
_GO_TOML_CONVERT = re.compile(r"(Can't convert ).*")
_SECRET_ASSIGNMENT = re.compile(
    r"""(["']?[\w.-]*(?:""" + "|".join(SECRET_WORDS) + r""")[\w.-]*["']?\s*[=:]\s*).+""", re.IGNORECASE
)


def shell_daemon_output_filter() -> str:
    """``daemon_output`` as a sed command, for output a remote script prints itself."""
    words = "|".join(SECRET_WORDS)
    quote = "\"'\"'\"'"  # a ' inside the single-quoted sed script
    return (
        'sed -E -e "s/(Can\'t convert ).*/\\1(value withheld)/" '
        f"-e 's/([\"{quote}]?[[:alnum:]_.-]*({words})[[:alnum:]_.-]*[\"{quote}]?[[:space:]]*[=:][[:space:]]*).+/\\1{MASK}/I' "
        f"-e 's|([[:alpha:]][[:alnum:]+.-]*://)[^[:space:]/?#\"{quote}<>]*@|\\1{MASK}@|g' "
        f"-e 's#\\b(Bearer|Basic)[[:space:]]+[[:alnum:]._~+/=-]{{8,}}#\\1 {MASK}#Ig'"
    )


def daemon_output(text: str) -> str:
    """
    Output of ``containerd config dump`` / ``dockerd --validate`` fit to show: the values a
    rejection quotes are withheld, and so are any ``credential-key = value`` it echoes and
    ``mask_text``'s.
    """
    lines = []
    for line in text.splitlines():
        line = _GO_TOML_CONVERT.sub(r"\1(value withheld)", line)
        lines.append(mask_text(_SECRET_ASSIGNMENT.sub(r"\1" + MASK, line)))
    return "\n".join(lines)


# JSON -------------------------------------------------------------------------------------

_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|\s+|[^\s{}\[\]:,"]+|.', re.S)


def mask_json(text: str) -> str:
    """
    ``text`` (JSON) with every credential value replaced by ``"***"`` (and ``mask_text``'s),
    rewritten token by token so that whitespace, order and formatting stay exactly as they were.
    """
    out: list[str] = []
    # frames: [kind, secret, current key, expecting a key]
    stack: list[list[Any]] = []

    def value_is_secret() -> bool:
        if not stack:
            return False
        kind, secret, key, _ = stack[-1]
        return secret or (kind == "object" and key is not None and is_secret_key(key))

    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        top = stack[-1] if stack else None
        if token in ("{", "["):
            stack.append(["object" if token == "{" else "array", value_is_secret(), None, token == "{"])
        elif token in ("}", "]"):
            if stack:
                stack.pop()
        elif token == ":":
            if top and top[0] == "object":
                top[3] = False
        elif token == ",":
            if top and top[0] == "object":
                top[2], top[3] = None, True
        elif token.isspace():
            pass
        elif top and top[0] == "object" and top[3] and token.startswith('"'):
            try:
                top[2] = json.loads(token)
            except ValueError:
                top[2] = token.strip('"')
        elif value_is_secret():
            token = json.dumps(MASK)
        out.append(token)
    return mask_text("".join(out))


MASKERS: dict[str, Callable[[str], str]] = {"toml": mask_toml, "json": mask_json, "text": mask_text}


def masked_diff_lines(current: str | None, desired: str, kind: str) -> list[str]:
    """pyinfra's own coloured unified diff of two config texts, credential values masked."""
    from pyinfra.operations.util.files import generate_color_diff

    mask = MASKERS[kind]
    current_lines = mask(current).splitlines(keepends=True) if current else []
    desired_lines = mask(desired).splitlines(keepends=True)
    return list(generate_color_diff(current_lines, desired_lines))


def log_masked_diff(host: Host, path: str, current: str | None, desired: str, kind: str) -> None:
    """With pyinfra's ``--diff``: log the change to ``path`` as files.put does, credentials masked."""
    if not host.state.config.DIFF:
        return
    from pyinfra import logger
    from pyinfra.api.output import format_text

    verb = "create" if current is None else "modify"
    if "\0" in desired:  # not text: what changes, without its bytes
        host.log(
            f"Will {verb} {format_text(path, bold=True)} ({len(desired.encode('utf-8', 'surrogateescape'))} "
            "bytes, not text)",
            logger.info,
        )
        return
    try:
        lines = masked_diff_lines(current, desired, kind)
    except Exception:  # noqa: BLE001 - a text the masker cannot read: show nothing rather than a secret
        host.log(
            f"Will {verb} {format_text(path, bold=True)} (diff withheld: its credentials could not be masked)",
            logger.info,
        )
        return
    host.log(f"Will {verb} {format_text(path, bold=True)}", logger.info)
    for line in lines:
        logger.info("  %s", line)
    logger.info("")


def log_file_note(host: Host, path: str, what: str) -> None:
    """With pyinfra's ``--diff``: one line for a file a run writes whose text it cannot show before
    the run (a key fetched while it runs, a marker)."""
    if not host.state.config.DIFF:
        return
    from pyinfra import logger
    from pyinfra.api.output import format_text

    host.log(f"Will write {format_text(path, bold=True)}: {mask_text(what)}", logger.info)
