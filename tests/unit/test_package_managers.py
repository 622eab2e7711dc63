"""
The non-apt package managers' facts and commands: zypper's locks and offered versions as the real
zypper 1.14 writes them (fixtures from the Leap 15.6 node image, tests/family_zypper.py), the prefix
pin of a SUSE kernel module package, and the wait for a busy manager's lock (settings.apt_lock_timeout):
zypper's own ZYPP_LOCK_TIMEOUT, a bounded wait before dnf and pacman. The waits' behaviour on real
managers: tests/e2e/test_package_manager_locks.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from plan import DEFAULT, PCI_WITH_GPU, SITE_DRIVER_KEY, every, gpu_node, node_lines, run_deploy, run_plan, settings_for
from pyinfra.api import StringCommand
from pyinfra.api.exceptions import PyinfraError
from test_toolkit_plan import platform

from deploy.distros.package_managers import (
    APT,
    DNF,
    PACMAN,
    ZYPPER,
    lock_bounded_checks,
    repository_check,
    version_listing,
)
from deploy.distros.repositories import KeyPin, add_repository
from deploy.facts.packages import (
    MANAGER_ERROR,
    DnfModuleStreams,
    MultiversionPackages,
    PackageVersions,
    RpmPackageStates,
    WaitedPackageVersions,
    ZypperLocks,
)
from deploy.operations.package_manager import BUSY, ZYPP_LOCK
from deploy.operations.packages import _rpm_version_matches
from deploy.tasks.toolkit import toolkit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packages"
KMP = "nvidia-driver-G06-kmp-default"
USERSPACE = ("nvidia-compute-G06", "nvidia-compute-utils-G06")
# a command that runs dnf (not a path with dnf in it)
RUNS_DNF = re.compile(r"(^|[;&|(]\s*)dnf\s")
# preflight's one command runs each read in a background subshell of its own, ended so
# (deploy/facts/read_ahead.py CombinedOutput)
READ_SECTION_END = "</dev/null &"
ROCKY_KERNEL = "5.14.0-362.8.1.el9_3.x86_64"
MANAGERS = {manager.name: manager for manager in (APT, DNF, ZYPPER, PACMAN)}


def lock_wait_script(manager: str, lock_timeout: int) -> str:
    """The named manager's bounded wait for its lock (its LockWait in the family table)."""
    return MANAGERS[manager].lock.script(lock_timeout)


def lock_bounded(manager: str, commands, lock_timeout: int):
    return MANAGERS[manager].lock.bounded(commands, lock_timeout)


def dnf_runs_without_the_wait(commands: list[str], wait: str) -> list[str]:
    """The dnf runs in ``commands`` (in the order they ran) that neither follow the wait (an earlier
    command) nor carry it (before them in the same command, in the same read of preflight's)."""
    found = []
    for index, command in enumerate(commands):
        for match in RUNS_DNF.finditer(command):
            start = match.end() - len("dnf ")
            section = command[:start].rsplit(READ_SECTION_END, 1)[-1]
            if wait not in commands[:index] and wait not in section:
                found.append(command[start : start + 80])
    return found


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
    """The family table hands the fact its manager's listing: zypper's bounded by the lock wait, pacman none."""
    assert str(PackageVersions().command(version_listing(ZYPPER, 0), [KMP])).startswith(
        "ZYPP_LOCK_TIMEOUT=0 zypper --quiet"
    )
    assert str(PackageVersions().command(version_listing(ZYPPER, 9), [KMP])).startswith("ZYPP_LOCK_TIMEOUT=9 zypper")
    assert str(PackageVersions().command(version_listing(APT, 9), [KMP])).startswith("apt-cache madison ")
    assert str(PackageVersions().command(version_listing(PACMAN, 9), ["nvidia-utils"])) == "true"


@pytest.mark.parametrize(
    ("installed", "wanted", "matches"),
    [
        ("550.54.15-lp156.1.1", "550.54.15", True),
        ("550.54.15_k6.4.0_150600.21-lp156.1.1", "550.54.15", True),  # the KMP of driver 550.54.15
        ("550.54.15_k6.4.0_150600.21-lp156.1.1", "550.54.15_k6.4.0_150600.21-lp156.1.1", True),
        ("550.54.150-1", "550.54.15", False),
        ("550.90.07_k6.4.0_150600.21-lp156.1.1", "550.54.15", False),
        ("3:550.54.15-1.el9", "3:550.54.15", True),
    ],
)
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
    assert '[ "$slept" -ge 7 ]' in script and "after waiting 7 s (apt_lock_timeout)" in script
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0


