"""
Wire the NVIDIA runtime into containerd's config.toml: a pure merge (text in, text out) and
the operation that applies it through the safe install.

The merge edits the parsed document in place with tomlkit, so every other key, every
comment and the order stay as they were; only the keys below are set:

- ``runtimes.nvidia``: runc v2 shim with ``BinaryName`` = nvidia-container-runtime;
- ``SystemdCgroup`` on ``runtimes.runc`` and ``runtimes.nvidia``;
- ``default_runtime_name``: ``nvidia`` when it should be the default, else a previous
  ``nvidia`` goes back to ``runc``;
- ``disabled_plugins`` loses ``cri`` (Kubernetes needs CRI);
- ``enable_cdi`` when asked, for containerd 1.x (2.x has CDI on).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from io import BytesIO
from typing import Sequence

import tomlkit
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.command import FileUploadCommand, PyinfraCommand
from tomlkit.exceptions import ParseError, TOMLKitError
from tomlkit.items import Comment, InlineTable, Table, Whitespace

from deploy import probes, redact, templates, toml_roundtrip
from deploy.toml_roundtrip import tomllib
from deploy.facts.combined import FactCall, known_fact, read
from deploy.facts.containerd import ContainerdConfig, ContainerdImports
from deploy.operations import safe_install
from deploy.operations.failure import failing_command
from deploy.settings import RuntimeWiring

RUNC_V2 = "io.containerd.runc.v2"

# config version -> the plugin that holds the CRI runtimes
CRI_RUNTIME_PLUGIN = {
    1: "cri",
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
# Names under which `disabled_plugins` can switch CRI off (v1 short name, 1.x and 2.x IDs).
CRI_PLUGIN_IDS = (
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
    "io.containerd.cri.v1.images",
)


# What tomlkit raises on legal TOML it cannot read or re-render (bugs of its own, not of the file).
TOMLKIT_FAULTS = (TOMLKitError, AttributeError, KeyError, TypeError, ValueError, IndexError)


class ConfigError(ValueError):
    """A config the merge cannot work on; the message names the file and the problem."""


@dataclass
class Merged:
    text: str
    version: int
    notes: list[str] = field(default_factory=list)


def parse_config(text: str, source: str) -> tomlkit.TOMLDocument:
    try:
        return toml_roundtrip.parse(text)
    except ParseError as error:
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            # tomlkit's message ends with "at line L col C"; the character it quotes may be a password's.
            raise ConfigError(f"{source} is not valid TOML: {redact.toml_error(error)}") from None
        raise ConfigError(f"{source}: its layout cannot be edited safely (tomlkit cannot read it: "
                          f"{redact.toml_error(error)})") from None
    except TOMLKIT_FAULTS as error:
        # Legal TOML that tomlkit cannot keep (a table's keys after its sub-tables, say): refused.
        raise ConfigError(f"{source}: its layout cannot be edited safely "
                          f"(tomlkit cannot read it: {type(error).__name__})") from None


def config_version(document, source: str) -> int:
    """containerd reads a file without ``version`` as version 1."""
    version = document.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_RUNTIME_PLUGIN:
        raise ConfigError(
            f"{source}: unsupported config version {version!r} (containerd knows 1, 2, 3 and 4)"
        )
    return int(version)


def _indent(item) -> str:
    return item.trivia.indent.lstrip("\n")


TablePath = tuple[str, ...]
TABLES = (Table, InlineTable)


def _fragments(container, path: TablePath, prefix: TablePath = ()) -> list:
    """
    Every table of the document whose full path is ``path``, in text order.

    tomlkit hands back a merged, read-only proxy for a table split across the file (k3s puts
    ``[...containerd]`` and ``[...containerd.runtimes.runc]`` apart, EKS writes a child before
    its parent), so edits go to the concrete pieces its body holds instead.
    """
    found = []
    for key, item in container.body:
        if key is None or not isinstance(item, TABLES):
            continue
        full = prefix + (key.key,)
        if full == path:
            found.append(item)
        elif path[: len(full)] == full:
            found += _fragments(item.value, path, full)
    return found


def _written_as_dotted_keys(fragment) -> bool:
    """
    An inline table, or a header-less table holding values (``containerd.snapshotter = ...``):
    a child of it must be a dotted key or inline table, a [header] would name the wrong table.
    """
    if isinstance(fragment, InlineTable):
        return True
    if not isinstance(fragment, Table) or not fragment.is_super_table():
        return False
    return any(not isinstance(item, (Table, Whitespace, Comment)) or _written_as_dotted_keys(item)
               for key, item in fragment.value.body if key is not None)


def dotted(path: TablePath) -> str:
    """A table path as TOML writes it: plugins."io.containerd.grpc.v1.cri".containerd"""
    return ".".join(name if name.replace("_", "").replace("-", "").isalnum() else f'"{name}"' for name in path)


def _rank(fragment) -> int:
    """Where a new key goes first: a [header] table, an inline table, a dotted-key table."""
    if isinstance(fragment, InlineTable):
        return 1
    return 2 if fragment.is_super_table() else 0


def _holder(document, path: TablePath, key: str | None = None):
    """The piece of table ``path`` that defines ``key``, else the one a new key belongs in; None: no such table."""
    fragments = _fragments(document, path)
    for fragment in fragments:
        if key is not None and key in fragment.value:
            return fragment
    return min(fragments, key=_rank) if fragments else None


def _table(document, path: TablePath, header: bool = True):
    """
    Table ``path``, created under its deepest existing ancestor when missing: header-less
    parents, and a [header] for the table itself unless ``header`` is false.
    """
    existing = _holder(document, path)
    if existing is not None:
        return existing
    depth = len(path) - 1
    parent = document
    while depth > 0:
        ancestors = _fragments(document, path[:depth])
        if ancestors:
            # The last [header] piece, else the last piece: new tables land after the ones there,
            # and never re-declare a table through an implicit piece of it.
            headers = [piece for piece in ancestors if _rank(piece) == 0]
            parent = (headers or ancestors)[-1]
            break
        depth -= 1
    inline = depth > 0 and _written_as_dotted_keys(parent)
    for index in range(depth, len(path)):
        name = path[index]
        if name in (parent if parent is document else parent.value):
            raise ConfigError(f"{dotted(path[:index + 1])} is not a table")
        last = index == len(path) - 1
        parent[name] = (tomlkit.inline_table() if inline
                        else tomlkit.table(is_super_table=not (last and header)))
        parent = _holder(document, path[: index + 1])
    return parent


class _Edits:
    """
    The values the merge sets, applied to the document and recorded to check the result by.

    ``append_new``: new tables are not placed in the document's tree but appended at its end as
    fully named [headers]; the way out for layouts where tomlkit renders a placed table wrongly.
    """

    def __init__(self, document, append_new: bool = False):
        self.document = document
        self.append_new = append_new
        self.appended: dict[TablePath, dict] = {}
        self.assigned: list[tuple[TablePath, object]] = []

    def table(self, path: TablePath, header: bool = True):
        """Table ``path`` to add keys to: the document's own, else a new one (see ``_table``)."""
        existing = _holder(self.document, path)
        if existing is not None:
            return existing
        if self.append_new:
            return self.appended.setdefault(path, {})
        return _table(self.document, path, header)

    def set(self, path: TablePath, key: str, value, holder=None) -> None:
        """Set only a value that differs, so an equal value keeps its formatting and comment."""
        table = holder if holder is not None else (_holder(self.document, path, key) or self.table(path))
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
        siblings = [item for name, item in table.value.body
                    if name is not None and not isinstance(item, (Table, Whitespace))]
        table[key] = value
        if current is None and isinstance(table, Table):
            if siblings:
                # A new key lines up with the keys already there.
                table.value.item(key).trivia.indent = _indent(siblings[0])
            elif not table.is_super_table() and _indent(table):
                # The first key of an indented [header]: one step in, as its sub-tables are.
                table.value.item(key).trivia.indent = _indent(table) + "  "

    def appended_text(self) -> str:
        blocks = []
        for path, values in self.appended.items():
            lines = [f"[{dotted(path)}]"] + [f"{tomlkit.key(key).as_string()} = {tomlkit.item(value).as_string()}"
                                            for key, value in values.items()]
            blocks.append("\n".join(lines) + "\n")
        return "\n".join(blocks)


