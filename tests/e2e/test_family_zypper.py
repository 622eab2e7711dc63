"""
The SUSE family run by its real package manager: an openSUSE Leap 15.6 node (tests/family_zypper.py:
Debian's zypper 1.14 with libzypp 17, rpm 4.18, Leap's os-release and zypp.conf lines) takes the
kernel, driver and toolkit stages through pyinfra's default mode and then with ``-y``, from local
signed repositories on 127.0.0.1 (tests/suse_repo.py) holding STAND-IN rpms under the real names:
NVIDIA's SUSE driver repository (nvidia-compute-G06, nvidia-compute-utils-G06, the KMPs
nvidia-driver-G06-kmp-default and nvidia-open-driver-G06-signed-kmp-default) and NVIDIA's toolkit
repository.

zypper, libzypp's signature checks (repo_gpgcheck on repomd.xml.asc, gpgcheck on the rpms) against the
keys rpm's database holds (each repository's own, checked against its pinned fingerprint and imported
by the deploy: zypper imports none) and its locks are real; the packages are
stand-ins (no driver is built or loaded). The runtimes stages are left out (SUSE's containerd comes
from openSUSE's repositories, which no local stand-in serves). The real hosts of the family's
repositories resolve to 127.0.0.1 on the node, so nothing leaves this machine whatever the deploy writes.
"""

from __future__ import annotations

import platform as machine

import pytest
import standin_rpms
import suse_repo
from family_images import family_node, rpm_installed
from family_rpm_more import installed_standin
from family_zypper import LEAP156_ZYPPER
from harness import SAFE_DATA, assert_no_change, ensure_docker
from standin_rpms import StandinRpm

from deploy.distros.families import detect_platform
from deploy.distros.package_managers import ZYPPER
from deploy.planning import driver_plan
from deploy.settings import parse_settings
from deploy.tasks.toolkit import REPOSITORY_NAME, TOOLKIT_PACKAGES

DRIVER_PACKAGES = ("nvidia-compute-G06", "nvidia-compute-utils-G06")
PINNED_DRIVER = suse_repo.DRIVER_VERSIONS[0]  # the older of the two published
PINNED_TOOLKIT = standin_rpms.TOOLKIT_VERSIONS[0]
NEWER_TOOLKIT = standin_rpms.TOOLKIT_VERSIONS[1]
TOOLKIT_REPO_FILE = f"/etc/zypp/repos.d/{REPOSITORY_NAME}.repo"
DRIVER_REPOSITORY = "nvidia-opensuse-leap"  # the family table's name, nvidia-{distro_id}
DRIVER_SETTING = "nvidia_driver_repo_url"  # the setting the driver's repository would follow (see needs_driver)
REAL_HOSTS = (
    "download.nvidia.com",
    "developer.download.nvidia.com",
    "nvidia.github.io",
    "download.opensuse.org",
    "cdn.opensuse.org",
    "mirrorcache.opensuse.org",
    "updates.suse.com",
    "scc.suse.com",
)


def driver_repository_follows(url: str, key_data: dict) -> bool:
    """Whether the driver stage's NVIDIA repository for Leap 15.6 is taken from a setting (DRIVER_SETTING)."""
    settings = parse_settings(
        {
            **SAFE_DATA,
            DRIVER_SETTING: url,
            "allow_insecure_repositories": "true",
            "nvidia_driver_version": PINNED_DRIVER,
            "nvidia_kernel_modules": "proprietary",
            **key_data,
        }
    )
    platform = detect_platform(
        {"name": "openSUSE Leap", "major": 15, "release_meta": {"ID": "opensuse-leap", "VERSION_ID": "15.6"}}, "x86_64"
    )
    plan = driver_plan.driver_plan(settings, platform, {"kernel": "6.4.0-150600.23.25-default", "gpus": []})
    return bool(plan.repository) and plan.repository["baseurl"].startswith(url)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    ensure_docker()
    # the container runs the machine's kernel: its variant's KMPs too, besides Leap's "default"
    variant = machine.release().rsplit("-", 1)[-1].lower()
    with suse_repo.served(tmp_path_factory.mktemp("suse-repos") / "root", variants=("default", variant)) as served:
        yield served