def test_the_wait_for_a_lock_held_throughout_lasts_the_whole_timeout_then_names_the_holder(tmp_path):
    """Run for real here: zypper's lock file (pointed at a temporary one) names this test's own live
    process, so the lock stays held: the wait gives up after no less than the timeout, naming the lock
    and the holder. A deadline in whole seconds of the clock gave up early when the holder check took
    long enough for a second to turn over between checks (up to a second, under a line that says how
    long it waited); a `date` stand-in on PATH whose seconds turn over at every call shows it."""
    lock = tmp_path / "zypp.pid"
    lock.write_text(f"{os.getpid()}\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "date").write_text(
        f"#!/bin/sh\nn=$(cat {tmp_path}/calls 2>/dev/null || echo 0)\n"
        f"echo $((n + 1)) > {tmp_path}/calls\necho $((1000 + 2 * n))\n"
    )
    (tmp_path / "bin" / "date").chmod(0o755)
    script = lock_wait_script("zypper", 2)
    assert script.count(ZYPP_LOCK) == 2
    started = time.monotonic()
    done = subprocess.run(
        ["sh", "-c", script.replace(ZYPP_LOCK, str(lock)) + "; echo passed"],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
    )
    took = time.monotonic() - started
    assert done.returncode == 1 and "passed" not in done.stdout, done
    assert done.stderr.startswith(
        f"gpu-node: the package manager is busy: after waiting 2 s (apt_lock_timeout), "
        f"{lock} is held by process {os.getpid()} ("
    ), done.stderr
    assert took >= 2, took


def test_the_wait_passes_at_once_when_no_lock_is_held():
    """Run for real here: no dnf or pacman lock on this machine's paths means no wait."""
    for manager in ("dnf", "pacman"):
        done = subprocess.run(
            ["sh", "-c", lock_wait_script(manager, 5) + "; echo passed"], capture_output=True, text=True, timeout=20
        )
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
    run = run_deploy(
        gpu_node(
            "opensuse-leap-15.5",
            node_survey=node_lines("5.14.21-150500.55.39-default"),
            facts=[
                (
                    (PackageVersions, {"listing": version_listing(ZYPPER, 120), "packages": sorted([*USERSPACE, KMP])}),
                    search,
                ),
            ],
            unstated=DEFAULT,
        ),
        data={"nvidia_driver_version": "550.54.15", "stages": "driver", **SITE_DRIVER_KEY},
    )
    assert run.error is None and not run.failed, run.refusal
    (install,) = run.ran("zypper --non-interactive install -y")
    assert f"{KMP}={kmp_edition}" in install.split()
    assert "nvidia-compute-G06=550.54.15-lp156.1.1" in install.split()


def test_leap_replaces_an_installed_kmp_in_the_pins_transaction_and_may_go_back_to_an_older_pin():
    """zypper installs a KMP (multiversion(kernel)) beside its installed version, whose files then
    conflict: the installed one is removed in the same transaction (``-name=edition``, after ``--``);
    --oldpackage lets a pin go back to an older version (tests/e2e/test_family_zypper.py: both ways
    on the real zypper)."""
    search = (FIXTURES / "zypper-search-g06.txt").read_text()
    kmp_edition = next(
        version for version in PackageVersions().process(search.splitlines())[KMP] if version.startswith("550.54.15_k")
    )
    newer = "550.90.07_k5.14.21_150500.55.39-lp155.1.1"
    run = run_deploy(
        gpu_node(
            "opensuse-leap-15.5",
            node_survey=node_lines("5.14.21-150500.55.39-default"),
            facts=[
                (
                    (PackageVersions, {"listing": version_listing(ZYPPER, 120), "packages": sorted([*USERSPACE, KMP])}),
                    search,
                ),
                (every(RpmPackageStates), [f"installed {KMP} {newer}"]),
                ((MultiversionPackages, {}), [f"{KMP} {newer}"]),
            ],
            unstated=DEFAULT,
        ),
        data={"nvidia_driver_version": "550.54.15", "stages": "driver", **SITE_DRIVER_KEY},
    )
    assert run.error is None and not run.failed, run.refusal
    (install,) = run.ran("zypper --non-interactive install -y")
    words = install.split()
    assert words[words.index("-y") + 1 : words.index("-y") + 3] == ["--oldpackage", "--"], install
    assert f"-{KMP}={newer}" in words and f"{KMP}={kmp_edition}" in words, install


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
        first_dnf = RUNS_DNF.search(command).start()
        assert f"({wait};" in command[: first_dnf + 1] or wait in plan.commands[:index], command


