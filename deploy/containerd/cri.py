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
  asks (deploy/cdi.py decided it for the containerd's version), for containerd 1.x: 2.x has CDI on;
- ``runtimes.nvidia.container_annotations`` gains what the wiring names (the runtime's cdi mode
  reads ``cdi.k8s.io/`` annotations), the file's own entries kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tomlkit
from tomlkit.exceptions import ParseError
from tomlkit.items import Array, Table

from .. import node_text, redact
from ..cdi import SPEC_DIRS, SPEC_PATH
from . import layout
from .layout import TOMLKIT_FAULTS, ConfigError, Edits, TablePath, dotted, tomllib
from ..settings import RuntimeWiring

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
        return node_text.parsed(layout.parse, text, source)
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


def cri_plugin_for(data: dict, version: int, major: int | None) -> str:
    """The CRI section a file of ``version`` must hold for the installed containerd to run it."""
    plugins = data.get("plugins") if isinstance(data.get("plugins"), dict) else {}
    # containerd 2.x reads a version 2 file's 2.x-named section over the migrated 1.x one, key by key.
    if (major or 0) >= 2 and version == 2 and CRI_PLUGIN_2X in plugins:
        return CRI_PLUGIN_2X
    return CRI_RUNTIME_PLUGIN[version]


def dump_cri_plugin(config: dict) -> str:
    """The plugin that holds the CRI runtimes in a parsed ``containerd config dump``: containerd
    dumps version 2 (1.x) or 3 (2.x)."""
    return CRI_RUNTIME_PLUGIN.get(config.get("version", 2), CRI_PLUGIN_2X)


# The merge. -------------------------------------------------------------------------------

def _new_runtime(binary: str | None, systemd_cgroup: bool, inline: bool = False):
    runtime = tomlkit.inline_table() if inline else tomlkit.table()
    runtime["runtime_type"] = RUNC_V2
    options = tomlkit.inline_table() if inline else tomlkit.table()
    if binary:
        options["BinaryName"] = binary
    options["SystemdCgroup"] = systemd_cgroup
    runtime["options"] = options
    return runtime


def _wire_runtime(edits: Edits, runtimes_path: TablePath, name: str, binary: str | None,
                  systemd_cgroup: bool, first_blank: bool | None) -> None:
    document = edits.document
    path = runtimes_path + (name,)
    runtime = layout.holder(document, path)
    if runtime is None and edits.append_new:
        edits.set(path, "runtime_type", RUNC_V2)
        if binary:
            edits.set(path + ("options",), "BinaryName", binary)
        edits.set(path + ("options",), "SystemdCgroup", systemd_cgroup)
        return
    if runtime is None:
        runtimes = layout.ensure_table(document, runtimes_path, header=False)
        style = layout.table_style(runtimes, "options")
        # Whether the file ends its tables with a blank line: read before inserting.
        blank = layout.ends_with_blank_line(list(runtimes.values())[-1]) if len(runtimes) else first_blank
        runtimes[name] = _new_runtime(binary, systemd_cgroup,
                                      inline=layout.written_as_dotted_keys(runtimes))
        layout.format_new(layout.holder(document, path), blank, *style)
        edits.assigned.append((path, tomllib.loads(tomlkit.dumps({"r": _new_runtime(binary, systemd_cgroup)}))["r"]))
        return
    if name == "nvidia":
        edits.set(path, "runtime_type", RUNC_V2)
    options_path = path + ("options",)
    if (layout.holder(document, options_path) is None and isinstance(runtime, Table)
            and not layout.written_as_dotted_keys(runtime) and not edits.append_new):
        # A runtime table with no options: add them in the runtime's own style.
        runtimes = layout.holder(document, runtimes_path)
        header, key_indent, step = layout.table_style(runtimes, "options")
        blank = layout.ends_with_blank_line(runtime)
        runtime["options"] = _new_runtime(binary, systemd_cgroup)["options"]
        key_offset = key_indent[len(header):] if key_indent.startswith(header) else ""
        options_header = layout.indent_of(runtime) + step
        layout.format_new(runtime["options"], blank, options_header, options_header + key_offset, step)
        edits.assigned.append((options_path, _new_runtime(binary, systemd_cgroup).unwrap()["options"]))
        return
    if binary:
        edits.set(options_path, "BinaryName", binary)
    edits.set(options_path, "SystemdCgroup", systemd_cgroup)


def _add_container_annotations(edits: Edits, runtime_path: TablePath, wanted: tuple[str, ...]) -> None:
    """The runtime's ``container_annotations`` with ``wanted`` appended where missing (the file's
    entries, their order and comments kept)."""
    if not wanted:
        return
    runtime = layout.holder(edits.document, runtime_path, "container_annotations")
    current = runtime.get("container_annotations") if runtime is not None else None
    if current is None:
        edits.set(runtime_path, "container_annotations", list(wanted))
        return
    if not isinstance(current, list) or not all(isinstance(item, str) for item in current):
        raise ConfigError(f"{dotted(runtime_path + ('container_annotations',))} is not a list of strings")
    missing = [item for item in wanted if item not in current]
    if not missing:
        return
    values = [str(item) for item in current] + missing
    if isinstance(current, Array):
        for item in missing:
            current.append(item)  # in place: the array's comments and layout stay
        edits.assigned.append((runtime_path + ("container_annotations",), values))
    else:  # an inline table's or a dotted key's plain list
        edits.set(runtime_path, "container_annotations", values)


def _drop_disabled_cri(document, edits: Edits) -> None:
    disabled = document.get("disabled_plugins")
    if disabled is None:
        return
    if not isinstance(disabled, list):
        raise ConfigError("disabled_plugins is not a list")
    removed = [name for name in disabled if name in CRI_PLUGIN_IDS]
    if not removed:
        return
    if "#" in disabled.as_string():
        # tomlkit drops a comment with the element it sits on: the site's note would be lost.
        raise ConfigError("disabled_plugins switches CRI off and carries comments: take "
                          f"{', '.join(removed)} out of it by hand (Kubernetes needs containerd's CRI plugin)")
    edits.drop("disabled_plugins", removed)
    shown = ", ".join(f'"{name}"' for name in removed)
    edits.notes.append(f"removed {shown} from disabled_plugins: Kubernetes needs containerd's CRI plugin")


def _edit(text: str, source: str, wire=None) -> Merged:
    """CRI taken out of disabled_plugins, then ``wire(document, edits, version)``; see ``layout.edit``."""

    def parse_versioned(body: str):
        document = parse_config(body, source)
        config_version(document, source)  # an unsupported version is refused before any edit
        return document

    def apply(document, edits: Edits) -> None:
        _drop_disabled_cri(document, edits)
        if wire is not None:
            wire(document, edits, config_version(document, source))

    text, edits = layout.edit(text, source, parse_versioned, apply)
    # The edits never touch `version`.
    return Merged(text=text, version=config_version(edits.document, source), notes=edits.notes)


def merge_containerd_config(text: str, wiring: RuntimeWiring, source: str = "config.toml",
                            plugin: str | None = None) -> Merged:
    """
    The config ``text`` with the NVIDIA runtime wired in; raises ConfigError naming ``source``.

    ``plugin``: the CRI plugin section to wire (default: the one of the file's version).
    """

    def wire(document, edits: Edits, version: int) -> None:
        cri = ("plugins", plugin or CRI_RUNTIME_PLUGIN[version])
        containerd = cri + ("containerd",)
        # Under a containerd table the file already had, a first new runtime needs its blank line.
        first_blank = False if any(isinstance(t, Table) and not t.is_super_table()
                                   for t in layout.fragments(document, containerd)) else None
        runtimes = containerd + ("runtimes",)
        _wire_runtime(edits, runtimes, "runc", None, wiring.systemd_cgroup, first_blank)
        _wire_runtime(edits, runtimes, "nvidia", wiring.binary, wiring.systemd_cgroup, first_blank)
        _add_container_annotations(edits, runtimes + ("nvidia",), wiring.container_annotations)
        holder = layout.holder(document, containerd, "default_runtime_name")
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
            cri_table = layout.holder(document, cri, "cdi_spec_dirs")
            spec_dirs = cri_table.get("cdi_spec_dirs") if cri_table is not None else None
            spec_dirs = spec_dirs.unwrap() if hasattr(spec_dirs, "unwrap") else spec_dirs
            if not isinstance(spec_dirs, list):
                edits.set(cri, "cdi_spec_dirs", list(SPEC_DIRS))
            elif SPEC_PATH.rsplit("/", 1)[0] not in spec_dirs:
                edits.set(cri, "cdi_spec_dirs", spec_dirs + [SPEC_PATH.rsplit("/", 1)[0]])
        elif wiring.enable_cdi is False:
            holder_table = layout.holder(document, cri, "enable_cdi")
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
            problems.append(f"runtimes.nvidia.options.BinaryName is {options.get('BinaryName')!r}, "
                            f"not {wiring.binary!r}")
    if nvidia and wiring.container_annotations:
        passed = nvidia.get("container_annotations") or []
        missing = [item for item in wiring.container_annotations if item not in passed]
        if missing:
            problems.append(f"runtimes.nvidia.container_annotations lacks {', '.join(map(repr, missing))} "
                            "(nvidia_runtime_mode=cdi)")
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
    if wiring.enable_cdi is not None:
        cdi = config.get("plugins", {}).get(plugin, {}).get("enable_cdi")
        if cdi is not None and cdi is not wiring.enable_cdi:
            problems.append(f"enable_cdi is {str(cdi).lower()}, not {str(wiring.enable_cdi).lower()} (cdi)")
    return where, problems