def _check_result(before: str, after: str, assigned, removed_plugins, source: str) -> None:
    """
    The merged text must mean the old one plus exactly the assigned values: a layout tomlkit
    renders wrongly is refused rather than installed.
    """
    expected = tomllib.loads(before)
    for path, value in assigned:
        table = expected
        for name in path[:-1]:
            table = table.setdefault(name, {})
        table[path[-1]] = value
    if removed_plugins:
        expected["disabled_plugins"] = [p for p in expected["disabled_plugins"] if p not in removed_plugins]
    try:
        actual = tomllib.loads(after)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: its layout cannot be edited safely (the edit would not parse: {error})") from None
    if actual != expected:
        raise ConfigError(f"{source}: its layout cannot be edited safely: {_first_difference(expected, actual)}")


def _first_difference(expected, actual, path: TablePath = ()) -> str:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in list(expected) + [k for k in actual if k not in expected]:
            if expected.get(key) != actual.get(key):
                return _first_difference(expected.get(key), actual.get(key), path + (key,))
    return f"{dotted(path) or 'the document'} would change unasked"


def _style(runtimes) -> tuple[str, str, str]:
    """Header indent, key indent and nesting step of the runtime tables already there."""
    for name, runtime in runtimes.items():
        if not isinstance(runtime, Table) or runtime.is_super_table():
            continue
        header = _indent(runtime)
        keys = [item for key, item in runtime.value.body
                if key is not None and not isinstance(item, (Table, Whitespace))]
        key_indent = _indent(keys[0]) if keys else header
        options = runtime.get("options")
        step = "  " if header or key_indent else ""
        if isinstance(options, Table) and not options.is_super_table():
            nested = _indent(options)
            step = nested[len(header):] if nested.startswith(header) else step
        return header, key_indent, step
    return "", "", ""


