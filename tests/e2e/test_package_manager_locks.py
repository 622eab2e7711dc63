"""
A busy package manager on the dnf, zypper and pacman nodes (tests/family_images.py,
tests/family_zypper.py, tests/family_pacman.py: the real dnf 4.14, zypper 1.14 and pacman 6.0.2):
another process holds the manager's lock when the toolkit stage installs. The run waits up to
``apt_lock_timeout`` for it; a holder that lets go in time is waited for and the install goes on,
one that does not fails the run in one line naming it (for dnf and pacman gpu-node's own line, for
zypper zypper's, after ZYPP_LOCK_TIMEOUT).

The holder is the real manager refreshing from a stalled mirror: an HTTP server on 127.0.0.1 that
answers nothing until the test releases it, then 404, so the holder fails and lets go (dnf holds its
metadata lock, zypper libzypp's /run/zypp.pid, pacman /var/lib/pacman/db.lck). The packages are
STAND-IN toolkit packages (tests/standin_rpms.py, tests/family_pacman.py) from local signed
repositories. The toolkit's repository file and its checked key are put in place first, as the run
writes them, so the run installs at once (the repository check's own wait is deploy/distros/package_managers.py
``repository_check``).
The driver stage on the dnf and zypper nodes meets the holder already in preflight's read (the
versions the manager offers, read after the same bounded wait): the run fails before any change.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from dataclasses import dataclass

import family_pacman
import pytest
import rpm_repo
import standin_rpms
from apt_repo import GpgKey, make_key, serve, serve_keys
from family_images import ROCKY9_DNF, family_node, rpm_installed
from family_zypper import LEAP156_ZYPPER
from harness import SAFE_DATA, ensure_docker, wait_for
from standin_toolkit import unfetched_keys

from deploy.distros.families import detect_platform
from deploy.settings import parse_settings
from deploy.tasks.toolkit import REPOSITORY_NAME, TOOLKIT_PACKAGES, rpm_repo_text

SHORT = 3  # apt_lock_timeout when the holder stays
LONG = 60  # apt_lock_timeout when the holder lets go after RELEASE_AFTER seconds
RELEASE_AFTER = 5
FEW_SECONDS = 10  # pyinfra's own start, connection and preflight on a busy test machine (about 1 s idle)
# the lock file names the holder started last (not one before it)
HOLDS = 'pid=$(cat /tmp/holder.pid) && [ -n "$pid" ] && [ "$(cat {lock})" = "$pid" ]'
ARCH_TOOLKIT = ("libnvidia-container", "nvidia-container-toolkit")


class StalledMirror:
    """An HTTP server on 127.0.0.1 that holds every request (GET, HEAD) until ``release``, then answers 404."""

    def __init__(self):
        released = self.released = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                released.wait(120)
                self.send_error(404)

            do_HEAD = do_GET  # zypper asks with HEAD first

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self):
        self.released.set()

    def close(self):
        self.release()
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def stalled_mirror():
    mirror = StalledMirror()
    try:
        yield mirror
    finally:
        mirror.close()


@dataclass
class RpmToolkit:
    url: str  # the repository, over http
    key_url: str  # its key, over https
    key: GpgKey


@pytest.fixture(scope="module")
def rpm_toolkit(tmp_path_factory):
    """The STAND-IN toolkit rpms in a signed rpm-md repository (repomd.xml.asc), served."""
    ensure_docker()
    root = tmp_path_factory.mktemp("toolkit-rpms")
    key = make_key(root.parent / f"{root.name}-gnupg", "standin-toolkit-rpm")
    key.stop_agent()
    repo_dir = root / "stable" / "rpm" / standin_rpms.ARCH
    standin_rpms.build(standin_rpms.toolkit_packages(standin_rpms.TOOLKIT_VERSIONS[0]), repo_dir, key)
    rpm_repo.index(repo_dir, key)
    (root / "stable" / "gpgkey").write_text(key.armored_public_key())
    with serve(root) as url, serve_keys(root) as keys_url:
        yield RpmToolkit(f"{url}/stable", f"{keys_url}/stable/gpgkey", key)


@pytest.fixture(scope="module")
def arch_repos(tmp_path_factory):
    ensure_docker()
    with family_pacman.served(tmp_path_factory.mktemp("arch-repos") / "root") as served:
        yield served


def toolkit_data(toolkit: RpmToolkit | None, lock_timeout: int) -> dict:
    data = {"stages": "toolkit", "apt_lock_timeout": str(lock_timeout)}
    if toolkit:
        data.update(
            {
                "nvidia_toolkit_repo_url": toolkit.url,
                "nvidia_toolkit_gpgkey_url": toolkit.key_url,
                "nvidia_toolkit_gpgkey_fingerprint": toolkit.key.fingerprint,
                "allow_insecure_repositories": "true",
            }
        )  # http:// on 127.0.0.1; signatures are checked
    return data


def put_repository_file(node, toolkit: RpmToolkit, distro_id: str, version_id: str) -> None:
    """The toolkit's repository file and its checked key as the run writes them, the key imported into
    rpm's database: the run finds them in place."""
    settings = parse_settings({**SAFE_DATA, **toolkit_data(toolkit, LONG)})
    platform = detect_platform(
        {
            "name": distro_id,
            "major": int(version_id.split(".")[0]),
            "release_meta": {"ID": distro_id, "VERSION_ID": version_id},
        },
        "x86_64",
    )
    manager = platform.family.package_manager
    key_file = manager.key_file.format(name=REPOSITORY_NAME)
    node.write(key_file, toolkit.key.armored_public_key())
    node.sh(f"rpm --import {key_file}")
    node.write(manager.repository_file.format(name=REPOSITORY_NAME), rpm_repo_text(settings, platform))