def test_the_toolkit_stages_repository_check_waits_for_a_busy_manager():
    settings = settings_for()
    for distro_id, manager in (("rocky", DNF), ("opensuse-leap", ZYPPER)):
        plan = run_plan(toolkit, settings, platform(distro_id), unstated=DEFAULT)
        candidate = '"$stage/candidate.repo"'  # the repository file naming the checked key (download.py)
        (check,) = plan.matching(f'cp {candidate} "$tmp/candidate.repo"')
        assert repository_check(manager, settings.apt_lock_timeout).format(candidate=candidate) in check


def test_no_key_is_imported_on_zyppers_say_so_only_the_checked_one_by_rpm():
    """zypper's --gpg-auto-import-keys imports whatever key any repository of the node offers: the
    check, refresh and install run without it; the repository's own key goes in through rpm --import
    of its checked copy (deploy/operations/download.py)."""
    plan = run_plan(
        toolkit, settings_for(nvidia_toolkit_version="1.17.8-1"), platform("opensuse-leap"), unstated=DEFAULT
    )
    assert [command for command in plan.commands if "zypper" in command]
    assert not plan.ran("auto-import"), plan.commands
    (added,) = plan.matching("rpm --import")
    assert added.index("for fingerprint in $served") < added.index('rpm --import "$stage/keyring.asc"')


def test_dnfs_versionlocks_are_read_from_its_lock_list_as_versionlock_list_prints_them():
    """The lock list's lines without its comments, as ``dnf versionlock list`` prints them, read
    without dnf: that command loads the repositories, so waits for a busy dnf."""
    command = str(RpmPackageStates().command(["nvidia-container-toolkit"]))
    assert not RUNS_DNF.search(command) and "/etc/dnf/plugins/versionlock.conf" in command
    states = RpmPackageStates().process(
        [
            "installed nvidia-container-toolkit 1.17.8-1",
            "installed libnvidia-container1 1.17.8-1",
            "lock ",
            "lock   nvidia-container-toolkit-0:1.17.8-1.*  ",
            "lock !libnvidia-container1-0:1.17.8-1.*",
        ]
    )
    assert states == {
        "nvidia-container-toolkit": {"version": "1.17.8-1", "held": True},
        "libnvidia-container1": {"version": "1.17.8-1", "held": False},
    }


def test_the_driver_stage_runs_dnf_only_after_a_bounded_wait_for_its_locks():
    """The RHEL family's driver stage with a module stream: every dnf command, preflight's read ahead
    and the operations' fact reads included, follows the bounded wait or carries it, and the module
    stream is enabled by a command after its own wait. tests/e2e/test_package_manager_locks.py found
    preflight's `dnf list --showduplicates` and pyinfra's dnf.module (its `dnf module list --enabled`)
    waiting first, without end."""
    settings = settings_for(apt_lock_timeout=17)
    run = run_deploy(
        gpu_node("rocky-9", node_survey=node_lines(ROCKY_KERNEL, pci=PCI_WITH_GPU), unstated=DEFAULT),
        data={
            "stages": "driver",
            "apt_lock_timeout": "17",
            "nvidia_driver_branch": "550",
            "nvidia_driver_version": "550.54.15",
        },
    )
    assert run.error is None and not run.failed, run.refusal
    wait = lock_wait_script("dnf", settings.apt_lock_timeout)
    commands = run.commands
    (preflight,) = [command for command in commands if "dnf -q list --showduplicates" in command]
    (module,) = [index for index, command in enumerate(commands) if command.startswith("dnf module enable -y")]
    assert commands[module] == "dnf module enable -y nvidia-driver:550-dkms" and commands[module - 1] == wait
    assert (
        "dnf install -y nvidia-driver-550.54.15 nvidia-driver-cuda-550.54.15 kmod-nvidia-latest-dkms-550.54.15"
        in commands
    )
    # the kernel headers' availability: read ahead by preflight, and again by their install operation
    assert len([command for command in commands if "dnf -q list kernel-devel-" in command]) == 2, commands
    assert dnf_runs_without_the_wait(commands, wait) == []


