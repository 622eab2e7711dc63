"""read_facts gives each fact what it would give alone, from one command (run for real here)."""

from __future__ import annotations

import subprocess

from pyinfra.api import Config, Inventory, State
from pyinfra.facts.server import Arch, LinuxDistribution

from deploy.facts.containerd import ContainerdInstallations
from deploy.facts.nvidia import NodeSurvey
from deploy.facts.read_ahead import CombinedOutput, read_facts, split_sections

FACTS = (LinuxDistribution, Arch, NodeSurvey, ContainerdInstallations)


def shell(command) -> list[str]:
    text = command if isinstance(command, str) else command.get_raw_value()
    return subprocess.run(["sh", "-c", text], capture_output=True, text=True, check=True).stdout.splitlines()


class LocalHost:
    """Answers get_fact by running the fact's command in a local shell, in a run of its own."""

    name = "local"

    def __init__(self):
        self.state = State(Inventory((["@local"], {})), Config())

    def get_fact(self, fact, **kwargs):
        arguments = {key: value for key, value in kwargs.items() if not key.startswith("_")}  # pyinfra's own
        return fact().process(shell(fact().command(**arguments)))


def alone(fact):
    lines = shell(fact().command())
    return fact().process(lines) if lines else fact().default()


def test_each_fact_from_the_combined_command_equals_the_fact_read_alone():
    together = read_facts(LocalHost(), *FACTS)
    for fact in (LinuxDistribution, Arch, ContainerdInstallations):
        assert together[fact.__name__] == alone(fact), fact.__name__
    node_alone, node_together = alone(NodeSurvey), together["NodeSurvey"]
    node_alone.pop("free_mb"), node_together.pop("free_mb")  # disk use moves between two reads
    assert node_together == node_alone


def test_a_fact_whose_command_prints_nothing_gets_its_default():
    sections = split_sections(["@@gpu-node-fact Arch", "x86_64", "@@gpu-node-fact ContainerdInstallations"])
    assert sections == {"Arch": ["x86_64"], "ContainerdInstallations": []}


class Failing(Arch):
    def command(self):
        return "echo partial; exit 3"


def test_a_failing_fact_command_does_not_fail_the_others_or_the_host():
    command = CombinedOutput().command(facts=(Failing, Arch)).get_raw_value()
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert result.returncode == 0  # a fact command that exits non-zero would fail the host
    assert split_sections(CombinedOutput().process(result.stdout.splitlines()))["Arch"] == [alone(Arch)]