def start_holder(node, command: str, held: str) -> str:
    """``command`` run in the background on the node; its pid, once ``held`` (shell) says it holds the lock
    (the lock file names this holder, not the one before it)."""
    node.sh(f"rm -f /tmp/holder.pid; (setsid sh -c 'echo $$ >/tmp/holder.pid; exec {command}' >/tmp/holder.log 2>&1 &)")
    wait_for(lambda: node.sh(held, check=False).returncode == 0, timeout=30, what="the holder to take the lock")
    return node.sh("cat /tmp/holder.pid").stdout.strip()


def timed_deploy(node, data: dict):
    started = time.monotonic()
    result = node.deploy(data=data, json_output=False)
    return result, time.monotonic() - started


def run_both_ways(node, manager_holder, url, busy_lines, installed, packages):
    """The holder stays past SHORT: the run fails naming it, nothing installed; then a holder that
    lets go after RELEASE_AFTER with LONG: the run waits and installs ``packages``."""
    with stalled_mirror() as mirror:
        command, held = manager_holder(mirror.url)
        pid = start_holder(node, command, held)
        busy, took = timed_deploy(node, toolkit_data(url, SHORT))
        assert busy.returncode != 0, busy.explain()
        for line in busy_lines(pid, command):
            assert line in busy.output, busy.explain()
        assert "Traceback" not in busy.output
        assert took >= SHORT
        assert installed() == {}
    with stalled_mirror() as mirror:
        command, held = manager_holder(mirror.url)
        start_holder(node, command, held)
        timer = threading.Timer(RELEASE_AFTER, mirror.release)
        timer.start()
        try:
            waited, took = timed_deploy(node, toolkit_data(url, LONG))
        finally:
            timer.cancel()
        assert waited.returncode == 0, waited.explain()
        assert took >= RELEASE_AFTER
        assert set(installed()) == set(packages)


def gpu_node_lines(lock: str):
    """gpu-node's one line for a lock held past SHORT, naming the holder's pid and command."""
    return lambda pid, command: [
        f"gpu-node: the package manager is busy: after waiting {SHORT} s (apt_lock_timeout), "
        f"{lock} is held by process {pid} (",
        f"{command}): run again once it is done",
    ]


def test_dnf_standin_toolkit_waits_for_a_dnf_holding_its_lock_and_fails_naming_one_that_stays(rpm_toolkit):
    """STAND-IN toolkit rpms, real dnf: a `dnf makecache` stalled on a mirror holds dnf's metadata lock."""
    node = family_node(ROCKY9_DNF).start()
    try:
        put_repository_file(node, rpm_toolkit, "rocky", "9.3")

        def holder(mirror_url):
            node.write("/tmp/stalled/stalled.repo", f"[stalled]\nname=stalled\nbaseurl={mirror_url}\ngpgcheck=0\n")
            return (
                "dnf -q --setopt=reposdir=/tmp/stalled --setopt=retries=0 makecache",
                HOLDS.format(lock="/var/cache/dnf/metadata_lock.pid"),
            )

        run_both_ways(
            node,
            holder,
            rpm_toolkit,
            gpu_node_lines("/var/cache/dnf/metadata_lock.pid"),
            lambda: rpm_installed(node, TOOLKIT_PACKAGES),
            TOOLKIT_PACKAGES,
        )
    finally:
        node.remove()


def test_zypper_standin_toolkit_waits_for_a_zypper_holding_its_lock_and_fails_naming_one_that_stays(rpm_toolkit):
    """STAND-IN toolkit rpms, real zypper: a `zypper refresh` stalled on a mirror holds libzypp's lock;
    zypper waits ZYPP_LOCK_TIMEOUT and names the holder itself."""
    node = family_node(LEAP156_ZYPPER).start()
    try:
        put_repository_file(node, rpm_toolkit, "opensuse-leap", "15.6")

        def holder(mirror_url):
            node.write(
                "/tmp/stalled/stalled.repo",
                f"[stalled]\nname=stalled\nbaseurl={mirror_url}\nenabled=1\nautorefresh=1\ngpgcheck=0\n",
            )
            return ("zypper --non-interactive --reposd-dir /tmp/stalled refresh", HOLDS.format(lock="/run/zypp.pid"))

        run_both_ways(
            node,
            holder,
            rpm_toolkit,
            lambda pid, command: [f"System management is locked by the application with pid {pid} (zypper)."],
            lambda: rpm_installed(node, TOOLKIT_PACKAGES),
            TOOLKIT_PACKAGES,
        )
    finally:
        node.remove()


