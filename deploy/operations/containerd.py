"""
containerd's wiring planned from the node: which file of the main config and the files it imports
(drop-ins) holds the CRI section containerd runs with, each file's merged text (the engine's,
``deploy/runtimes/containerd/``), and the candidate check by the node's own containerd, which
reads the new files before any is installed. The generic operation (``runtime_config.py``) applies
the plan.
"""

from __future__ import annotations

import posixpath
from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import tomlkit
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand
from pyinfra.api.command import PyinfraCommand

from ..facts.containerd import ContainerdImports, config_read
from ..facts.read_ahead import FactCall, changes_so_far, known_fact, read
from ..foundations import redact, templates
from ..foundations.toml_layout import ConfigError, line_endings
from ..runtimes.cdi import CdiUnsupported, for_containerd
from ..runtimes.containerd.cri import (
    CRI_RUNTIME_PLUGIN,
    ContainerdEngine,
    allow_cri,
    check_version_fits,
    config_values,
)
from ..runtimes.containerd.installations import ConfigTarget
from ..runtimes.wiring import RuntimeWiring
from . import probes
from .runtime_config import PlannedFile, RuntimeConfigPlan
from .upload import Staging, Upload

if TYPE_CHECKING:
    from pyinfra.api import Host, State


@dataclass
class ConfigFile:
    path: str
    text: str
    source: str  # how messages name it


def plan_wiring(
    files: list[ConfigFile], wiring: RuntimeWiring, major: int | None, containerd_version: str | None = None
) -> tuple[list[PlannedFile], str]:
    """
    Where the wiring takes effect, given the main config and the files it imports (in the
    order containerd loads them), and each file's merged text; plus the path that holds it.

    containerd before 2.1 replaces a plugin's section from an imported file as a whole, 2.1
    merges it key by key: either way the last file holding the CRI section decides every key
    the wiring sets once they are all in it. The others only lose a CRI in disabled_plugins.
    """
    engine = ContainerdEngine(major)
    documents = []
    for index, config in enumerate(files):
        document = engine.parse(config.text, config.source)
        if index == 0 or document.values.get("version") is not None:
            check_version_fits(document.version, major, containerd_version, config.source)
        documents.append(document)
    target = max(
        (
            index
            for index, document in enumerate(documents)
            if engine.cri_plugin(document) in (document.values.get("plugins") or {})
        ),
        default=0,
    )
    planned = []
    for index, (config, document) in enumerate(zip(files, documents)):
        if index == target:
            wired = engine.wire(document, wiring, config.source)
            text, notes = engine.render(wired.document), wired.notes
        else:
            merged = allow_cri(config.text, config.source)
            text, notes = merged.text, merged.notes
        planned.append(PlannedFile(config.path, config.text, text, changed=text != config.text, notes=notes))
    return planned, files[target].path


def default_config_text(containerd_major: int | None) -> str:
    """The fallback for a missing file when ``containerd config default`` is unavailable."""
    version = 3 if (containerd_major or 1) >= 2 else 2
    return templates.render("containerd-config.toml.j2", version=version, cri_plugin=CRI_RUNTIME_PLUGIN[version])


def target_read(target: ConfigTarget) -> FactCall:
    """What ``plan_node_wiring`` reads for ``target``."""
    return config_read(target.path, target.base_path, target.binary)