def _ends_with_blank_line(table) -> bool:
    body = table.value.body if isinstance(table, Table) else []
    if not body:
        return False
    last = body[-1][1]
    if isinstance(last, Table):
        return _ends_with_blank_line(last)
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


def _format_new(table: Table, previous_blank: bool | None, header: str, key_indent: str, step: str) -> None:
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


def _new_runtime(binary: str | None, systemd_cgroup: bool, inline: bool = False):
    runtime = tomlkit.inline_table() if inline else tomlkit.table()
    runtime["runtime_type"] = RUNC_V2
    options = tomlkit.inline_table() if inline else tomlkit.table()
    if binary:
        options["BinaryName"] = binary
    options["SystemdCgroup"] = systemd_cgroup
    runtime["options"] = options
    return runtime


def _wire_runtime(edits: _Edits, runtimes_path: TablePath, name: str, binary: str | None,
                  systemd_cgroup: bool, first_blank: bool | None) -> None:
    document = edits.document
    path = runtimes_path + (name,)
    runtime = _holder(document, path)
    if runtime is None and edits.append_new:
        edits.set(path, "runtime_type", RUNC_V2)
        if binary:
            edits.set(path + ("options",), "BinaryName", binary)
        edits.set(path + ("options",), "SystemdCgroup", systemd_cgroup)
        return
    if runtime is None:
        runtimes = _table(document, runtimes_path, header=False)
        style = _style(runtimes)
        # Whether the file ends its tables with a blank line: read before inserting.
        blank = _ends_with_blank_line(list(runtimes.values())[-1]) if len(runtimes) else first_blank
        runtimes[name] = _new_runtime(binary, systemd_cgroup,
                                      inline=_written_as_dotted_keys(runtimes))
        _format_new(_holder(document, path), blank, *style)
        edits.assigned.append((path, tomllib.loads(tomlkit.dumps({"r": _new_runtime(binary, systemd_cgroup)}))["r"]))
        return
    if name == "nvidia":
        edits.set(path, "runtime_type", RUNC_V2)
    options_path = path + ("options",)
    if (_holder(document, options_path) is None and isinstance(runtime, Table)
            and not _written_as_dotted_keys(runtime) and not edits.append_new):
        # A runtime table with no options: add them in the runtime's own style.
        runtimes = _holder(document, runtimes_path)
        header, key_indent, step = _style(runtimes)
        blank = _ends_with_blank_line(runtime)
        runtime["options"] = _new_runtime(binary, systemd_cgroup)["options"]
        key_offset = key_indent[len(header):] if key_indent.startswith(header) else ""
        options_header = _indent(runtime) + step
        _format_new(runtime["options"], blank, options_header, options_header + key_offset, step)
        edits.assigned.append((options_path, _new_runtime(binary, systemd_cgroup).unwrap()["options"]))
        return
    if binary:
        edits.set(options_path, "BinaryName", binary)
    edits.set(options_path, "SystemdCgroup", systemd_cgroup)