def test_pacman_standin_toolkit_waits_for_a_pacman_holding_its_lock_and_fails_naming_one_that_stays(arch_repos):
    """STAND-IN Arch toolkit packages, real pacman (which fails at once on a held lock): a `pacman -Sy`
    stalled on a mirror holds /var/lib/pacman/db.lck."""
    node = family_pacman.arch_node().start()
    try:
        arch_repos.node_setup(node)

        def holder(mirror_url):
            node.sh(f"sed 's#^Include = .*#Server = {mirror_url}/$repo#' /etc/pacman.conf > /tmp/stalled.conf")
            return "pacman --config /tmp/stalled.conf -Sy", "test -e /var/lib/pacman/db.lck"

        def installed():
            out = node.sh("pacman -Q " + " ".join(ARCH_TOOLKIT), check=False).stdout
            return dict(line.split() for line in out.splitlines())

        run_both_ways(node, holder, None, gpu_node_lines("/var/lib/pacman/db.lck"), installed, ARCH_TOOLKIT)
    finally:
        node.remove()


def assert_driver_stage_fails_in_preflight(node, repository: str, command: str, lock: str, settings) -> None:
    """The driver stage run while ``command`` (a manager refreshing the repository file ``repository``,
    which names the stalled mirror as {url}) holds ``lock`` for longer than the run may take: the run
    fails in gpu-node's one line naming the holder, within apt_lock_timeout and a few seconds.
    ``settings(url)``: the run's settings with the mirror's URL."""
    with stalled_mirror() as mirror:
        node.write("/tmp/stalled/stalled.repo", repository.format(url=mirror.url))
        pid = start_holder(node, command, HOLDS.format(lock=lock))
        busy, took = timed_deploy(
            node,
            {
                "stages": "driver",
                "apt_lock_timeout": str(SHORT),
                "allow_insecure_repositories": "true",
                **settings(mirror.url),
            },
        )
        still_held = node.sh(HOLDS.format(lock=lock), check=False).returncode == 0
    assert busy.returncode != 0, busy.explain()
    failures = sorted(
        {line[line.index("gpu-node: ") :] for line in busy.run_output.splitlines() if "gpu-node: " in line}
    )
    assert len(failures) == 1, busy.explain()
    for part in gpu_node_lines(lock)(pid, command):
        assert part in failures[0], busy.explain()
    assert "Traceback" not in busy.output
    assert still_held  # the holder did not let go: the run gave up on its own
    assert SHORT <= took <= SHORT + FEW_SECONDS, took


def test_dnf_driver_stage_fails_in_preflight_naming_a_dnf_that_holds_its_lock_past_the_timeout():
    """Real dnf, no package installed: a `dnf makecache` stalled on a mirror holds dnf's metadata
    lock; the driver stage's preflight reads what dnf offers after the bounded wait, so the run fails
    before any change: no repository added, no module stream enabled."""
    node = family_node(ROCKY9_DNF).start()
    try:
        assert_driver_stage_fails_in_preflight(
            node,
            "[stalled]\nname=stalled\nbaseurl={url}\ngpgcheck=0\n",
            "dnf -q --setopt=reposdir=/tmp/stalled --setopt=retries=0 makecache",
            "/var/cache/dnf/metadata_lock.pid",
            lambda url: {"nvidia_driver_branch": "550", "nvidia_cuda_repo_url": url, **unfetched_keys()},
        )
        assert node.sh("ls /etc/yum.repos.d /etc/dnf/modules.d").stdout.split() == [
            "/etc/dnf/modules.d:",
            "/etc/yum.repos.d:",
        ]
    finally:
        node.remove()


def test_zypper_driver_stage_fails_in_preflight_naming_a_zypper_that_holds_its_lock_past_the_timeout():
    """Real zypper, no package installed: a `zypper refresh` stalled on a mirror holds libzypp's lock;
    the driver stage's preflight reads what zypper offers after the bounded wait (zypper alone would
    give up at once and read as offering nothing), so the run fails before any change: no
    repository added."""
    node = family_node(LEAP156_ZYPPER).start()
    try:
        repositories = node.sh("ls /etc/zypp/repos.d").stdout.split()
        assert_driver_stage_fails_in_preflight(
            node,
            "[stalled]\nname=stalled\nbaseurl={url}\nenabled=1\nautorefresh=1\ngpgcheck=0\n",
            "zypper --non-interactive --reposd-dir /tmp/stalled refresh",
            "/run/zypp.pid",
            lambda url: {"nvidia_driver_repo_url": url, "nvidia_cuda_repo_url": url, **unfetched_keys()},
        )
        assert node.sh("ls /etc/zypp/repos.d").stdout.split() == repositories
    finally:
        node.remove()
