"""
Planning the wiring over containerd's main config and the files it imports (drop-ins): which file
holds the CRI section containerd runs with, each file's merged text, and a node's plan read from
its facts. Nothing here changes the node.
"""

from __future__ import annotations

import posixpath
import tomllib
from dataclasses import dataclass, field

from pyinfra import host

from .. import node_text, templates
from ..cdi import CdiUnsupported, for_containerd
from .cri import (
    CRI_RUNTIME_PLUGIN,
    Merged,
    allow_cri,
    check_version_fits,
    config_version,
    cri_plugin_for,
    effective_problems,
    merge_containerd_config,
    parse_config,
)
from .layout import ConfigError, line_endings
from .flavours import ConfigTarget
from ..facts.combined import FactCall, changes_so_far, known_fact, read
from ..facts.containerd import ContainerdImports, config_read
from ..settings import RuntimeWiring


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
        data = config_values(line_endings(config.text)[0], config.source)
        version = config_version(data, config.source)
        if index == 0 or data.get("version") is not None:
            check_version_fits(version, major, containerd_version, config.source)
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


def config_values(text: str, source: str) -> dict:
    """A config's values, only read: by tomllib, several times faster than the layout-keeping parse
    an edit needs (the no-op reads every host's files). Where tomllib refuses the text, tomlkit's
    reading and its error, as every edit of the file gives them."""
    try:
        return node_text.parsed(tomllib.loads, text, source)
    except node_text.UnreadableText as error:
        raise ConfigError(str(error)) from None
    except tomllib.TOMLDecodeError:
        return parse_config(text, source).unwrap()


def default_config_text(containerd_major: int | None) -> str:
    """The fallback for a missing file when ``containerd config default`` is unavailable."""
    version = 3 if (containerd_major or 1) >= 2 else 2
    return templates.render("containerd-config.toml.j2", version=version, cri_plugin=CRI_RUNTIME_PLUGIN[version])


@dataclass
class NodeWiringPlan:
    """What the runtimes stage does on a node: the facts it was made from, each file's merged text,
    the verdict. Made once; ``still_current`` makes it again only when the host changed since."""

    target: ConfigTarget
    asked: RuntimeWiring  # the settings' wiring, to plan again from
    config_fact: dict  # ContainerdConfig, as read
    source: str
    changes: int  # the host's changes this run when the plan was made (changes_so_far)
    planned: list[PlannedFile] = field(default_factory=list)
    changed: list[PlannedFile] = field(default_factory=list)
    holder: str = ""
    refusal: str = ""     # the files cannot be wired: why, in one line
    overridden: str = ""  # the files say wired, containerd's own dump does not: why
    wiring: RuntimeWiring | None = None  # ``asked`` with cdi decided for this containerd: what is written
    checked: RuntimeWiring | None = None  # what containerd's own dump must show

    def in_place(self) -> bool:
        return not (self.refusal or self.changed or self.overridden)


def target_read(target: ConfigTarget) -> FactCall:
    """What ``plan_node_wiring`` reads for ``target``."""
    return config_read(target.path, target.base_path, target.binary)


def plan_node_wiring(target: ConfigTarget, wiring: RuntimeWiring) -> NodeWiringPlan:
    """Read the node (facts, read ahead where preflight did) and plan the wiring; nothing runs."""
    path, containerd_binary, base_path = target.path, target.binary, target.base_path
    initial_text, validate_with_binary, hint = target.initial_text, target.validate_with_binary, target.hint
    changes = changes_so_far(host)
    state = read(host, target_read(target))
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
    plan = NodeWiringPlan(target, wiring, state, source, changes)
    try:
        # cdi=auto decided for this containerd (the plan keeps what was asked, to plan again from).
        cdi = for_containerd(wiring, state["major"], state["minor"], state["version"])
        wiring, plan.wiring, plan.checked = cdi.wiring, cdi.wiring, cdi.checked
        files = [ConfigFile(path, base, source)] + imported_files(path, current, source)
        plan.planned, plan.holder = plan_wiring(files, wiring, state["major"] if validate_with_binary else None,
                                                state["version"])
    except CdiUnsupported as error:
        plan.refusal = str(error)
        return plan
    except ConfigError as error:
        plan.refusal = f"{error}; it was left as it is" + (f".{hint}" if hint and current is not None else "")
        return plan
    plan.planned[0].current = current
    plan.changed = [file for file in plan.planned if file.current is None or file.merged.text != file.current]
    if not plan.changed and validate_with_binary and state["dump"] is not None:
        # The files say wired: containerd's own reading of them must say so too.
        where, problems = effective_problems(state["dump"], plan.checked)
        if problems:
            plan.overridden = (
                f"{plan.holder} holds the nvidia wiring, but `containerd config dump` of {path} shows {where} "
                f"with {'; '.join(problems)}: another file containerd reads overrides it; nothing was changed")
    return plan


def still_current(plan: NodeWiringPlan) -> NodeWiringPlan:
    """``plan``, unless an operation changed the host since it was made (the operation's execution
    after an install, say): then the plan made again from what the host holds now."""
    if plan.changes == changes_so_far(host):
        return plan
    return plan_node_wiring(plan.target, plan.asked)


def imported_files(path: str, current: str | None, source: str) -> list[ConfigFile]:
    """The files ``path`` imports, as the node has them (only a config already on the node imports)."""
    if current is None:
        return []
    patterns = config_values(line_endings(current)[0], source).get("imports") or []
    if not isinstance(patterns, list) or not all(isinstance(pattern, str) for pattern in patterns):
        raise ConfigError(f"{source}: imports is not a list of paths")
    if not patterns:
        return []
    found = known_fact(host, ContainerdImports, directory=posixpath.dirname(path) or "/", patterns=list(patterns))
    return [ConfigFile(file["path"], file["text"], file["path"]) for file in found if file["path"] != path]
