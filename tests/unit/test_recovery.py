"""
What an interrupted run or a busy package manager leaves, as the preflight reads it, and what the
deploy then does first. The fixture is the fact's real output on a bookworm node container while
a `dpkg -i` held its locks (tests/e2e/test_interruptions.py runs the same on real nodes).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from plan import DEFAULT, gpu_node, run_deploy

from deploy.facts.recovery import PackageManagerState, PendingRestarts
from deploy.operations.packages import recovery_script

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recovery"
CHANGING = ("mkdir ", "apt-get", "apt-mark", "chmod ", "chown ", "install -p", "update-initramfs")


def test_lock_holders_and_audit_lines_are_parsed():
    state = PackageManagerState().process((FIXTURES / "dpkg-lock-held.txt").read_text().splitlines())
    assert state["held"] == [
        {"lock": "/var/lib/dpkg/lock-frontend", "pid": 66, "command": "dpkg -i /tmp/slow.deb"},
        {"lock": "/var/lib/dpkg/lock", "pid": 66, "command": "dpkg -i /tmp/slow.deb"},
    ]
    assert state["interrupted"][0] == "dpkg was interrupted"
    assert "gpu-node-test-slow   (no description available)" in state["interrupted"]


def test_a_quiet_package_manager_reads_as_nothing_to_do():
    assert PackageManagerState().process([]) == {"held": [], "interrupted": []}
    assert PackageManagerState().process(["audit "]) == {"held": [], "interrupted": []}


def test_pending_restart_marks_name_the_unit_and_its_config():
    assert PendingRestarts().process(["containerd /etc/containerd/config.toml", "docker /etc/docker/daemon.json"]) == {
        "containerd": "/etc/containerd/config.toml",
        "docker": "/etc/docker/daemon.json",
    }


def test_fact_commands_are_valid_shell():
    for command in (PackageManagerState().command(), PendingRestarts().command(), recovery_script(5)):
        assert subprocess.run(["sh", "-n", "-c", command]).returncode == 0, command


def debian(*facts):
    """A Debian node stating ``facts``; what it does not state (the stages' files, packages, units)
    reads as nothing there: the facts' defaults."""
    return gpu_node("debian-12", facts=facts, unstated=DEFAULT)


def first_change_index(commands: list[str]) -> int:
    return next(index for index, command in enumerate(commands) if command.startswith(CHANGING))


def test_a_held_lock_makes_the_wait_the_first_command_of_the_run():
    run = run_deploy(
        debian((PackageManagerState, (FIXTURES / "dpkg-lock-held.txt").read_text())),
        data={"stages": "kernel,toolkit,runtimes", "apt_lock_timeout": "7"},
    )
    assert run.error is None, run.error
    waits = [index for index, command in enumerate(run.commands) if "apt_lock_timeout" in command]
    assert len(waits) == 1
    assert (
        "lock_timeout=7\n" in run.commands[waits[0]]
        and "dpkg --force-confdef --force-confold --configure -a" in run.commands[waits[0]]
    )
    assert waits[0] < first_change_index(run.commands)
    assert any("-o DPkg::Lock::Timeout=7" in command for command in run.commands if "apt-get" in command)


def test_no_wait_when_the_package_manager_is_idle_or_no_package_stage_runs():
    idle = run_deploy(debian(), data={"stages": "kernel,toolkit,runtimes"})
    assert idle.error is None, idle.error
    assert not [command for command in idle.commands if "apt_lock_timeout" in command]
    verify_only = run_deploy(
        debian((PackageManagerState, (FIXTURES / "dpkg-lock-held.txt").read_text())), data={"stages": "kernel"}
    )
    assert verify_only.error is None, verify_only.error
    assert not [command for command in verify_only.commands if "apt_lock_timeout" in command]


@pytest.mark.parametrize(
    "data",
    [
        {"stages": "driver"},
        {"stages": "toolkit"},
        {"stages": "runtimes"},
        {"stages": "runtimes", "container_runtimes": "docker"},
    ],
    ids=["driver", "toolkit", "containerd", "docker"],
)
def test_each_stage_that_installs_waits_alone_for_a_held_lock_before_its_first_change(data):
    """Each stage that installs packages (deploy/stages.py: installs), run alone on a node whose dpkg
    lock another process holds: its first operation is still the bounded wait (Docker installed, its
    daemon.json to wire: the wait comes first whether or not this run installs a package)."""
    from test_containerd_plan import DOCKER, DOCKER_20
    from test_driver_plans import DEBIAN_FILES

    run = run_deploy(
        debian(
            (PackageManagerState, (FIXTURES / "dpkg-lock-held.txt").read_text()), *DEBIAN_FILES, (DOCKER, DOCKER_20)
        ),
        data={**data, "apt_lock_timeout": "7"},
    )
    assert run.error is None, run.error
    waits = [index for index, command in enumerate(run.commands) if "apt_lock_timeout" in command]
    assert len(waits) == 1 and "lock_timeout=7\n" in run.commands[waits[0]]
    assert run.op_names()[0] == "Preflight | Wait for other package managers and finish interrupted dpkg runs"