@pytest.fixture(scope="module")
def driver_stage(repos) -> bool:
    return driver_repository_follows(repos.url, repos.driver_key_data())


def needs_driver(driver_stage: bool) -> None:
    # Never run a deploy that would name NVIDIA's real host: fail instead.
    assert driver_stage, (
        f"the SUSE driver's NVIDIA repository does not follow {DRIVER_SETTING} (deploy/distros/families.py)"
    )


def settings_data(
    repos,
    driver_stage: bool,
    *,
    tampered: bool = False,
    stages: str | None = None,
    toolkit_version: str = PINNED_TOOLKIT,
    modules: str = "proprietary",
) -> dict:
    return {
        "stages": stages or ("kernel,driver,toolkit" if driver_stage else "kernel,toolkit"),
        DRIVER_SETTING: repos.url if not tampered else f"{repos.url}/{suse_repo.TAMPERED}",
        # keys over https, pinned to the stand-in repositories' own (NVIDIA publishes no fingerprint for
        # its SUSE repository's key: a site pins the one it checked)
        **repos.driver_key_data(tampered),
        "nvidia_driver_version": PINNED_DRIVER,
        "nvidia_kernel_modules": modules,
        "nvidia_toolkit_repo_url": repos.toolkit_url(tampered),
        **repos.toolkit_key_data(tampered),
        "nvidia_toolkit_version": toolkit_version,
        "allow_insecure_repositories": "true",  # http:// on 127.0.0.1; signatures are still checked
    }


def start_leap_node():
    node = family_node(LEAP156_ZYPPER).start()
    node.sh(f"printf '127.0.0.1 %s\\n' {' '.join(REAL_HOSTS)} >> /etc/hosts")
    return node


def locks(node) -> set[str]:
    """The names zypper's own `zypper locks` table lists."""
    rows = [line.split("|") for line in node.sh("zypper --non-interactive locks").stdout.splitlines()]
    return {cells[1].strip() for cells in rows if len(cells) >= 3 and cells[0].strip().isdigit()}


def imported_keys(node) -> list[str]:
    """The short ids of the keys rpm's database holds (rpm says "package gpg-pubkey is not installed" for none)."""
    out = node.sh("rpm -q gpg-pubkey --qf '%{VERSION}\\n'", check=False).stdout
    return [] if "not installed" in out else out.split()


@pytest.fixture(scope="module")
def deployed(repos, driver_stage):
    """One Leap 15.6 node after its first run, in pyinfra's default mode: (node, result, data)."""
    node = start_leap_node()
    try:
        data = settings_data(repos, driver_stage)
        yield node, node.deploy(data=data, default_mode=True, json_output=False), data
    finally:
        node.remove()


