"""
Plan tests: run deploy tasks through pyinfra's API against its ``@fake`` connector.

The fake host answers fact commands from ``responses`` (substring or re.Pattern -> output),
so a test states what the host looks like and reads back the commands the deploy ran,
the way pyinfra's own operation tests compare commands for given facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage

from deploy.settings import Settings, parse_settings

DEBIAN_12 = """/etc/os-release
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
---"""

UBUNTU_2204 = """/etc/os-release
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=jammy
---"""

ROCKY_9 = """/etc/os-release
NAME="Rocky Linux"
VERSION_ID="9.4"
ID="rocky"
ID_LIKE="rhel centos fedora"
---"""

FEDORA_40 = """/etc/os-release
NAME="Fedora Linux"
VERSION_ID=40
ID=fedora
---"""

AMAZON_2023 = """/etc/os-release
NAME="Amazon Linux"
VERSION_ID="2023"
ID="amzn"
ID_LIKE="fedora"
---"""

OPENSUSE_LEAP_15 = """/etc/os-release
NAME="openSUSE Leap"
VERSION_ID="15.6"
ID="opensuse-leap"
ID_LIKE="suse opensuse"
---"""

ARCH = """/etc/os-release
NAME="Arch Linux"
ID=arch
BUILD_ID=rolling
---"""

OS_RELEASES = {
    "debian": DEBIAN_12,
    "ubuntu": UBUNTU_2204,
    "rhel": ROCKY_9,
    "fedora": FEDORA_40,
    "amazon": AMAZON_2023,
    "suse": OPENSUSE_LEAP_15,
    "arch": ARCH,
}


@dataclass
class Plan:
    commands: list[str]
    state: State
    results: Any = None
    errors: list[str] = field(default_factory=list)

    def matching(self, text: str) -> list[str]:
        return [command for command in self.commands if text in command]

    def starting(self, prefix: str) -> list[str]:
        return [command for command in self.commands if command.startswith(prefix)]

    def ran(self, text: str) -> bool:
        return bool(self.matching(text))


def fake_host_data(os_release: str, responses: dict | None = None, arch: str = "x86_64") -> dict:
    merged: dict = {
        "*-release": os_release,
        "uname -m": arch,
    }
    merged.update(responses or {})
    return {"fake_responses": merged, "fake_delay": 0, "fake_delay_jitter": 0}


def run_plan(
    task: Callable[..., Any],
    *args: Any,
    os_release: str = DEBIAN_12,
    responses: dict | None = None,
    data: dict | None = None,
    arch: str = "x86_64",
    **kwargs: Any,
) -> Plan:
    """Prepare and execute ``task(*args, **kwargs)`` (a @deploy) on one @fake host."""
    host_data = {**fake_host_data(os_release, responses, arch), **(data or {})}
    inventory = Inventory(([("@fake/node", host_data)], {}))
    state = State(inventory, Config(), check_for_changes=False)
    state.set_stage(StateStage.Connect)
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_deploy(state, task, *args, **kwargs)
    state.set_stage(StateStage.Execute)
    run_ops(state)
    host = inventory.get_host("@fake/node")
    return Plan(commands=list(host.connector.executed_commands), state=state)


def settings_for(**data: Any) -> Settings:
    return parse_settings({key: value for key, value in data.items()})