def test_dnf_runs_without_the_wait_finds_a_read_before_it_and_a_read_beside_it():
    """The test above's judge: a read in a section of its own, apart from the wait's section, is found."""
    wait = lock_wait_script("dnf", 5)
    combined = (
        f"( {wait}; dnf -q list a ) >x 2>/dev/null </dev/null & ( dnf -q list b ) >y 2>/dev/null </dev/null & wait"
    )
    assert dnf_runs_without_the_wait([combined, wait, "dnf install -y c"], wait) == [
        "dnf -q list b ) >y 2>/dev/null </dev/null & wait"
    ]
    assert dnf_runs_without_the_wait(["dnf module list --enabled", wait], wait) == ["dnf module list --enabled"]


def test_a_dnf_busy_past_the_timeout_in_preflights_read_fails_the_host_in_the_waits_line_before_any_change():
    """The wait that gave up in preflight's dnf read: its one line is the host's refusal, and nothing
    runs after preflight's two reads (the node's, then the driver plan's): no wait again, no dnf."""
    line = BUSY.format(timeout=17, holders="/var/cache/dnf/metadata_lock.pid is held by process 42 (dnf makecache)")
    run = run_deploy(
        gpu_node(
            "rocky-9",
            node_survey=node_lines(ROCKY_KERNEL),
            unstated=DEFAULT,
            facts=[
                (every(WaitedPackageVersions), [f"busy gpu-node: {line}"]),
            ],
        ),
        data={"stages": "driver", "apt_lock_timeout": "17"},
    )
    assert run.failed and run.failures == [line]
    assert len(run.commands) == 2 and "dnf -q list --showduplicates" in run.commands[-1], run.commands


def test_a_zypper_busy_past_the_timeout_in_preflights_read_fails_the_host_in_the_waits_line_before_any_change():
    """zypper, without ZYPP_LOCK_TIMEOUT, gives up at once on a held lock and its search would read as
    offering nothing: preflight's read waits for it, bounded, as for dnf, and its line is the refusal.
    The search itself carries ZYPP_LOCK_TIMEOUT: a zypper that takes the lock after the wait is waited for."""
    line = BUSY.format(timeout=17, holders="/run/zypp.pid is held by process 42 (zypper refresh)")
    run = run_deploy(
        gpu_node(
            "opensuse-leap-15.5",
            node_survey=node_lines("5.14.21-150500.55.39-default"),
            facts=[
                (every(WaitedPackageVersions), [f"busy gpu-node: {line}"]),
            ],
            unstated=DEFAULT,
        ),
        data={"stages": "driver", "apt_lock_timeout": "17"},
    )
    assert run.failed and run.failures == [line]
    assert len(run.commands) == 2, run.commands
    read = run.commands[-1]
    assert "(" + lock_wait_script("zypper", 17) + ")" in read and "ZYPP_LOCK_TIMEOUT=17 zypper --quiet" in read


def test_dnfs_offered_versions_are_read_after_the_wait_or_its_line_when_it_gave_up():
    """Run for real here: the command's shell with a wait that passes and one that gives up (this
    machine has no dnf: its list prints nothing); dnf's own list (the Rocky node's, fixture) parsed."""
    dnf = version_listing(DNF, 0)
    passes, gives_up = (
        WaitedPackageVersions().command(["nvidia-driver"], wait="true", listing=dnf),
        WaitedPackageVersions().command(
            ["nvidia-driver"], wait="echo 'gpu-node: the package manager is busy: held' >&2; exit 1", listing=dnf
        ),
    )
    for command, lines in ((passes, []), (gives_up, ["busy gpu-node: the package manager is busy: held"])):
        done = subprocess.run(["sh", "-c", str(command)], capture_output=True, text=True, timeout=20)
        listing = [line for line in done.stdout.splitlines() if not line.startswith(MANAGER_ERROR)]
        assert done.returncode == 0 and listing == lines, done
        assert WaitedPackageVersions().process(done.stdout.splitlines())["unreadable"] == []
    # the manager's own error lines (here the shell's "dnf: not found") come marked, apart from its listing
    missing = subprocess.run(["sh", "-c", str(passes)], capture_output=True, text=True).stdout.splitlines()
    assert missing and all(line.startswith(MANAGER_ERROR) for line in missing) and "not found" in missing[-1]
    assert WaitedPackageVersions().process(lines) == {
        "versions": {},
        "busy": "the package manager is busy: held",
        "unreadable": [],
    }
    listed = (FIXTURES / "dnf-list-showduplicates.txt").read_text().splitlines()
    assert WaitedPackageVersions().process(listed) == {
        "versions": {
            "kernel-devel": ["5.14.0-362.8.1.el9_3"],
            "nvidia-driver": ["3:550.54.15-1.el9", "3:550.90.07-1.el9"],
        },
        "busy": None,
        "unreadable": [],
    }