def test_leap156_zypper_standin_packages_first_run_in_default_mode_adds_repositories_with_signature_checks(
    deployed, repos, driver_stage
):
    """STAND-IN packages: the toolkit's repository checks its metadata's signature (zypper lists it
    with the repository check on) with the key the deploy checked against its pin and imported into
    rpm's database, whose checked copy the repository file names; zypper refreshes it as trusted
    without importing anything. The driver's repository checks its packages too."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    toolkit_repo = node.read(TOOLKIT_REPO_FILE)
    toolkit_key_file = ZYPPER.key_file.format(name=REPOSITORY_NAME)
    assert f"baseurl={repos.toolkit_url()}/rpm/$basearch\n" in toolkit_repo, toolkit_repo
    assert "repo_gpgcheck=1\n" in toolkit_repo and f"gpgkey=file://{toolkit_key_file}\n" in toolkit_repo
    assert node.read(toolkit_key_file) == repos.toolkit_key.armored_public_key()
    listed = node.sh("zypper --non-interactive repos --details").stdout
    row = next((line for line in listed.splitlines() if f"| {REPOSITORY_NAME} " in line), "")
    assert "(r" in row and "Yes" in row.split("|")[4], listed
    assert repos.toolkit_key.fingerprint[-8:].lower() in imported_keys(node)
    assert node.sh("zypper --non-interactive refresh --force", check=False).returncode == 0
    if driver_stage:
        driver_repo = node.read(f"/etc/zypp/repos.d/{DRIVER_REPOSITORY}.repo")
        driver_key_file = ZYPPER.key_file.format(name=DRIVER_REPOSITORY)
        assert f"baseurl={repos.driver_url()}\n" in driver_repo, driver_repo
        assert "gpgcheck=1\n" in driver_repo and f"gpgkey=file://{driver_key_file}\n" in driver_repo
        assert repos.driver_key.fingerprint[-8:].lower() in imported_keys(node)
    # rpm's database holds the keys the deploy checked, and no other
    assert sorted(imported_keys(node)) == sorted(
        key.fingerprint[-8:].lower()
        for key in ((repos.toolkit_key, repos.driver_key) if driver_stage else (repos.toolkit_key,))
    )


def test_leap156_zypper_standin_packages_toolkit_installed_at_its_pin_and_locked(deployed):
    """STAND-IN toolkit rpms: all four at the pinned 1.17.8-1 although 1.20.0-1 is offered, each
    held by a zypper lock; the installed nvidia-ctk answers with that version."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {name: PINNED_TOOLKIT for name in TOOLKIT_PACKAGES}
    assert set(TOOLKIT_PACKAGES) <= locks(node)
    ctk = node.sh("nvidia-ctk --version").stdout
    assert ctk.startswith(f"NVIDIA Container Toolkit CLI version {PINNED_TOOLKIT.split('-')[0]}"), ctk
    assert node.sh("rpm -q --qf '%{SUMMARY}' nvidia-container-toolkit").stdout.startswith("STAND-IN")


def test_leap156_zypper_standin_packages_driver_at_its_pin_with_the_proprietary_kmp_and_locked(deployed, driver_stage):
    """STAND-IN G06 driver rpms: nvidia-compute-G06 and nvidia-compute-utils-G06 at the pinned
    550.54.15 although 550.90.07 is offered, the proprietary KMP in and no open one, all locked;
    nvidia-persistenced (in nvidia-compute-utils-G06) enabled; the stand-in nvidia-smi exits 9 as on a
    node without a driver."""
    needs_driver(driver_stage)
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    release = f"{PINNED_DRIVER}-{suse_repo.RELEASE}"
    assert rpm_installed(node, DRIVER_PACKAGES) == {name: release for name in DRIVER_PACKAGES}
    assert list(rpm_installed(node, [suse_repo.PROPRIETARY_KMP, suse_repo.OPEN_KMP])) == [suse_repo.PROPRIETARY_KMP]
    assert {*DRIVER_PACKAGES, suse_repo.PROPRIETARY_KMP} <= locks(node)
    assert node.sh("systemctl is-enabled nvidia-persistenced", check=False).stdout.strip() == "enabled"
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode == 9 and f"STAND-IN {PINNED_DRIVER}" in smi.stderr, smi


def test_leap156_zypper_standin_packages_kmp_at_the_pinned_drivers_version(deployed, driver_stage):
    """STAND-IN KMP: the kernel module package is the pinned driver's, 550.54.15_k..., the only one
    installed (a KMP of another driver version does not load with 550.54.15's userspace)."""
    needs_driver(driver_stage)
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    versions = node.sh(f"rpm -q --qf '%{{VERSION}}\\n' {suse_repo.PROPRIETARY_KMP}").stdout.split()
    assert [version.split("_")[0] for version in versions] == [PINNED_DRIVER], versions