def _drop_disabled_cri(document, notes: list[str]) -> list[str]:
    disabled = document.get("disabled_plugins")
    if disabled is None:
        return []
    if not isinstance(disabled, list):
        raise ConfigError("disabled_plugins is not a list")
    removed = [name for name in disabled if name in CRI_PLUGIN_IDS]
    if not removed:
        return []
    if "#" in disabled.as_string():
        # tomlkit drops a comment with the element it sits on: the site's note would be lost.
        raise ConfigError("disabled_plugins switches CRI off and carries comments: take "
                          f"{', '.join(removed)} out of it by hand (Kubernetes needs containerd's CRI plugin)")
    for name in removed:
        index = [str(item) for item in disabled].index(name)
        del disabled[index]
    shown = ", ".join(f'"{name}"' for name in removed)
    notes.append(f"removed {shown} from disabled_plugins: Kubernetes needs containerd's CRI plugin")
    return removed


def _line_endings(text: str) -> tuple[str, str, bool]:
    """LF text for tomlkit, the line ending to give back, and whether the text ended with one."""
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    body = text.replace("\r\n", "\n") if crlf else text
    ends = body.endswith("\n") or not body
    return (body if ends else body + "\n"), ("\r\n" if crlf else "\n"), ends


def _edit(text: str, source: str, apply) -> Merged:
    """Parse ``text``, let ``apply(document, edits, version, notes)`` edit it, check and render the result."""
    body, newline, ended = _line_endings(text)
    try:
        merged, version, notes = _edit_once(body, source, apply, append_new=False)
    except _LayoutRefused as placed:
        # tomlkit rendered a table placed in the tree wrongly: append new tables at the end instead.
        try:
            merged, version, notes = _edit_once(body, source, apply, append_new=True)
        except _LayoutRefused:
            raise ConfigError(str(placed)) from None
    if not ended and merged.endswith("\n"):
        merged = merged[:-1]
    return Merged(text=merged.replace("\n", newline) if newline != "\n" else merged, version=version, notes=notes)


class _LayoutRefused(ConfigError):
    """The edited text does not mean the old one plus the wiring, or tomlkit cannot read it back."""


def _edit_once(body: str, source: str, apply, append_new: bool) -> tuple[str, int, list[str]]:
    document = parse_config(body, source)
    version = config_version(document, source)
    notes: list[str] = []
    edits = _Edits(document, append_new=append_new)
    try:
        removed = _drop_disabled_cri(document, notes)
        apply(document, edits, version, notes)
        merged = tomlkit.dumps(document)
    except _LayoutRefused:
        raise
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    except TOMLKIT_FAULTS as error:
        raise _LayoutRefused(f"{source}: its layout cannot be edited safely "
                             f"(tomlkit cannot edit it: {type(error).__name__})") from None
    if edits.appended:
        merged = (merged if merged.endswith("\n") else merged + "\n") + "\n" + edits.appended_text()
    if merged != body:
        try:
            _check_result(body, merged, edits.assigned, removed, source)
        except ConfigError as error:
            raise _LayoutRefused(str(error)) from None
        try:
            toml_roundtrip.parse(merged)
        except Exception:  # noqa: BLE001 - any tomlkit fault: the next run could not read it back
            raise _LayoutRefused(f"{source}: its layout cannot be edited safely (tomlkit could not read "
                                 "the edited file back, so a second run could not check it)") from None
    return merged, version, notes


