"""
Plan tests: run deploy tasks through pyinfra's API against its ``@fake`` connector.

The fake host answers fact commands from ``responses`` (substring or re.Pattern -> output),
so a test states what the host looks like and reads back the commands the deploy ran,
the way pyinfra's own operation tests compare commands for given facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pyinfra.api import Inventory, State
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError

from deploy.settings import Settings, parse_settings
from fake_host import CANDIDATE_CHECK, os_release, run_state, wired_dump


@dataclass
class Plan:
    commands: list[str]
    state: State
    # The problems the host failed with, as logged (one line each, without "[host] gpu-node: ")
    failures: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.state.failed_hosts)

    def failed_with(self, text: str) -> list[str]:
        """The failure lines naming ``text``, when the host did fail."""
        return [line for line in self.failures if text in line] if self.failed else []

    def matching(self, text: str) -> list[str]:
        return [command for command in self.commands if text in command]

    def starting(self, prefix: str) -> list[str]:
        return [command for command in self.commands if command.startswith(prefix)]

    def ran(self, text: str) -> bool:
        return bool(self.matching(text))


def fake_host_data(distro: str = "debian-12", responses: dict | None = None, arch: str = "x86_64") -> dict:
    """fake_responses for a host whose os-release is tests/fixtures/nvidia/os-release/<distro>."""
    merged: dict = {
        "*-release": os_release(distro),
        "uname -m": arch,
        CANDIDATE_CHECK: wired_dump(),
    }
    merged.update(responses or {})
    return {"fake_responses": merged, "fake_delay": 0, "fake_delay_jitter": 0}


def run_plan(
    task: Callable[..., Any],
    *args: Any,
    distro: str = "debian-12",
    responses: dict | None = None,
    data: dict | None = None,
    arch: str = "x86_64",
    **kwargs: Any,
) -> Plan:
    """Prepare and execute ``task(*args, **kwargs)`` (a @deploy) on one @fake host."""
    host_data = {**fake_host_data(distro, responses, arch), **(data or {})}
    inventory = Inventory(([("@fake/node", host_data)], {}))
    failures: list[str] = []
    state, error = run_state(inventory, lambda state: add_deploy(state, task, *args, **kwargs), failures=failures)
    # The host failed during execution (a Python-side check): what ran until then is the plan.
    if error is not None and not (isinstance(error, PyinfraError) and "No hosts remaining" in str(error)):
        raise error
    host = inventory.get_host("@fake/node")
    return Plan(commands=list(host.connector.executed_commands), state=state, failures=failures)


def settings_for(**data: Any) -> Settings:
    return parse_settings({key: value for key, value in data.items()})
