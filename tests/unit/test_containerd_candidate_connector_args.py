"""The candidate check runs with the operation's connector arguments (``--sudo`` and friends).

pyinfra's @fake connector ignores those arguments, so the test records what each command was
given; a check run without ``_sudo`` could not read a root-only config on a real node.
"""

from __future__ import annotations

import base64

from plan import run_plan, settings_for
from pyinfra.connectors.fake import FakeConnector

from deploy.distros.families import detect_platform
from deploy.facts.containerd import config_read
from deploy.tasks.containerd import containerd_runtime

PLAIN_PRESENT = {
    "paths": [],
    "units": {},
    "generated_versions": {},
    "binary": "/usr/bin/containerd",
    "installation": {"name": "plain", "service": "containerd"},
}


def test_candidate_check_runs_with_sudo_when_the_run_uses_sudo(monkeypatch):
    arguments_by_command: list[tuple[str, dict]] = []
    original = FakeConnector.run_shell_command

    def recording(self, command, print_output=False, print_input=False, **arguments):
        text = command if isinstance(command, str) else command.get_masked_value()
        arguments_by_command.append((text, arguments))
        return original(self, command, print_output, print_input, **arguments)

    monkeypatch.setattr(FakeConnector, "run_shell_command", recording)
    family = detect_platform({"name": "debian", "major": None, "release_meta": {"ID": "debian"}}, "x86_64").family
    config = base64.b64encode(b"version = 2").decode()
    run_plan(
        containerd_runtime,
        settings_for(),
        family,
        PLAIN_PRESENT,
        facts=[
            (
                config_read("/etc/containerd/config.toml", None, "containerd"),
                f"binary_path /usr/bin/containerd\nconfig {config}",
            )
        ],
        _sudo=True,
    )
    checks = [arguments for text, arguments in arguments_by_command if "config dump; status=$?" in text]
    assert checks, [text for text, _ in arguments_by_command]
    assert all(arguments.get("_sudo") is True for arguments in checks), checks
