"""
The table of safety calls (tests/safety_calls.py) held to the code: each call's text is once in its
file, the file still compiles without it, and each test named to go red without it is there. Whether
each named test does go red without its call is scripts/mutation.py's ``calls --safety`` (a minute or
two per call on 2 cores: not in the unit run).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from safety_calls import SAFETY_CALLS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import mutation  # noqa: E402 (scripts/ is no package)


@pytest.mark.parametrize("call", SAFETY_CALLS, ids=[call.name for call in SAFETY_CALLS])
def test_each_safety_call_is_once_in_its_file_and_its_removal_compiles(call):
    source = (REPO / call.path).read_text(encoding="utf-8")
    assert source.count(call.text) == 1, f"{call.path} holds {call.text!r} {source.count(call.text)} times"
    (removal,) = [removal for removal in mutation.safety_removals(REPO) if removal.name == call.name]
    mutated = removal.apply(source)
    assert mutated != source and call.text not in mutated
    compile(mutated, call.path, "exec")


@pytest.mark.parametrize("call", SAFETY_CALLS, ids=[call.name for call in SAFETY_CALLS])
def test_each_test_named_to_hold_a_safety_call_is_there(call):
    assert call.tests
    for test in call.tests:
        path, _, name = test.partition("::")
        functions = {
            node.name
            for node in ast.walk(ast.parse((REPO / path).read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef)
        }
        assert name in functions, f"{path} has no {name}"


def test_names_are_unique():
    names = [call.name for call in SAFETY_CALLS]
    assert len(names) == len(set(names))
