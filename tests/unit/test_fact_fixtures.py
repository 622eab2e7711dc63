"""
Every fact of deploy/facts/ read from its fixtures, in pyinfra's own shape: one folder per fact,
``tests/facts/<module>.<Fact>/``, each JSON file one case:

    {"note": where the output was taken from,
     "kwargs": {...} (or "arg": [...], positional: the fact's arguments, none when absent; a fact
               class among them as {"fact_class": "<module>.<Fact>"}),
     "command": the fact's command for them, as the node runs it,
     "requires_command": the program it needs (null: none),
     "output": [the lines the node printed],
     "fact": what the fact reads from them   or   "error": the one line it fails with}

As pyinfra does, output with no line at all is not processed: the fact is its default. A fact
class with no folder fails here, so a new fact comes with its fixtures, and a change to a command
shows in the fixtures' diff.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import pytest
from pyinfra.api import FactBase, StringCommand
from pyinfra.api.exceptions import FactProcessError

import deploy.facts
from deploy.facts.base import NodeFact

FOLDER = Path(__file__).resolve().parents[1] / "facts"
CASE_KEYS = {"note", "arg", "kwargs", "command", "requires_command", "output", "fact", "error"}


def fact_classes() -> dict[str, type[FactBase]]:
    """Every fact class defined in deploy/facts/, by ``<module>.<Fact>``."""
    found = {}
    for module_info in pkgutil.iter_modules(deploy.facts.__path__):
        module = importlib.import_module(f"{deploy.facts.__name__}.{module_info.name}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, FactBase)
                and value is not NodeFact
                and value.__module__ == module.__name__
            ):
                found[f"{module_info.name}.{name}"] = value
    return found


FACTS = fact_classes()
CASES = sorted(FOLDER.glob("*/*.json"))


def plain(value):
    """A fact's value as JSON holds it: tuples as lists, sets sorted, dataclasses as their fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(plain(item) for item in value)
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def arguments(value):
    """A fixture's arguments with each {"fact_class": "<module>.<Fact>"} made the class it names."""
    if isinstance(value, dict):
        if set(value) == {"fact_class"}:
            return FACTS[value["fact_class"]]
        return {key: arguments(item) for key, item in value.items()}
    if isinstance(value, list):
        return [arguments(item) for item in value]
    return value


def shell_text(command) -> str | None:
    if command is None:
        return None
    return command.get_raw_value() if isinstance(command, StringCommand) else str(command)


def test_every_fact_class_has_a_fixture_folder_and_every_folder_a_fact():
    assert len(FACTS) >= 30, sorted(FACTS)  # the discovery itself found the facts
    folders = {path.name for path in FOLDER.iterdir() if path.is_dir()}
    missing = sorted(name for name in FACTS if not any((FOLDER / name).glob("*.json")))
    assert not missing, f"fact classes without fixtures in {FOLDER}: {missing}"
    assert not folders - set(FACTS), f"fixture folders naming no fact class: {sorted(folders - set(FACTS))}"


@pytest.mark.parametrize("path", CASES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_fact_fixture(path):
    case = json.loads(path.read_text())
    assert set(case) <= CASE_KEYS, f"unknown keys {sorted(set(case) - CASE_KEYS)}"
    assert case.get("note"), "each fixture says where its output was taken from"
    assert ("fact" in case) != ("error" in case), "a fixture expects a fact or an error, one of them"
    fact = FACTS[path.parent.name]()
    args, kwargs = arguments(case.get("arg", [])), arguments(case.get("kwargs", {}))

    assert shell_text(fact.command(*args, **kwargs)) == case["command"]
    requires = fact.requires_command(*args, **kwargs) if callable(fact.requires_command) else fact.requires_command
    assert shell_text(requires) == case.get("requires_command")

    output = case["output"]
    if "error" in case:
        with pytest.raises(FactProcessError) as raised:
            fact.process(output)
        assert str(raised.value) == case["error"]
        assert "\n" not in str(raised.value)
        return
    if output:
        value = fact.process(output)
    else:  # pyinfra hands a fact that printed nothing its default, without process
        value = fact.default() if callable(fact.default) else fact.default
    assert plain(value) == case["fact"]