def merge_containerd_config(text: str, wiring: RuntimeWiring, source: str = "config.toml",
                            plugin: str | None = None) -> Merged:
    """
    The config ``text`` with the NVIDIA runtime wired in; raises ConfigError naming ``source``.

    ``plugin``: the CRI plugin section to wire (default: the one of the file's version).
    """

    def wire(document, edits: _Edits, version: int, notes: list[str]) -> None:
        cri = ("plugins", plugin or CRI_RUNTIME_PLUGIN[version])
        containerd = cri + ("containerd",)
        # Under a containerd table the file already had, a first new runtime needs its blank line.
        first_blank = False if any(isinstance(t, Table) and not t.is_super_table()
                                   for t in _fragments(document, containerd)) else None
        runtimes = containerd + ("runtimes",)
        _wire_runtime(edits, runtimes, "runc", None, wiring.systemd_cgroup, first_blank)
        _wire_runtime(edits, runtimes, "nvidia", wiring.binary, wiring.systemd_cgroup, first_blank)
        holder = _holder(document, containerd, "default_runtime_name")
        current_default = holder.get("default_runtime_name") if holder is not None else None
        if wiring.make_default:
            edits.set(containerd, "default_runtime_name", "nvidia")
        elif current_default == "nvidia":
            edits.set(containerd, "default_runtime_name", "runc")
            notes.append("default_runtime_name was nvidia: set back to runc (nvidia_runtime_default=false)")
        if wiring.enable_cdi:
            if cri[1] == CRI_PLUGIN_2X:
                notes.append("containerd 2.x has CDI on: enable_cdi left as it is")
            else:
                edits.set(cri, "enable_cdi", True)

    return _edit(text, source, wire)


def allow_cri(text: str, source: str) -> Merged:
    """``text`` with CRI taken out of ``disabled_plugins`` (an imported file that does not hold the wiring)."""
    return _edit(text, source, lambda *_: None)


# containerd 2.x's CRI runtime section (its config version 3).
CRI_PLUGIN_2X = CRI_RUNTIME_PLUGIN[3]


def dump_cri_plugin(config: dict) -> str:
    """The plugin that holds the CRI runtimes in a parsed ``containerd config dump``: containerd
    dumps version 2 (1.x) or 3 (2.x)."""
    return CRI_RUNTIME_PLUGIN.get(config.get("version", 2), CRI_PLUGIN_2X)


def effective_problems(dump: str, wiring: RuntimeWiring) -> tuple[str, list[str]]:
    """
    What ``containerd config dump`` says containerd would run, against the wiring:
    (the runtime's table as TOML names it, the differences; none when it is wired).
    """
    try:
        config = tomllib.loads(dump)
    except tomllib.TOMLDecodeError as error:
        return "containerd config dump", [f"its output is not TOML: {error}"]
    plugin = dump_cri_plugin(config)
    containerd = config.get("plugins", {}).get(plugin, {}).get("containerd", {})
    where = dotted(("plugins", plugin, "containerd"))
    problems = []
    disabled = [name for name in config.get("disabled_plugins", []) if name in CRI_PLUGIN_IDS]
    if disabled:
        problems.append(f"disabled_plugins holds {', '.join(disabled)}")
    runtimes = containerd.get("runtimes", {}) or {}
    nvidia = runtimes.get("nvidia")
    if not nvidia:
        problems.append("runtimes.nvidia is missing")
    else:
        options = nvidia.get("options") or {}
        if nvidia.get("runtime_type") != RUNC_V2:
            problems.append(f"runtimes.nvidia.runtime_type is {nvidia.get('runtime_type')!r}, not {RUNC_V2!r}")
        if options.get("BinaryName") != wiring.binary:
            problems.append(f"runtimes.nvidia.options.BinaryName is {options.get('BinaryName')!r}, "
                            f"not {wiring.binary!r}")
    for name in ("runc", "nvidia"):
        if name in runtimes or name == "runc":
            value = bool(((runtimes.get(name) or {}).get("options") or {}).get("SystemdCgroup", False))
            if value != wiring.systemd_cgroup:
                problems.append(f"runtimes.{name}.options.SystemdCgroup is {str(value).lower()}, "
                                f"not {str(wiring.systemd_cgroup).lower()} (systemd_cgroup)")
    default = containerd.get("default_runtime_name")
    if wiring.make_default and default != "nvidia":
        problems.append(f"default_runtime_name is {default!r}, not 'nvidia' (nvidia_runtime_default is true)")
    if not wiring.make_default and default == "nvidia":
        problems.append("default_runtime_name is 'nvidia' but nvidia_runtime_default is false")
    return where, problems


