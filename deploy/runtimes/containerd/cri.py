"""
containerd's CRI plugin as its config files and its ``config dump`` name it: config versions and
the plugin holding the runtimes in each, whether a version fits the installed containerd, the
merge that wires the NVIDIA runtime in, and the check of what containerd would run (verify asks
it too). Pure: text in, text out.

The merge edits the parsed document in place (``layout``), so every other key, every comment
and the order stay as they were; only the keys below are set:

- ``runtimes.nvidia``: runc v2 shim with ``BinaryName`` = nvidia-container-runtime;
- ``SystemdCgroup`` on ``runtimes.runc`` and ``runtimes.nvidia``;
- ``default_runtime_name``: ``nvidia`` when it should be the default, else a previous
  ``nvidia`` goes back to ``runc``;
- ``disabled_plugins`` loses ``cri`` (Kubernetes needs CRI);
- ``enable_cdi`` (with ``cdi_spec_dirs`` holding where the spec goes) on or off as the wiring
  asks (deploy/runtimes/cdi.py decided it for the containerd's version), for containerd 1.x: 2.x has CDI on;
- ``runtimes.nvidia.container_annotations`` gains what the wiring names (the runtime's cdi mode
  reads ``cdi.k8s.io/`` annotations), the file's own entries kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError
from tomlkit.items import Array, InlineTable, Table

from ...foundations import node_text, redact, toml_layout
from ...foundations.toml_layout import TOMLKIT_FAULTS, ConfigError, Edits, TablePath, dotted, tomllib
from ...runtimes.wiring import RuntimeWiring
from ..cdi import SPEC_DIRS, SPEC_PATH
from ..engine import TOML, Effective, RuntimeEngine, Wired

RUNC_V2 = "io.containerd.runc.v2"

# config version -> the plugin that holds the CRI runtimes
CRI_RUNTIME_PLUGIN = {
    1: "cri",
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
# containerd 2.x's CRI runtime section (its config version 3).
CRI_PLUGIN_2X = CRI_RUNTIME_PLUGIN[3]
# Names under which `disabled_plugins` can switch CRI off (v1 short name, 1.x and 2.x IDs).
CRI_PLUGIN_IDS = (
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
    "io.containerd.cri.v1.images",
)


@dataclass
class Merged:
    text: str
    version: int
    notes: list[str] = field(default_factory=list)


def parse_config(text: str, source: str) -> tomlkit.TOMLDocument:
    try:
        return node_text.parsed(toml_layout.parse, text, source)
    except node_text.UnreadableText as error:
        raise ConfigError(str(error)) from None
    except ParseError as error:
        try:
            node_text.parsed(tomllib.loads, text, source)
        except node_text.UnreadableText as unreadable:
            raise ConfigError(str(unreadable)) from None
        except tomllib.TOMLDecodeError:
            # tomlkit's message ends with "at line L col C"; the character it quotes may be a password's.
            raise ConfigError(f"{source} is not valid TOML: {redact.toml_error(error)}") from None
        raise ConfigError(
            f"{source}: its layout cannot be edited safely (tomlkit cannot read it: {redact.toml_error(error)})"
        ) from None
    except TOMLKIT_FAULTS as error:
        # Legal TOML that tomlkit cannot keep (a table's keys after its sub-tables, say): refused.
        raise ConfigError(
            f"{source}: its layout cannot be edited safely (tomlkit cannot read it: {type(error).__name__})"
        ) from None


def config_values(text: str, source: str) -> dict[str, Any]:
    """A config's values, only read: by tomllib, several times faster than the layout-keeping parse
    an edit needs (the no-op reads every host's files). Where tomllib refuses the text, tomlkit's
    reading and its error, as every edit of the file gives them."""
    try:
        return node_text.parsed(tomllib.loads, text, source)
    except node_text.UnreadableText as error:
        raise ConfigError(str(error)) from None
    except tomllib.TOMLDecodeError:
        return parse_config(text, source).unwrap()


def config_version(document: Any, source: str) -> int:
    """containerd reads a file without ``version`` as version 1."""
    version = document.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_RUNTIME_PLUGIN:
        raise ConfigError(f"{source}: unsupported config version {version!r} (containerd knows 1, 2, 3 and 4)")
    return int(version)


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


def cri_plugin_for(data: dict[str, Any], version: int, major: int | None) -> str:
    """The CRI section a file of ``version`` must hold for the installed containerd to run it."""
    plugins = found if isinstance(found := data.get("plugins"), dict) else {}
    # containerd 2.x reads a version 2 file's 2.x-named section over the migrated 1.x one, key by key.
    if (major or 0) >= 2 and version == 2 and CRI_PLUGIN_2X in plugins:
        return CRI_PLUGIN_2X
    return CRI_RUNTIME_PLUGIN[version]


def dump_cri_plugin(config: dict[str, Any]) -> str:
    """The plugin that holds the CRI runtimes in a parsed ``containerd config dump``: containerd
    dumps version 2 (1.x) or 3 (2.x)."""
    return CRI_RUNTIME_PLUGIN.get(config.get("version", 2), CRI_PLUGIN_2X)


# The merge. -------------------------------------------------------------------------------


def _new_runtime(binary: str | None, systemd_cgroup: bool, inline: bool = False) -> Table | InlineTable:
    runtime = tomlkit.inline_table() if inline else tomlkit.table()
    runtime["runtime_type"] = RUNC_V2
    options = tomlkit.inline_table() if inline else tomlkit.table()
    if binary:
        options["BinaryName"] = binary
    options["SystemdCgroup"] = systemd_cgroup
    runtime["options"] = options
    return runtime


def _wire_runtime(
    edits: Edits,
    runtimes_path: TablePath,
    name: str,
    binary: str | None,
    systemd_cgroup: bool,
    first_blank: bool | None,
) -> None:
    document = edits.document
    path = runtimes_path + (name,)
    runtime = toml_layout.holder(document, path)
    if runtime is None and edits.append_new:
        edits.set(path, "runtime_type", RUNC_V2)
        if binary:
            edits.set(path + ("options",), "BinaryName", binary)
        edits.set(path + ("options",), "SystemdCgroup", systemd_cgroup)
        return
    if runtime is None:
        runtimes = toml_layout.ensure_table(document, runtimes_path, header=False)
        style = toml_layout.table_style(runtimes, "options")
        # Whether the file ends its tables with a blank line: read before inserting.
        blank = toml_layout.ends_with_blank_line(list(runtimes.values())[-1]) if len(runtimes) else first_blank
        runtimes[name] = _new_runtime(binary, systemd_cgroup, inline=toml_layout.written_as_dotted_keys(runtimes))
        toml_layout.format_new(toml_layout.holder(document, path), blank, *style)
        edits.assigned.append((path, tomllib.loads(tomlkit.dumps({"r": _new_runtime(binary, systemd_cgroup)}))["r"]))
        return
    if name == "nvidia":
        edits.set(path, "runtime_type", RUNC_V2)
    options_path = path + ("options",)
    if (
        toml_layout.holder(document, options_path) is None
        and isinstance(runtime, Table)
        and not toml_layout.written_as_dotted_keys(runtime)
        and not edits.append_new
    ):
        # A runtime table with no options: add them in the runtime's own style.
        runtimes = toml_layout.holder(document, runtimes_path)
        header, key_indent, step = toml_layout.table_style(runtimes, "options")
        blank = toml_layout.ends_with_blank_line(runtime)
        runtime["options"] = _new_runtime(binary, systemd_cgroup)["options"]
        key_offset = key_indent[len(header) :] if key_indent.startswith(header) else ""
        options_header = toml_layout.indent_of(runtime) + step
        toml_layout.format_new(runtime["options"], blank, options_header, options_header + key_offset, step)
        edits.assigned.append((options_path, _new_runtime(binary, systemd_cgroup).unwrap()["options"]))
        return
    if binary:
        edits.set(options_path, "BinaryName", binary)
    edits.set(options_path, "SystemdCgroup", systemd_cgroup)


def _add_container_annotations(edits: Edits, runtime_path: TablePath, wanted: tuple[str, ...]) -> None:
    if wanted:
        _append_missing(edits, runtime_path, "container_annotations", wanted)


def _append_missing(edits: Edits, path: TablePath, key: str, wanted: tuple[str, ...]) -> None:
    """``key``'s list of strings at ``path`` with ``wanted`` appended where missing (the file's entries, their
    order and comments kept: a list set whole would lose the comments inside a multi-line array)."""
    holder = toml_layout.holder(edits.document, path, key)
    current = holder.get(key) if holder is not None else None
    if current is None:
        edits.set(path, key, list(wanted))
        return
    if not isinstance(current, list) or not all(isinstance(item, str) for item in current):
        raise ConfigError(f"{dotted(path + (key,))} is not a list of strings")
    missing = [item for item in wanted if item not in current]
    if not missing:
        return
    values = [str(item) for item in current] + missing
    if isinstance(current, Array):
        for item in missing:
            current.append(item)
        edits.assigned.append((path + (key,), values))
    else:  # an inline table's or a dotted key's plain list
        edits.set(path, key, values)


def _drop_disabled_cri(document: Any, edits: Edits) -> None:
    disabled = document.get("disabled_plugins")
    if disabled is None:
        return
    if not isinstance(disabled, Array):  # tomlkit's list
        raise ConfigError("disabled_plugins is not a list")
    removed = [name for name in disabled if name in CRI_PLUGIN_IDS]
    if not removed:
        return
    if "#" in disabled.as_string():
        # tomlkit drops a comment with the element it sits on: the site's note would be lost.
        raise ConfigError(
            "disabled_plugins switches CRI off and carries comments: take "
            f"{', '.join(removed)} out of it by hand (Kubernetes needs containerd's CRI plugin)"
        )
    edits.drop("disabled_plugins", removed)
    shown = ", ".join(f'"{name}"' for name in removed)
    edits.notes.append(f"removed {shown} from disabled_plugins: Kubernetes needs containerd's CRI plugin")


def _edit(text: str, source: str, wire: Callable[[Any, Edits, int], None] | None = None) -> Merged:
    """CRI taken out of disabled_plugins, then ``wire(document, edits, version)``; see ``toml_layout.edit``."""

    def parse_versioned(body: str) -> tomlkit.TOMLDocument:
        document = parse_config(body, source)
        config_version(document, source)  # an unsupported version is refused before any edit
        return document

    def apply(document: Any, edits: Edits) -> None:
        _drop_disabled_cri(document, edits)
        if wire is not None:
            wire(document, edits, config_version(document, source))

    text, edits = toml_layout.edit(text, source, parse_versioned, apply)
    # The edits never touch `version`.
    return Merged(text=text, version=config_version(edits.document, source), notes=edits.notes)


def merge_containerd_config(
    text: str, wiring: RuntimeWiring, source: str = "config.toml", plugin: str | None = None
) -> Merged:
    """
    The config ``text`` with the NVIDIA runtime wired in; raises ConfigError naming ``source``.

    ``plugin``: the CRI plugin section to wire (default: the one of the file's version).
    """

    def wire(document: Any, edits: Edits, version: int) -> None:
        cri = ("plugins", plugin or CRI_RUNTIME_PLUGIN[version])
        containerd = cri + ("containerd",)
        # Under a containerd table the file already had, a first new runtime needs its blank line.
        first_blank = (
            False
            if any(isinstance(t, Table) and not t.is_super_table() for t in toml_layout.fragments(document, containerd))
            else None
        )
        runtimes = containerd + ("runtimes",)
        _wire_runtime(edits, runtimes, "runc", None, wiring.systemd_cgroup, first_blank)
        _wire_runtime(edits, runtimes, "nvidia", wiring.binary, wiring.systemd_cgroup, first_blank)
        _add_container_annotations(edits, runtimes + ("nvidia",), wiring.container_annotations)
        holder = toml_layout.holder(document, containerd, "default_runtime_name")
        current_default = holder.get("default_runtime_name") if holder is not None else None
        if wiring.make_default:
            edits.set(containerd, "default_runtime_name", "nvidia")
        elif current_default == "nvidia":
            edits.set(containerd, "default_runtime_name", "runc")
            edits.notes.append("default_runtime_name was nvidia: set back to runc (nvidia_runtime_default=false)")
        if wiring.enable_cdi is not None and cri[1] == CRI_PLUGIN_2X:
            if wiring.enable_cdi:
                edits.notes.append("containerd 2.x has CDI on: enable_cdi left as it is")
        elif wiring.enable_cdi:
            edits.set(cri, "enable_cdi", True)
            cri_table = toml_layout.holder(document, cri, "cdi_spec_dirs")
            spec_dirs = cri_table.get("cdi_spec_dirs") if cri_table is not None else None
            if spec_dirs is None:
                edits.set(cri, "cdi_spec_dirs", list(SPEC_DIRS))
            else:
                _append_missing(edits, cri, "cdi_spec_dirs", (SPEC_PATH.rsplit("/", 1)[0],))
        elif wiring.enable_cdi is False:
            holder_table = toml_layout.holder(document, cri, "enable_cdi")
            if holder_table is not None and holder_table.get("enable_cdi") is True:
                edits.set(cri, "enable_cdi", False)

    return _edit(text, source, wire)


def allow_cri(text: str, source: str) -> Merged:
    """``text`` with CRI taken out of ``disabled_plugins`` (an imported file that does not hold the wiring)."""
    return _edit(text, source)


# What containerd would run. ---------------------------------------------------------------


def effective_problems(dump: str, wiring: RuntimeWiring) -> tuple[str, list[str]]:
    """
    What ``containerd config dump`` says containerd would run, against the wiring:
    (the runtime's table as TOML names it, the differences; none when it is wired).
    """
    try:
        config = node_text.parsed(tomllib.loads, dump, "its output")
    except node_text.UnreadableText as error:
        return "containerd config dump", [str(error)]
    except tomllib.TOMLDecodeError as error:
        return "containerd config dump", [f"its output is not TOML: {node_text.syntax_error(error, dump)}"]
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
            problems.append(
                f"runtimes.nvidia.options.BinaryName is {options.get('BinaryName')!r}, not {wiring.binary!r}"
            )
    if nvidia and wiring.container_annotations:
        passed = nvidia.get("container_annotations") or []
        missing = [item for item in wiring.container_annotations if item not in passed]
        if missing:
            problems.append(
                f"runtimes.nvidia.container_annotations lacks {', '.join(map(repr, missing))} (nvidia_runtime_mode=cdi)"
            )
    for name in ("runc", "nvidia"):
        if name in runtimes or name == "runc":
            value = bool(((runtimes.get(name) or {}).get("options") or {}).get("SystemdCgroup", False))
            if value != wiring.systemd_cgroup:
                problems.append(
                    f"runtimes.{name}.options.SystemdCgroup is {str(value).lower()}, "
                    f"not {str(wiring.systemd_cgroup).lower()} (systemd_cgroup)"
                )
    default = containerd.get("default_runtime_name")
    if wiring.make_default and default != "nvidia":
        problems.append(f"default_runtime_name is {default!r}, not 'nvidia' (nvidia_runtime_default is true)")
    if not wiring.make_default and default == "nvidia":
        problems.append("default_runtime_name is 'nvidia' but nvidia_runtime_default is false")
    if wiring.enable_cdi is not None:
        cdi = config.get("plugins", {}).get(plugin, {}).get("enable_cdi")
        if cdi is not None and cdi is not wiring.enable_cdi:
            problems.append(f"enable_cdi is {str(cdi).lower()}, not {str(wiring.enable_cdi).lower()} (cdi)")
    return where, problems


# The engine. ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerdConfig:
    """A containerd config as the engine edits it: the text (the layout engine edits text, so the
    file's layout survives), how messages name it, its values (read by tomllib) and version."""

    text: str
    source: str
    values: dict[str, Any]
    version: int


@dataclass(frozen=True)
class ContainerdEngine:
    """containerd's config, for the containerd of major version ``major`` (None: not known, or a
    config the installed binary does not read as it is: the file's own version decides)."""

    major: int | None = None
    file_format: str = TOML

    def parse(self, text: str, source: str) -> ContainerdConfig:
        values = config_values(toml_layout.line_endings(text)[0], source)
        return ContainerdConfig(text, source, values, config_version(values, source))

    def wire(self, document: ContainerdConfig, wiring: RuntimeWiring, source: str) -> Wired[ContainerdConfig]:
        merged = merge_containerd_config(document.text, wiring, source=source, plugin=self.cri_plugin(document))
        return Wired(replace(document, text=merged.text), merged.notes)

    def render(self, document: ContainerdConfig) -> str:
        return document.text

    def effective(self, running: str, wiring: RuntimeWiring) -> Effective:
        """``running``: what ``containerd config dump`` prints."""
        where, problems = effective_problems(running, wiring)
        return Effective(where, tuple(problems))

    def cri_plugin(self, document: ContainerdConfig) -> str:
        """The CRI section of ``document`` the installed containerd runs."""
        return cri_plugin_for(document.values, document.version, self.major)


_: RuntimeEngine[ContainerdConfig, str] = ContainerdEngine()
