"""containerd facts: its version and config file, and which installation owns it (a plain
containerd, or the one a Kubernetes distribution brings: the paths and units of
deploy/runtimes/containerd/installations.py's table)."""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Iterable
from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text
from ..foundations.toml_layout import tomllib
from ..runtimes.containerd.installations import GENERATED_CONFIGS, INSTALLATION_PATHS, INSTALLATION_UNITS
from .base import NodeFact
from .read_ahead import FactCall

# Version strings seen in the field: Debian "1.6.20~ds1", Docker's containerd.io "1.7.21",
# sid "2.1.9+unknown", k3s "v1.7.23-k3s2".
VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?\S*$")


def parse_containerd_version(line: str) -> dict[str, Any]:
    """``containerd --version`` -> {"version": "1.6.20~ds1", "major": 1, "minor": 6} (None when unknown)."""
    for token in line.split()[1:]:
        match = VERSION_RE.match(token)
        if match:
            return {"version": token.lstrip("v"), "major": int(match[1]), "minor": int(match[2])}
    return {"version": None, "major": None, "minor": None}


def decode_file(encoded: str, what: str) -> str:
    """A file's text from ``node_text.base64_read``'s line: bytes that are not UTF-8 are kept, for
    the parser's guard to name (deploy/foundations/node_text.py)."""
    try:
        return node_text.decode(base64.b64decode(encoded.strip(), validate=True))
    except binascii.Error as error:
        raise FactProcessError(f"could not decode {what}: {error}") from None


def _if_file(path: str, then: StringCommand, otherwise: StringCommand | str) -> StringCommand:
    return StringCommand("if [ -f", QuoteString(path), "]; then", then, "; else", otherwise, "; fi")