def cri_plugin_for(data: dict, version: int, major: int | None) -> str:
    """The CRI section a file of ``version`` must hold for the installed containerd to run it."""
    plugins = data.get("plugins") if isinstance(data.get("plugins"), dict) else {}
    # containerd 2.x reads a version 2 file's 2.x-named section over the migrated 1.x one, key by key.
    if (major or 0) >= 2 and version == 2 and CRI_PLUGIN_2X in plugins:
        return CRI_PLUGIN_2X
    return CRI_RUNTIME_PLUGIN[version]


def check_version_fits(version: int, major: int | None, containerd_version: str | None, source: str) -> None:
    """A config version the installed containerd would not run the wiring from: refused, saying what to do."""
    if major is None:
        return
    if major >= 2 and version < 2:
        raise ConfigError(
            f"{source} is a version 1 config (no `version`, or `version = 1`): containerd {containerd_version} "
            "ignores its CRI settings (plugins.cri), so the nvidia wiring would never run. Convert it to "
            "`version = 3` (`containerd config default` shows the layout; `containerd config migrate` does not "
            "carry version 1 CRI settings over), or move it aside so gpu-node starts from `containerd config "
            "default`, then run again"
        )
    if major < 2 and version >= 3:
        raise ConfigError(
            f"{source} is a version {version} config, which containerd {containerd_version} cannot read "
            "(version 3 needs containerd 2.0 or later): use a version 2 config, or upgrade containerd"
        )


@dataclass
class ConfigFile:
    path: str
    text: str
    source: str  # how messages name it


@dataclass
class PlannedFile:
    path: str
    current: str | None
    merged: Merged


def plan_wiring(files: list[ConfigFile], wiring: RuntimeWiring, major: int | None,
                containerd_version: str | None = None) -> tuple[list[PlannedFile], str]:
    """
    Where the wiring takes effect, given the main config and the files it imports (in the
    order containerd loads them), and each file's merged text; plus the path that holds it.

    containerd before 2.1 replaces a plugin's section from an imported file as a whole, 2.1
    merges it key by key: either way the last file holding the CRI section decides every key
    the wiring sets once they are all in it. The others only lose a CRI in disabled_plugins.
    """
    sections = []
    for index, config in enumerate(files):
        document = parse_config(_line_endings(config.text)[0], config.source)
        version = config_version(document, config.source)
        if index == 0 or document.get("version") is not None:
            check_version_fits(version, major, containerd_version, config.source)
        data = document.unwrap()
        plugin = cri_plugin_for(data, version, major)
        sections.append((plugin, plugin in (data.get("plugins") or {})))
    target = max((index for index, (_, present) in enumerate(sections) if present), default=0)
    planned = []
    for index, config in enumerate(files):
        if index == target:
            merged = merge_containerd_config(config.text, wiring, source=config.source, plugin=sections[index][0])
        else:
            merged = allow_cri(config.text, config.source)
        planned.append(PlannedFile(config.path, config.text, merged))
    return planned, files[target].path


def default_config_text(containerd_major: int | None) -> str:
    """The fallback for a missing file when ``containerd config default`` is unavailable."""
    version = 3 if (containerd_major or 1) >= 2 else 2
    return templates.render("containerd-config.toml.j2", version=version, cri_plugin=CRI_RUNTIME_PLUGIN[version])