def test_leap156_zypper_standin_packages_stay_at_their_pins_through_a_plain_zypper_update(
    deployed, repos, driver_stage
):
    """STAND-IN packages: once a newer toolkit (1.20.1-1) and driver (550.127.05) are published,
    the node's own `zypper refresh` and `zypper update` see them and leave the locked packages."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    repos.publish_toolkit(standin_rpms.TOOLKIT_UPDATE)
    names = list(TOOLKIT_PACKAGES)
    if driver_stage:
        repos.publish_driver(suse_repo.DRIVER_UPDATE)
        names += DRIVER_PACKAGES
    before = rpm_installed(node, names)
    refreshed = node.sh("zypper --non-interactive refresh", check=False)
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    offered = node.sh("zypper --non-interactive search --details --match-exact " + " ".join(names)).stdout
    assert standin_rpms.TOOLKIT_UPDATE in offered, offered
    if driver_stage:
        assert f"{suse_repo.DRIVER_UPDATE}-{suse_repo.RELEASE}" in offered, offered
    update = node.sh("zypper --non-interactive update -y", check=False)
    assert update.returncode == 0, update.stdout + update.stderr
    assert rpm_installed(node, names) == before


@pytest.fixture(scope="module")
def second_run(deployed):
    """The same settings again on the deployed node, with -y: (result, the operations it changed)."""
    node, first, data = deployed
    assert first.returncode == 0, first.explain()
    again = node.deploy(data=data, json_output=False)
    assert again.returncode == 0, again.explain()
    return again, again.changed_operations()


def test_leap156_zypper_standin_packages_second_run_with_y_changes_nothing(second_run):
    """STAND-IN packages: the same settings again, with -y: the kernel and toolkit stages change nothing
    (the toolkit's pin 1.17.8-1 is the installed version-release; its locks are read and kept)."""
    again, changed = second_run
    assert [name for name in changed if not name.startswith("NVIDIA driver |")] == [], again.explain()


def test_leap156_zypper_standin_driver_second_run_with_y_changes_nothing(second_run, driver_stage):
    """STAND-IN G06 rpms: the driver stage's second run changes nothing (its pin without the release,
    550.54.15, matches the installed 550.54.15-lp156.1.1, as zypper reads it)."""
    needs_driver(driver_stage)
    again, changed = second_run
    assert [name for name in changed if name.startswith("NVIDIA driver |")] == [], again.explain()


def test_leap156_zypper_standin_toolkit_new_pin_moves_the_locked_packages_and_locks_them_again(
    deployed, repos, driver_stage
):
    """STAND-IN toolkit rpms: a later run pinned to 1.20.0-1 moves all four locked packages to it
    (as apt's hold and dnf's versionlock let a new pin through) and locks them again."""
    node, first, data = deployed
    assert first.returncode == 0, first.explain()
    moved = node.deploy(data={**data, "nvidia_toolkit_version": NEWER_TOOLKIT}, json_output=False)
    assert moved.returncode == 0, moved.explain()
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {name: NEWER_TOOLKIT for name in TOOLKIT_PACKAGES}
    assert set(TOOLKIT_PACKAGES) <= locks(node)


def test_leap156_zypper_standin_packages_undo_releases_the_locks_repositories_and_keys_gpu_node_added(
    deployed, repos, driver_stage
):
    """deploy/undo.py on the deployed node (its last use here): the zypper locks, the repository files
    and key copies gpu-node added and the keys it imported into rpm's database are gone; the STAND-IN
    packages stay (undo_remove_packages is false)."""
    node, first, _ = deployed
    assert first.returncode == 0, first.explain()
    undone = node.deploy(deploy_file="deploy/undo.py", json_output=False)
    assert undone.returncode == 0, undone.explain()
    assert not set(TOOLKIT_PACKAGES + DRIVER_PACKAGES) & locks(node), locks(node)
    added = [TOOLKIT_REPO_FILE, ZYPPER.key_file.format(name=REPOSITORY_NAME)]
    assert [path for path in added if node.exists(path)] == []
    assert repos.toolkit_key.fingerprint[-8:].lower() not in imported_keys(node)
    assert set(rpm_installed(node, TOOLKIT_PACKAGES)) == set(TOOLKIT_PACKAGES)


# An rpm in the node's database, as a real Leap's holds hundreds: with none but gpg-pubkeys, libsolv's
# rpmdb2solv fails to refresh zypper's installed-packages cache once rpm's database changed (here: the
# refused repository's key taken back out), a fault of the stand-in node (tests/family_rpm_more.py SLES155_ZYPPER).
LEAP_RELEASE = StandinRpm(
    "openSUSE-release", "15.6", "1", files={"/usr/share/doc/openSUSE-release/STAND-IN": "stand-in\n"}
)


@pytest.fixture(scope="module")
def toolkit_refused(repos, driver_stage):
    """A Leap 15.6 node (its rpm database holding a stand-in openSUSE-release) after a -y run of the
    toolkit stage against the toolkit repository whose repomd.xml was altered after signing: (node, result)."""
    node = start_leap_node()
    try:
        node.sh(installed_standin(LEAP_RELEASE))
        data = settings_data(repos, driver_stage, tampered=True, stages="toolkit")
        yield node, node.deploy(data=data, json_output=False)
    finally:
        node.remove()


def refusal_messages(output: str) -> set[str]:
    """zypper's signature refusals in a run's output, each message once (zypper prints it with its
    prompt, answered no, then again as the error)."""
    return {
        line.split("] ", 1)[-1].split(" Continue?")[0].strip().rstrip(".")
        for line in output.splitlines()
        if "Signature verification failed for file" in line
    }


def test_leap156_zypper_standin_toolkit_repository_whose_signature_does_not_verify_is_refused_and_nothing_installed(
    toolkit_refused,
):
    """STAND-IN toolkit repository, its repomd.xml altered after signing (repo_gpgcheck): the run
    fails with zypper's one refusal, naming the repository's repomd.xml; no toolkit package is in."""
    node, refused = toolkit_refused
    assert refused.returncode != 0, refused.explain()
    assert refusal_messages(refused.run_output) == {
        f"Signature verification failed for file 'repomd.xml' from repository '{REPOSITORY_NAME}'"
    }, refused.explain()
    assert "Traceback" not in refused.output
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {}


def test_leap156_zypper_standin_toolkit_repository_refused_stops_the_run_at_the_refusal(toolkit_refused):
    """STAND-IN toolkit repository whose signature does not verify: the run stops at zypper's refusal
    (exit 4), not later on packages that seem missing because the refused repository was skipped."""
    node, refused = toolkit_refused
    assert refused.returncode != 0, refused.explain()
    assert "No provider of" not in refused.output, refused.explain()


def test_leap156_zypper_standin_toolkit_repository_refused_leaves_the_nodes_own_zypper_working(toolkit_refused, repos):
    """STAND-IN toolkit repository whose signature does not verify: after the refused run the
    node's own `zypper refresh` of its own (working) repository still succeeds (as apt-get update
    does after the apt refusal): the refused .repo file was checked apart and never put in place, and
    the key imported for that check is out of rpm's database again."""
    node, refused = toolkit_refused
    assert refused.returncode != 0, refused.explain()
    assert not node.exists(TOOLKIT_REPO_FILE) and not node.exists(ZYPPER.key_file.format(name=REPOSITORY_NAME))
    assert imported_keys(node) == []  # the checked key imported for the refresh was taken back out
    # the node's own repository (the good toolkit tree, under another alias; the image has none), its
    # key trusted by the node's owner
    node.write("/tmp/own.asc", repos.toolkit_key.armored_public_key())
    node.sh(f"rpm --import /tmp/own.asc && zypper --non-interactive addrepo {repos.toolkit_url()}/rpm/x86_64 own")
    own = node.sh("zypper --non-interactive refresh", check=False)
    assert own.returncode == 0, own.stdout + own.stderr


def packages_and_trust(node) -> str:
    """What a run could change of the node's software and what it trusts: zypper's repository files and
    the key folder (checksums), rpm's database (every package, every imported key)."""
    return node.sh(
        "find /etc/zypp/repos.d /etc/pki/rpm-gpg -type f -exec sha256sum {} + 2>/dev/null | sort; rpm -qa | sort"
    ).stdout


def test_leap156_zypper_standin_toolkit_key_url_serving_another_valid_key_that_signed_the_repository_is_refused(
    repos, driver_stage
):
    """STAND-IN toolkit repository copy whose repomd.xml another valid key signed, that key served at the
    key URL (a hijacked mirror or key URL, as NVIDIA's SUSE key comes from the repository it vouches
    for): zypper --gpg-auto-import-keys would import it. With -y the pinned fingerprint refuses it
    first, in one line naming both fingerprints: nothing installed, no key imported, no repository
    file left."""
    node = start_leap_node()
    try:
        before = packages_and_trust(node)
        impostor = f"{suse_repo.IMPOSTOR}/{suse_repo.TOOLKIT_PATH}"
        key_url = f"{repos.keys_url}/{impostor}/gpgkey"
        data = {
            **settings_data(repos, driver_stage, stages="toolkit"),
            "nvidia_toolkit_repo_url": f"{repos.url}/{impostor}",
            "nvidia_toolkit_gpgkey_url": key_url,
        }
        refused = node.deploy(data=data, json_output=False)
        assert refused.returncode != 0, refused.explain()
        refusal = (
            f"refusing the signing key from {key_url}: its fingerprint is {repos.other_key.fingerprint}; "
            f"{repos.toolkit_key.fingerprint} is pinned (nvidia_toolkit_gpgkey_fingerprint)"
        )
        assert len(refused.run_lines(refusal)) == 1, refused.explain()
        assert "Traceback" not in refused.output
        assert packages_and_trust(node) == before
    finally:
        node.remove()


@pytest.fixture
def leap_node():
    node = start_leap_node()
    yield node
    node.remove()


def test_leap156_zypper_standin_driver_repository_whose_signature_does_not_verify_is_refused_and_nothing_installed(
    leap_node, repos, driver_stage
):
    """STAND-IN driver repository, its repomd.xml altered after signing, with -y: the run fails
    with zypper's one line, and none of the driver's packages is installed."""
    needs_driver(driver_stage)
    refused = leap_node.deploy(
        data=settings_data(repos, driver_stage, tampered=True, stages="driver"), json_output=False
    )
    assert refused.returncode != 0, refused.explain()
    assert refusal_messages(refused.run_output) == {
        f"Signature verification failed for file 'repomd.xml' from repository '{DRIVER_REPOSITORY}'"
    }, refused.explain()
    assert "Traceback" not in refused.output
    assert rpm_installed(leap_node, [*DRIVER_PACKAGES, suse_repo.PROPRIETARY_KMP, suse_repo.OPEN_KMP]) == {}


def test_leap156_zypper_standin_driver_open_module_type_installs_the_signed_open_kmp_and_locks_it(
    leap_node, repos, driver_stage
):
    """STAND-IN G06 rpms with nvidia_kernel_modules=open, with -y: the open KMP
    (nvidia-open-driver-G06-signed-kmp-default) beside the pinned userspace, locked; no proprietary KMP
    (its version: test_leap156_zypper_standin_packages_kmp_at_the_pinned_drivers_version)."""
    needs_driver(driver_stage)
    run = leap_node.deploy(data=settings_data(repos, driver_stage, stages="driver", modules="open"), json_output=False)
    assert run.returncode == 0, run.explain()
    assert list(rpm_installed(leap_node, [suse_repo.PROPRIETARY_KMP, suse_repo.OPEN_KMP])) == [suse_repo.OPEN_KMP]
    assert suse_repo.OPEN_KMP in locks(leap_node)


def test_leap156_zypper_standin_driver_open_node_switched_to_proprietary_replaces_the_kmp_and_moves_the_lock(
    leap_node, repos, driver_stage
):
    """STAND-IN G06 rpms, with -y, on an open node: switching to proprietary removes the open KMP (rpm -e,
    after the bounded wait for zypper's lock), installs the proprietary KMP at the pinned driver's
    version, moves zypper's lock with it, and a re-run changes nothing."""
    needs_driver(driver_stage)
    opened = leap_node.deploy(
        data=settings_data(repos, driver_stage, stages="driver", modules="open"), json_output=False
    )
    assert opened.returncode == 0, opened.explain()
    data = settings_data(repos, driver_stage, stages="driver", modules="proprietary")
    switched = leap_node.deploy(data=data, json_output=False)
    assert switched.returncode == 0, switched.explain()
    assert list(rpm_installed(leap_node, [suse_repo.PROPRIETARY_KMP, suse_repo.OPEN_KMP])) == [
        suse_repo.PROPRIETARY_KMP
    ]
    now_locked = locks(leap_node)
    assert suse_repo.PROPRIETARY_KMP in now_locked and suse_repo.OPEN_KMP not in now_locked, now_locked
    assert_no_change(leap_node.deploy(data=data, json_output=False))


@pytest.mark.parametrize("direction", ["upgraded", "downgraded"])
def test_leap156_zypper_standin_driver_and_toolkit_moved_to_another_pin_replace_the_kmp_and_lock_again(
    leap_node, repos, driver_stage, direction
):
    """STAND-IN G06 and toolkit rpms, with -y: a node at one driver and toolkit, then pinned to the
    other versions, newer (a driver update) or older (the way the driver stage's refusal of a silent
    downgrade tells the operator to go back). Both move to their pins; the KMP, which zypper installs
    beside its other versions (multiversion(kernel), as SUSE's KMPs), replaces the old one in the
    same transaction (their files would conflict); all are locked again, and a re-run changes nothing."""
    needs_driver(driver_stage)
    versions = {"upgraded": (0, 1), "downgraded": (1, 0)}[direction]
    toolkits, drivers = standin_rpms.TOOLKIT_VERSIONS, suse_repo.DRIVER_VERSIONS

    def pinned(index: int) -> dict:
        return {
            **settings_data(repos, driver_stage, stages="driver,toolkit", toolkit_version=toolkits[index]),
            "nvidia_driver_version": drivers[index],
        }

    first = leap_node.deploy(data=pinned(versions[0]), json_output=False)
    assert first.returncode == 0, first.explain()
    moved = leap_node.deploy(data=pinned(versions[1]), json_output=False)
    assert moved.returncode == 0, moved.explain()
    assert rpm_installed(leap_node, TOOLKIT_PACKAGES) == {name: toolkits[versions[1]] for name in TOOLKIT_PACKAGES}
    kmps = leap_node.sh(f"rpm -q {suse_repo.PROPRIETARY_KMP} --qf '%{{VERSION}}\\n'").stdout.split()
    assert len(kmps) == 1 and kmps[0].startswith(drivers[versions[1]] + "_k"), kmps
    driver = rpm_installed(leap_node, DRIVER_PACKAGES)
    assert all(version.startswith(drivers[versions[1]]) for version in driver.values()) and len(driver) == 2, driver
    assert {*TOOLKIT_PACKAGES, *DRIVER_PACKAGES, suse_repo.PROPRIETARY_KMP} <= locks(leap_node)
    assert_no_change(leap_node.deploy(data=pinned(versions[1]), json_output=False))
