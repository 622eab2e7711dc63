"""
The non-apt package managers' facts and commands: zypper's locks and offered versions as the real
zypper 1.14 writes them (fixtures from the Leap 15.6 node image, tests/family_zypper.py), the prefix
pin of a SUSE kernel module package, and the wait for a busy manager's lock (settings.apt_lock_timeout):
zypper's own ZYPP_LOCK_TIMEOUT, a bounded wait before dnf and pacman. The waits' behaviour on real
managers: tests/e2e/test_package_manager_locks.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import StringCommand

from deploy.distros import DNF, PACMAN, ZYPPER, repository_check
from deploy.facts.packages import PackageVersions, RpmPackageStates, ZypperLocks
from deploy.operations.packages import _rpm_version_matches, lock_bounded, lock_wait_script
from deploy.tasks.toolkit import toolkit
from test_toolkit_plan import platform
from plan import DEFAULT, gpu_node, node_lines, run_deploy, run_plan, settings_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packages"
KMP = "nvidia-driver-G06-kmp-default"
USERSPACE = ("nvidia-compute-G06", "nvidia-compute-utils-G06")
# a command that runs dnf (not a path with dnf in it)
RUNS_DNF = re.compile(r"(^|[;&|(]\s*)dnf\s")


def test_zypper_locks_are_read_from_its_locks_file_packages_only():
    """`zypper addlock nvidia-container-toolkit libnvidia-container1` and a pattern lock, as zypper wrote them."""
    lines = (FIXTURES / "zypp-locks.txt").read_text().splitlines()
    assert ZypperLocks().process(lines) == ["libnvidia-container1", "nvidia-container-toolkit"]
    assert ZypperLocks().process([]) == []


def test_zypper_offered_versions_are_read_from_its_search_table():
    lines = (FIXTURES / "zypper-search-g06.txt").read_text().splitlines()
    offered = PackageVersions().process(lines)
    assert set(offered) == {*USERSPACE, KMP}
    assert "550.54.15-lp156.1.1" in offered["nvidia-compute-G06"]
    assert "550.90.07-lp156.1.1" in offered["nvidia-compute-G06"]
    assert any(version.startswith("550.54.15_k") for version in offered[KMP])


def test_zypper_search_waits_for_libzypps_lock_only_when_asked():
    assert str(PackageVersions().command("zypper", [KMP])).startswith("ZYPP_LOCK_TIMEOUT=0 zypper --quiet")
    assert str(PackageVersions().command("zypper", [KMP], lock_timeout=9)).startswith("ZYPP_LOCK_TIMEOUT=9 zypper")
    assert str(PackageVersions().command("pacman", ["nvidia-utils"])) == "true"


@pytest.mark.parametrize(("installed", "wanted", "matches"), [
    ("550.54.15-lp156.1.1", "550.54.15", True),
    ("550.54.15_k6.4.0_150600.21-lp156.1.1", "550.54.15", True),  # the KMP of driver 550.54.15
    ("550.54.15_k6.4.0_150600.21-lp156.1.1", "550.54.15_k6.4.0_150600.21-lp156.1.1", True),
    ("550.54.150-1", "550.54.15", False),
    ("550.90.07_k6.4.0_150600.21-lp156.1.1", "550.54.15", False),
    ("3:550.54.15-1.el9", "3:550.54.15", True),
])
def test_an_rpm_pin_matches_its_releases_and_a_kmps_kernel_builds(installed, wanted, matches):
    assert _rpm_version_matches(installed, wanted) is matches


def test_zypper_commands_carry_zypps_own_lock_wait():
    commands = list(lock_bounded("zypper", ["zypper --non-interactive refresh"], 42))
    assert len(commands) == 1 and isinstance(commands[0], StringCommand)
    assert commands[0].connector_arguments["_env"] == {"ZYPP_LOCK_TIMEOUT": "42"}
    assert commands[0].get_raw_value() == "zypper --non-interactive refresh"


@pytest.mark.parametrize("manager", ["dnf", "pacman"])
def test_dnf_and_pacman_commands_follow_one_bounded_wait(manager):
    commands = [command.get_raw_value() for command in lock_bounded(manager, [f"{manager} a", f"{manager} b"], 7)]
    assert commands == [lock_wait_script(manager, 7), f"{manager} a", f"{manager} b"]
    script = lock_wait_script(manager, 7)
    assert "+ 7 ))" in script and "after waiting 7 s (apt_lock_timeout)" in script
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0


def test_the_wait_passes_at_once_when_no_lock_is_held():
    """Run for real here: no dnf or pacman lock on this machine's paths means no wait."""
    for manager in ("dnf", "pacman"):
        done = subprocess.run(["sh", "-c", lock_wait_script(manager, 5) + "; echo passed"],
                              capture_output=True, text=True, timeout=20)
        assert done.stdout.strip() == "passed" and done.returncode == 0, done.stderr