@dataclass
class NodeWiringPlan:
    """What the runtimes stage would do on a node: the facts, each file's merged text, the verdict."""

    state: dict
    source: str
    planned: list[PlannedFile] = field(default_factory=list)
    changed: list[PlannedFile] = field(default_factory=list)
    holder: str = ""
    refusal: str = ""     # the files cannot be wired: why, in one line
    overridden: str = ""  # the files say wired, containerd's own dump does not: why

    def in_place(self) -> bool:
        return not (self.refusal or self.changed or self.overridden)


def config_read(path: str, base_path: str | None, binary: str) -> FactCall:
    """What the wiring reads of containerd's config (a stage reads it ahead with the same call)."""
    return (ContainerdConfig, {"path": path, "base_path": base_path, "binary": binary})


def plan_node_wiring(path: str, wiring: RuntimeWiring, containerd_binary: str = "containerd",
                     base_path: str | None = None, initial_text: str | None = None,
                     validate_with_binary: bool = True, hint: str = "") -> NodeWiringPlan:
    """Read the node (facts, read ahead where preflight did) and plan the wiring; nothing runs."""
    state = read(host, config_read(path, base_path, containerd_binary))
    current = state["config"]
    if current is not None:
        base, source = current, path
    elif state["base_config"] is not None:
        base, source = state["base_config"], base_path
    elif initial_text is not None:
        base, source = initial_text, "an empty drop-in"
    elif state["default_config"] is not None:
        base, source = state["default_config"], f"`{containerd_binary} config default`"
    else:
        base, source = default_config_text(state["major"]), "templates/containerd-config.toml.j2"
    plan = NodeWiringPlan(state, source)
    try:
        files = [ConfigFile(path, base, source)] + _imported_files(path, current, source)
        plan.planned, plan.holder = plan_wiring(files, wiring, state["major"] if validate_with_binary else None,
                                                state["version"])
    except ConfigError as error:
        plan.refusal = f"{error}; it was left as it is" + (f".{hint}" if hint and current is not None else "")
        return plan
    plan.planned[0].current = current
    plan.changed = [file for file in plan.planned if file.current is None or file.merged.text != file.current]
    if not plan.changed and validate_with_binary and state["dump"] is not None:
        # The files say wired: containerd's own reading of them must say so too.
        where, problems = effective_problems(state["dump"], wiring)
        if problems:
            plan.overridden = (
                f"{plan.holder} holds the nvidia wiring, but `containerd config dump` of {path} shows {where} "
                f"with {'; '.join(problems)}: another file containerd reads overrides it; nothing was changed")
    return plan


@operation()
def configure_nvidia_runtime(
    path: str,
    wiring: RuntimeWiring,
    service: str | None = "containerd",
    containerd_binary: str = "containerd",
    base_path: str | None = None,
    initial_text: str | None = None,
    validate_with_binary: bool = True,
    restart_timeout: int = 30,
    hint: str = "",
    restart_pending: bool = False,
    before_restart: Sequence[PyinfraCommand] = (),
):
    """
    Merge the NVIDIA runtime into containerd's config at ``path`` and install it safely.

    + path: the config file (or a k3s/rke2/microk8s template, a k0s drop-in)
    + wiring: what to set (``RuntimeWiring``)
    + service: the systemd unit to restart on change (None: the flavour reloads by itself)
    + containerd_binary: checks the candidate with ``BINARY --config CANDIDATE config dump``
    + base_path: where to start from when ``path`` is missing (e.g. k3s's generated config)
    + initial_text: else start from this text (e.g. an empty k0s drop-in)
    + validate_with_binary: false for templates containerd cannot read as they are
    + restart_timeout: seconds the restarted service has to become active before rollback
    + hint: added to a parse error (what to do about a file of this flavour)
    + restart_pending: an interrupted run installed this config without restarting ``service``
    + before_restart: commands run after the candidate's check, before the swap and restart (a drain)
    """
    plan = plan_node_wiring(path, wiring, containerd_binary, base_path, initial_text, validate_with_binary, hint)
    if plan.refusal:
        yield failing_command(plan.refusal)
        return
    state, source, planned, changed, holder = plan.state, plan.source, plan.planned, plan.changed, plan.holder
    if not changed:
        if plan.overridden:
            yield failing_command(plan.overridden)
            return
        yield from safe_install.file_in_place(path, service, restart_pending, restart_timeout, before_restart,
                                              f"{holder} already wires the nvidia runtime")
        return

    for file in changed:
        for note in file.merged.notes:
            host.log_styled(f"{file.path}: {note}", fg="yellow")
        if file.current is None:
            host.log_styled(f"{file.path} is missing: creating it from {source}", fg="yellow")
        redact.log_masked_diff(host, file.path, file.current, file.merged.text, "toml")

    # Without the binary (a microk8s template) the merge's own read-back is the check.
    if validate_with_binary:
        yield from _check_candidates(state["binary_path"] or containerd_binary, planned, changed, wiring, holder)
    for file in changed:
        last = file is changed[-1]
        # One restart, after the last file: containerd reads them together.
        yield from safe_install.install_file._inner(
            path=file.path,
            content=file.merged.text,
            service=service if last else None,
            restart_timeout=restart_timeout,
            before_restart=before_restart if last else (),
        )