def plan_node_wiring(target: ConfigTarget, wiring: RuntimeWiring) -> RuntimeConfigPlan:
    """Read the node (facts, read ahead where preflight did) and plan the wiring; nothing runs."""
    path, containerd_binary, base_path = target.path, target.binary, target.base_path
    initial_text, validate_with_binary, hint = target.initial_text, target.validate_with_binary, target.hint
    changes = changes_so_far(host)
    state = read(host, target_read(target))
    current = state["config"]
    if current is not None:
        base, source = current, path
    elif state["base_config"] is not None and base_path is not None:
        base, source = state["base_config"], base_path
    elif initial_text is not None:
        base, source = initial_text, "an empty drop-in"
    elif state["default_config"] is not None:
        base, source = state["default_config"], f"`{containerd_binary} config default`"
    else:
        base, source = default_config_text(state["major"]), "templates/containerd-config.toml.j2"
    plan = RuntimeConfigPlan(ContainerdEngine.file_format, target.service, [], "", changes)
    try:
        # cdi=auto decided for this containerd.
        cdi = for_containerd(wiring, state["major"], state["minor"], state["version"])
        files = [ConfigFile(path, base, source)] + imported_files(path, current, source)
        plan.files, holder = plan_wiring(
            files, cdi.wiring, state["major"] if validate_with_binary else None, state["version"]
        )
    except CdiUnsupported as error:
        plan.refusal = str(error)
        return plan
    except ConfigError as error:
        plan.refusal = f"{error}; it was left as it is" + (f".{hint}" if hint and current is not None else "")
        return plan
    main = plan.files[0]
    main.current, main.created_from = current, source
    main.changed = current is None or main.text != current
    plan.in_place_note = f"{holder} already wires the nvidia runtime"
    if validate_with_binary:
        binary = state["binary_path"] or containerd_binary
        plan.check = partial(_check_candidates, binary, cdi.checked, holder)
    if not plan.changed and validate_with_binary and state["dump"] is not None:
        # The files say wired: containerd's own reading of them must say so too.
        effective = ContainerdEngine().effective(state["dump"], cdi.checked)
        if effective.problems:
            plan.refusal = (
                f"{holder} holds the nvidia wiring, but `containerd config dump` of {path} shows {effective.where} "
                f"with {'; '.join(effective.problems)}: another file containerd reads overrides it; nothing was changed"
            )
    return plan


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


# The candidate check. ------------------------------------------------------------------------

CHECK_SUFFIX = ".gpu-node-check"


def _check_candidates(
    binary: str, wiring: RuntimeWiring, holder: str, plan: RuntimeConfigPlan
) -> Generator[str | PyinfraCommand, Any, bool]:
    """
    Ask the node's containerd what it would run with the new files, before any is installed:
    copies beside the live files (relative imports resolve the same), the main one importing
    the new versions of changed imported files in containerd's own order.
    """
    planned, changed = plan.files, plan.changed
    main = planned[0]
    main_text = main.text
    if any(file is not main for file in changed):
        imports = [file.path + CHECK_SUFFIX if file in changed else file.path for file in planned[1:]]
        document = tomlkit.parse(line_endings(main_text)[0])
        document["imports"] = imports
        main_text = tomlkit.dumps(document)
    copies = {main.path + CHECK_SUFFIX: main_text}
    copies.update({file.path + CHECK_SUFFIX: file.text for file in changed if file is not main})
    live = {file.path + CHECK_SUFFIX: file.path for file in changed}
    staging = Staging.new(host, [Upload(copy, text.encode(), live=live.get(copy)) for copy, text in copies.items()])
    yield from staging.commands()
    yield FunctionCommand(
        _run_candidate_check,
        (
            binary,
            main.path + CHECK_SUFFIX,
            list(copies),
            wiring,
            ", ".join(file.path for file in changed),
            holder,
            staging.place_script(),
        ),
        {},
    )
    return True


def _run_candidate_check(
    state: State,
    host: Host,
    binary: str,
    config: str,
    copies: list[str],
    wiring: RuntimeWiring,
    changed: str,
    holder: str,
    placed: str,
) -> bool:
    command = StringCommand(
        placed,
        QuoteString(binary),
        "--config",
        QuoteString(config),
        "config dump; status=$?; rm -f",
        *[QuoteString(copy) for copy in copies],
        "; exit $status",
    )
    # pyinfra hands a FunctionCommand no connector arguments: take the operation's (--sudo, _su_user...)
    succeeded, output = host.run_shell_command(command, **probes.connector_arguments(host))
    own_line = next((line for line in output.stderr_lines if line.startswith("gpu-node: ")), None)
    if not succeeded and own_line:
        # The copies could not be put in place (a symbolic link, a full disk): that line says why.
        host.log_styled(own_line, fg="red", log_func=logger.error)
        return False
    if not succeeded:
        problem = f"{binary} config dump rejected the new version: {redact.daemon_output(output.stderr)}"
    else:
        effective = ContainerdEngine().effective(output.stdout, wiring)
        if not effective.problems:
            return True
        problem = f"containerd would not run the nvidia wiring in {holder}: {effective.where} would have " + "; ".join(
            effective.problems
        )
    host.log_styled(f"gpu-node: {changed} was not changed: {problem}", fg="red", log_func=logger.error)
    return False