def test_repository_checks_wait_for_the_manager_and_keep_their_candidate():
    zypper = repository_check(ZYPPER, 11).format(candidate="/etc/zypp/repos.d/x.repo.candidate")
    assert zypper.startswith("(export ZYPP_LOCK_TIMEOUT=11;") and "--reposd-dir" in zypper
    dnf = repository_check(DNF, 11).format(candidate="/etc/yum.repos.d/x.repo.candidate")
    assert dnf.startswith("(" + lock_wait_script("dnf", 11)) and "makecache" in dnf
    for check in (zypper, dnf):
        assert check.endswith(")") and subprocess.run(["sh", "-n", "-c", check]).returncode == 0
    assert repository_check(PACMAN, 11) is None


def test_leap_pins_the_kmp_at_the_drivers_version_as_zypper_offers_it():
    """A pinned driver: its KMP is pinned too, at the offered edition of that driver version
    (the search read after the refresh, from the fixture)."""
    search = (FIXTURES / "zypper-search-g06.txt").read_text()
    offered = PackageVersions().process(search.splitlines())
    kmp_edition = next(version for version in offered[KMP] if version.startswith("550.54.15_k"))
    run = run_deploy(gpu_node("opensuse-leap-15.5", host_state=node_lines("5.14.21-150500.55.39-default"), facts=[
        ((PackageVersions, {"manager": "zypper", "packages": sorted([*USERSPACE, KMP]), "lock_timeout": 120}), search),
    ], unstated=DEFAULT), data={"nvidia_driver_version": "550.54.15", "stages": "driver"})
    assert run.error is None and not run.failed, run.refusal
    (install,) = run.ran("--gpg-auto-import-keys install -y")
    assert f"{KMP}={kmp_edition}" in install.split()
    assert "nvidia-compute-G06=550.54.15-lp156.1.1" in install.split()


def test_the_toolkit_stage_runs_dnf_only_after_a_bounded_wait_for_its_locks():
    """dnf waits without end for a busy dnf's lock: every dnf command, facts' reads included, follows
    the bounded wait or carries it (the repository check). tests/e2e/test_package_manager_locks.py
    found pyinfra's dnf.packages (its `dnf repoquery` fact) and `dnf versionlock list` waiting first."""
    settings = settings_for(nvidia_toolkit_version="1.17.8-1")
    plan = run_plan(toolkit, settings, platform("rocky"), unstated=DEFAULT)
    wait = lock_wait_script("dnf", settings.apt_lock_timeout)
    dnf_runs = [(index, command) for index, command in enumerate(plan.commands) if RUNS_DNF.search(command)]
    assert [command for _, command in dnf_runs if "dnf install -y" in command], plan.commands
    for index, command in dnf_runs:
        assert command.startswith(f"({wait};") or wait in plan.commands[:index], command


def test_the_toolkit_stages_repository_check_waits_for_a_busy_manager():
    settings = settings_for()
    for distro_id, manager in (("rocky", DNF), ("opensuse-leap", ZYPPER)):
        plan = run_plan(toolkit, settings, platform(distro_id), unstated=DEFAULT)
        candidate = manager.repository_file.format(name="nvidia-container-toolkit") + ".gpu-node-candidate"
        (check,) = plan.matching(f'cp {candidate} "$tmp/candidate.repo"')
        assert check.startswith(repository_check(manager, settings.apt_lock_timeout).format(candidate=candidate))


def test_dnfs_versionlocks_are_read_from_its_lock_list_as_versionlock_list_prints_them():
    """The lock list's lines without its comments, as ``dnf versionlock list`` prints them, read
    without dnf: that command loads the repositories, so waits for a busy dnf."""
    command = str(RpmPackageStates().command(["nvidia-container-toolkit"]))
    assert not RUNS_DNF.search(command) and "/etc/dnf/plugins/versionlock.conf" in command
    states = RpmPackageStates().process([
        "installed nvidia-container-toolkit 1.17.8-1", "installed libnvidia-container1 1.17.8-1",
        "lock ", "lock   nvidia-container-toolkit-0:1.17.8-1.*  ", "lock !libnvidia-container1-0:1.17.8-1.*",
    ])
    assert states == {"nvidia-container-toolkit": {"version": "1.17.8-1", "held": True},
                      "libnvidia-container1": {"version": "1.17.8-1", "held": False}}
