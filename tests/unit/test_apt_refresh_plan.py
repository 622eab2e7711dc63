"""A first run installs in several stages but refreshes the apt lists only when it must."""

from __future__ import annotations

import base64

import pytest
from plan import DEFAULT, gpu_node, run_deploy

from deploy.facts.apt import AptSourceFiles

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

# Debian's archive entry, whose components the driver stage extends (contrib non-free ...)
DEBIAN_SOURCES = (
    AptSourceFiles,
    "/etc/apt/sources.list.d/debian.sources "
    + base64.b64encode(
        b"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n"
    ).decode(),
)


def debian(*facts):
    """A first run's Debian node: what it does not state (the stages' files, packages, units) is not
    there yet, as the facts' defaults read it."""
    return gpu_node("debian-12", facts=facts, unstated=DEFAULT)


def test_toolkit_then_containerd_refresh_the_lists_once_after_the_new_source():
    run = run_deploy(debian(), data={"stages": "toolkit,runtimes"})
    assert run.error is None, run.error
    updates = [
        index
        for index, command in enumerate(run.commands)
        if command.startswith("apt-get ") and command.endswith(" update")
    ]
    source = next(
        index
        for index, command in enumerate(run.commands)
        if command.startswith("chown") and command.endswith("nvidia-container-toolkit.list")
    )
    installs = [
        index for index, command in enumerate(run.commands) if "apt-get -y" in command and " install " in command
    ]
    assert len(updates) == 1, [run.commands[index] for index in updates]
    assert source < updates[0] < installs[0], "the refresh must follow the new source and precede installs"
    assert any("containerd" in run.commands[index] for index in installs)


def test_enabling_driver_components_refreshes_again_before_the_driver_install():
    run = run_deploy(debian(DEBIAN_SOURCES), data={"stages": "driver,toolkit"})
    assert run.error is None, run.error
    updates = [command for command in run.commands if command.startswith("apt-get ") and command.endswith(" update")]
    # one after contrib/non-free are enabled, one after the toolkit source is added
    assert len(updates) == 2, run.commands