@pytest.mark.parametrize(
    "fixture, manager, reason",
    [
        (
            "zypper-search-broken-repository.txt",
            "zypper",
            "Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server",
        ),
        (
            "dnf-list-broken-repository.txt",
            "dnf",
            "Cannot download repomd.xml: Cannot download repodata/repomd.xml: All mirrors were tried",
        ),
    ],
)
def test_a_repository_the_manager_cannot_read_is_named_with_its_reason(fixture, manager, reason):
    """What the real zypper 1.14 (Leap node) and dnf 4.14 (Rocky 9 node) answered to this fact's own
    command with a repository 'mirror' on a closed port: zypper skipped it and listed the rest, dnf
    listed nothing. Both name it, with the manager's reason; no version is made up from their lines."""
    lines = (FIXTURES / fixture).read_text().splitlines()
    assert any(line.startswith(MANAGER_ERROR) for line in lines)
    assert WaitedPackageVersions().process(lines) == {
        "versions": {},
        "busy": None,
        "unreadable": [f"repository 'mirror' ({reason})"],
    }
    # the manager's benign answers are not problems: nothing matched, and a healthy listing
    assert WaitedPackageVersions().process([f"{MANAGER_ERROR}Error: No matching Packages to list"])["unreadable"] == []
    assert (
        WaitedPackageVersions().process((FIXTURES / "zypper-search-g06.txt").read_text().splitlines())["unreadable"]
        == []
    )


def test_dnfs_enabled_module_streams_are_read_from_its_module_state_files_without_dnf():
    """dnf's /etc/dnf/modules.d files as the real dnf 4.14 wrote them on the Rocky node: after
    `module enable nvidia-driver:550-dkms`, `module reset` and `module disable`."""
    assert not RUNS_DNF.search(DnfModuleStreams().command())
    enabled = (FIXTURES / "dnf-module-enabled.module").read_text().splitlines()
    assert DnfModuleStreams().process(enabled) == {"nvidia-driver": "550-dkms"}
    for state in ("reset", "disabled"):
        assert DnfModuleStreams().process((FIXTURES / f"dnf-module-{state}.module").read_text().splitlines()) == {}
    other = ["[nodejs]", "name=nodejs", "stream=20", "profiles=", "state=enabled"]
    assert DnfModuleStreams().process([*enabled, *other]) == {"nvidia-driver": "550-dkms", "nodejs": "20"}


def test_an_enabled_module_stream_is_left_alone():
    """The stream enabled already (dnf's module state file, as dnf wrote it): no dnf command for it."""
    run = run_deploy(
        gpu_node(
            "rocky-9",
            node_survey=node_lines(ROCKY_KERNEL),
            unstated=DEFAULT,
            facts=[
                (DnfModuleStreams, (FIXTURES / "dnf-module-enabled.module").read_text()),
            ],
        ),
        data={"stages": "driver", "nvidia_driver_branch": "550"},
    )
    assert run.error is None and not run.failed, run.refusal
    assert not run.ran("dnf module")
    assert (
        "dnf module enable -y nvidia-driver:550-dkms"
        in run_deploy(
            gpu_node("rocky-9", node_survey=node_lines(ROCKY_KERNEL), unstated=DEFAULT),
            data={"stages": "driver", "nvidia_driver_branch": "550"},
        ).commands
    )


def test_only_dnfs_availability_check_waits_for_its_lock():
    check = lock_bounded_checks(DNF, 9).available_check
    assert check.format(package="x").startswith("(" + lock_wait_script("dnf", 9) + "; dnf -q list x")
    assert subprocess.run(["sh", "-n", "-c", check.format(package="x")]).returncode == 0
    for manager in (ZYPPER, PACMAN):
        assert lock_bounded_checks(manager, 9) is manager


@pytest.mark.parametrize("manager", [APT, PACMAN, replace(DNF, repository_check=None)], ids=lambda m: m.name)
def test_add_repository_refuses_a_manager_that_cannot_check_the_repository_it_adds(manager):
    # (a dnf without its repository check would stage the repository unchecked, or trace back)
    repository = {"name": "vendor", "baseurl": "https://example.invalid/repo", "gpgkey": "https://example.invalid/key"}
    with pytest.raises(PyinfraError, match=f"^{manager.name} takes no repository of this kind: vendor$"):
        add_repository(
            manager, "Add vendor", repository, KeyPin(("A" * 40,), "vendor_fingerprint"), timeout=5, lock_timeout=5
        )
