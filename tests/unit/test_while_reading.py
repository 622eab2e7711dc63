"""
While the node answers gpu-node's read (deploy/facts/read_ahead.py), the controller resolves what
pyinfra's first operation needs whatever the answer (deploy/foundations/pyinfra_api.py
``while_reading``): the work runs in a greenlet as the read waits, not after it.
"""

from __future__ import annotations

import inspect
import os
import sys
import types

import gevent
import pyinfra
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.facts.server import Arch

from deploy.facts.read_ahead import ReadNotRun, read_facts
from deploy.foundations.pyinfra_api import resolve_module_files


class WaitingHost:
    """Answers the read after waiting for the node (a gevent wait, as pyinfra's connectors wait on a
    remote command's output), noting whether the module files were resolved before and after."""

    name = "waiting"

    def __init__(self):
        self.state = State(Inventory((["@local"], {})), Config())
        self.resolved = []

    def get_fact(self, fact, **kwargs):
        self.resolved.append(resolve_module_files.cache_info().currsize)
        gevent.sleep(0.01)
        self.resolved.append(resolve_module_files.cache_info().currsize)
        return ["@@gpu-node-fact Arch", "x86_64"]


def test_the_module_files_are_resolved_while_the_node_answers_the_read(monkeypatch):
    monkeypatch.setattr(pyinfra, "is_cli", True)
    resolve_module_files.cache_clear()
    host = WaitingHost()
    assert read_facts(host, Arch) == {"Arch": "x86_64"}
    assert host.resolved == [0, 1]


def test_a_read_that_fails_at_once_leaves_no_work_running_beside_it(monkeypatch):
    """The read fails before it waits (sudo's prompt met no terminal): the work begun beside it is
    done before the refusal leaves read_facts, so no greenlet of this host outlives its read."""
    monkeypatch.setattr(pyinfra, "is_cli", True)
    resolve_module_files.cache_clear()

    class FailingHost(WaitingHost):
        def get_fact(self, fact, **kwargs):
            raise EOFError

    host = FailingHost()
    host.data = {}
    with pytest.raises(ReadNotRun, match="sudo wants a password"):
        read_facts(host, Arch)
    assert resolve_module_files.cache_info().currsize == 1


def test_under_pyinfras_api_the_module_files_are_left_alone():
    """pyinfra's API orders operations by count, not by the call stack (pyinfra.api.operation's
    solve_operation_consistency): no operation of an API run resolves the module files, so its read
    does not either."""
    assert not pyinfra.is_cli
    resolve_module_files.cache_clear()
    host = WaitingHost()
    assert read_facts(host, Arch) == {"Arch": "x86_64"}
    assert host.resolved == [0, 0] and resolve_module_files.cache_info().currsize == 0


def test_a_module_file_that_cannot_be_resolved_prints_no_traceback_beside_the_read(monkeypatch, tmp_path, capfd):
    """A module named by a relative file while the working folder is gone (removed under the run):
    inspect's resolving raises FileNotFoundError, which pyinfra's own reading of the stack passes over
    (inspect.getframeinfo). Beside the read it passes over it too: the read answers, and no greenlet
    prints its traceback."""
    monkeypatch.setattr(pyinfra, "is_cli", True)
    resolve_module_files.cache_clear()
    # as in a fresh process: inspect has resolved no module's file yet
    monkeypatch.setattr(inspect, "modulesbyfile", {})
    monkeypatch.setattr(inspect, "_filesbymodname", {})
    monkeypatch.setitem(sys.modules, "relative_stand_in", types.ModuleType("relative_stand_in"))
    sys.modules["relative_stand_in"].__file__ = "relative_stand_in.py"
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)
    host = WaitingHost()
    assert read_facts(host, Arch) == {"Arch": "x86_64"}
    assert "Traceback" not in capfd.readouterr().err