class ContainerdConfig(NodeFact[dict[str, Any]]):
    """
    The containerd binary, its version and the config file, read in one command. When the file
    is missing: ``base_path``'s text if given and present, else ``containerd config default``.

    .. code:: python

        {
            "binary_path": "/usr/bin/containerd",  # None: not installed
            "version": "1.6.20~ds1", "major": 1, "minor": 6,
            "config": "version = 2\\n...",          # None: the file does not exist
            "base_config": None,
            "default_config": None,                 # only read when config is None
            "dump": "version = 2\\n...",           # `containerd --config PATH config dump`:
                                                    # what it would run (None: not read, or failed)
            "dump_exit_code": 0,                    # None: not read
            "dump_error": None,                     # what a failed dump printed
        }
    """

    def command(self, path: str, base_path: str | None = None, binary: str = "containerd") -> StringCommand:
        def file_b64(label: str, name: str) -> StringCommand:
            return StringCommand("echo", QuoteString(label), f"$({node_text.base64_read(shlex.quote(name))})")

        default = StringCommand(
            'if [ -n "$bin" ]; then echo default_config $("$bin" config default 2>/dev/null | base64 -w0); fi'
        )
        missing = _if_file(base_path, file_b64("base_config", base_path), default) if base_path else default
        return StringCommand(
            "bin=$(command -v",
            QuoteString(binary),
            "2>/dev/null || true);",
            'echo "binary_path $bin";',
            # beside the dump: each is a start of the Go binary, the slowest part of the node's read. Its
            # line goes through a file: written into the fact's output while the config's line (larger
            # than a pipe writes at once) is, it could land inside it.
            "_v=$(mktemp 2>/dev/null || true);",
            'if [ -n "$bin" ] && [ -n "$_v" ]; then { echo "version $("$bin" --version 2>/dev/null | head -n1)" >"$_v"; } &',
            'elif [ -n "$bin" ]; then echo "version $("$bin" --version 2>/dev/null | head -n1)"; fi;',
            _if_file(
                path,
                StringCommand(
                    file_b64("config", path),
                    ";",
                    'if [ -n "$bin" ]; then dump=$("$bin" --config',
                    QuoteString(path),
                    "config dump 2>&1);",
                    'echo "dump_exit_code $?"; echo dump $(printf %s "$dump" |',
                    f"head -c {node_text.MAX_FILE_BYTES + 1} | base64 -w0); fi",
                ),
                missing,
            ),
            '; wait; if [ -n "$_v" ]; then cat "$_v"; rm -f "$_v"; fi; true',
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "binary_path": None,
            "version": None,
            "major": None,
            "minor": None,
            "config": None,
            "base_config": None,
            "default_config": None,
            "dump": None,
            "dump_exit_code": None,
            "dump_error": None,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "binary_path":
                state["binary_path"] = rest.strip() or None
            elif kind == "version":
                state.update(parse_containerd_version(rest))
            elif kind == "dump_exit_code" and rest.strip().isdigit():
                state["dump_exit_code"] = int(rest)
            elif kind in ("config", "base_config", "default_config", "dump"):
                text = decode_file(rest, kind)
                # `containerd config default` or `dump` that failed prints nothing: unavailable.
                state[kind] = text if (text or kind in ("config", "base_config")) else None
        if state["dump_exit_code"]:
            # What it printed is the reason it failed, not a config.
            state["dump_error"], state["dump"] = (state["dump"] or "").strip(), None
        return state


def config_read(path: str, base_path: str | None, binary: str) -> FactCall:
    """What the wiring and verify read of containerd's config (preflight reads it ahead with the same call)."""
    return (ContainerdConfig, {"path": path, "base_path": base_path, "binary": binary})


class ContainerdImports(NodeFact[list[Any]]):
    """
    The files containerd imports: each pattern of ``imports`` globbed as containerd does
    (relative to the config's directory, matches in byte order), with their text.

    .. code:: python

        [{"path": "/etc/containerd/conf.d/99-nvidia.toml", "text": "version = 2\\n..."}]
    """

    def command(self, directory: str, patterns: Iterable[str]) -> StringCommand:
        # Unquoted $pattern: the shell globs it (a pattern that matches nothing stays as is); IFS empty
        # so a path with a space stays one. The path goes base64 like the text: it may hold anything.
        return StringCommand(
            "cd",
            QuoteString(directory),
            "2>/dev/null || exit 0; export LC_ALL=C; IFS=; for pattern in",
            *[QuoteString(pattern) for pattern in patterns],
            '; do for f in $pattern; do [ -f "$f" ] || continue;',
            "case $f in /*) p=$f ;; *) p=$PWD/$f ;; esac;",
            'echo "file $(printf %s "$p" | base64 -w0) $(' + node_text.base64_read('"$f"') + ')"; done; done; true',
        )

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        files = []
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "file":
                path, _, encoded = rest.partition(" ")
                path = decode_file(path, "an imported file's path")
                files.append({"path": path, "text": decode_file(encoded, path)})
        return files


UNIT_DIRS = ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")


class ContainerdInstallations(NodeFact[dict[str, Any]]):
    """
    Which paths of the Kubernetes distributions that bring their own containerd exist, which of
    their units are installed (and their state), and the ``version`` line of their generated
    config. ``classify_installation`` (deploy/runtimes/containerd/installations.py) turns it into plain / k3s / rke2 /
    k0s / microk8s.

    .. code:: python

        {
            "paths": ["/var/lib/rancher/k3s/agent/etc/containerd", ...],
            "units": {"k3s-agent": "active"},
            "generated_versions": {"/var/lib/rancher/k3s/agent/etc/containerd/config.toml": 3},
            "binary": "/usr/bin/containerd",   # containerd on PATH, None when there is none
        }
    """

    def command(self) -> StringCommand:
        parts: list[str | StringCommand] = [
            StringCommand(
                "for p in", *[QuoteString(p) for p in INSTALLATION_PATHS], '; do [ -e "$p" ] && echo "path $p"; done;'
            ),
            StringCommand(
                "for u in",
                *INSTALLATION_UNITS,
                "; do for d in",
                *UNIT_DIRS,
                '; do if [ -e "$d/$u.service" ]; then',
                'echo "unit $u $(systemctl is-active "$u" 2>/dev/null)"; break; fi; done; done;',
            ),
        ]
        for config in GENERATED_CONFIGS:
            parts.append(
                StringCommand(
                    "if [ -f",
                    QuoteString(config),
                    "]; then echo",
                    QuoteString(f"generated {config}"),
                    f"$({node_text.base64_read(shlex.quote(config))}); fi;",
                )
            )
        parts.append('echo "binary $(command -v containerd 2>/dev/null || true)"')
        return StringCommand(*parts)

    @staticmethod
    def default() -> dict[str, Any]:
        return {"paths": [], "units": {}, "generated_versions": {}, "binary": None}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "path":
                state["paths"].append(rest.strip())
            elif kind == "unit":
                name, _, active = rest.partition(" ")
                state["units"][name] = active.strip() or "unknown"
            elif kind == "binary":
                state["binary"] = rest.strip() or None
            elif kind == "generated":
                path, _, encoded = rest.partition(" ")
                version = generated_config_version(decode_file(encoded, path) if encoded.strip() else "")
                if version is not None:
                    state["generated_versions"][path] = version
        return state


def generated_config_version(text: str) -> int | None:
    """The top-level ``version`` of a config k3s/rke2 generated (1 when it has none), read by a TOML
    parser; None when the file does not parse (the template is then chosen by the default)."""
    try:
        version = node_text.parsed(tomllib.loads, text, "the generated config").get("version", 1)
    except (tomllib.TOMLDecodeError, node_text.UnreadableText):
        return None
    return version if isinstance(version, int) else None
