"""
While the node answers gpu-node's read (deploy/facts/read_ahead.py), the controller resolves what
pyinfra's first operation needs whatever the answer (deploy/foundations/pyinfra_api.py
``while_reading``): the work runs in a greenlet as the read waits, not after it.
"""

from __future__ import annotations

import gevent
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


def test_the_module_files_are_resolved_while_the_node_answers_the_read():
    resolve_module_files.cache_clear()
    host = WaitingHost()
    assert read_facts(host, Arch) == {"Arch": "x86_64"}
    assert host.resolved == [0, 1]


def test_a_read_that_fails_at_once_leaves_no_work_running_beside_it():
    """The read fails before it waits (sudo's prompt met no terminal): the work begun beside it is
    done before the refusal leaves read_facts, so no greenlet of this host outlives its read."""
    resolve_module_files.cache_clear()

    class FailingHost(WaitingHost):
        def get_fact(self, fact, **kwargs):
            raise EOFError

    host = FailingHost()
    host.data = {}
    with pytest.raises(ReadNotRun, match="sudo wants a password"):
        read_facts(host, Arch)
    assert resolve_module_files.cache_info().currsize == 1