def _imported_files(path: str, current: str | None, source: str) -> list[ConfigFile]:
    """The files ``path`` imports, as the node has them (only a config already on the node imports)."""
    if current is None:
        return []
    patterns = parse_config(_line_endings(current)[0], source).get("imports") or []
    if not isinstance(patterns, list) or not all(isinstance(pattern, str) for pattern in patterns):
        raise ConfigError(f"{source}: imports is not a list of paths")
    if not patterns:
        return []
    found = known_fact(host, ContainerdImports, directory=posixpath.dirname(path) or "/", patterns=list(patterns))
    return [ConfigFile(file["path"], file["text"], file["path"]) for file in found if file["path"] != path]


CHECK_SUFFIX = ".gpu-node-check"


def _check_candidates(binary: str, planned: list[PlannedFile], changed: list[PlannedFile],
                      wiring: RuntimeWiring, holder: str):
    """
    Ask the node's containerd what it would run with the new files, before any is installed:
    copies beside the live files (relative imports resolve the same), the main one importing
    the new versions of changed imported files in containerd's own order.
    """
    main = planned[0]
    main_text = main.merged.text
    if any(file is not main for file in changed):
        imports = [file.path + CHECK_SUFFIX if file in changed else file.path for file in planned[1:]]
        document = tomlkit.parse(_line_endings(main_text)[0])
        document["imports"] = imports
        main_text = tomlkit.dumps(document)
    copies = {main.path + CHECK_SUFFIX: main_text}
    copies.update({file.path + CHECK_SUFFIX: file.merged.text for file in changed if file is not main})
    for directory in dict.fromkeys(posixpath.dirname(copy) or "/" for copy in copies):
        yield StringCommand("mkdir -p", QuoteString(directory))  # a missing config's folder, as the install does
    for copy, text in copies.items():
        yield FileUploadCommand(BytesIO(text.encode()), copy)
    yield FunctionCommand(_run_candidate_check, (binary, main.path + CHECK_SUFFIX, list(copies), wiring,
                                                 ", ".join(file.path for file in changed), holder), {})


def _run_candidate_check(state, host, binary: str, config: str, copies: list[str], wiring: RuntimeWiring,
                         changed: str, holder: str) -> bool:
    command = StringCommand(QuoteString(binary), "--config", QuoteString(config), "config dump; status=$?; rm -f",
                            *[QuoteString(copy) for copy in copies], "; exit $status")
    # pyinfra hands a FunctionCommand no connector arguments: take the operation's (--sudo, _su_user...)
    succeeded, output = host.run_shell_command(command, **probes.connector_arguments(host))
    if not succeeded:
        problem = f"{binary} config dump rejected the new version: {redact.daemon_output(output.stderr)}"
    else:
        where, problems = effective_problems(output.stdout, wiring)
        if not problems:
            return True
        problem = (f"containerd would not run the nvidia wiring in {holder}: {where} would have "
                   + "; ".join(problems))
    host.log_styled(f"gpu-node: {changed} was not changed: {problem}", fg="red", log_func=logger.error)
    return False
