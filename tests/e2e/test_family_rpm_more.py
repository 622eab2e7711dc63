"""
Fedora 40 and Amazon Linux 2023 run by the real dnf, SLES 15 SP5 by the real zypper
(tests/family_rpm_more.py: each the Rocky or Leap node's package manager with the distribution's own
os-release, release files, manager configuration and rpm database place): the kernel, driver and
toolkit stages through pyinfra's default mode and then with ``-y``, from local signed repositories on
127.0.0.1 holding STAND-IN rpms under the real names: NVIDIA's CUDA repository for ``fedora40`` and
``amzn2023`` (``cuda-drivers-<branch>`` and what it requires; no module streams there), NVIDIA's
SUSE driver repository at ``suse/sle15sp5`` (the G06 packages and KMPs), NVIDIA's toolkit repository,
and the distributions' own kernel-devel and versionlock plugin.

dnf and zypper, their signature checks (gpgcheck on packages, repo_gpgcheck on metadata), key
imports, dnf's versionlock and zypper's locks are real; the packages are stand-ins (no driver is
built or loaded). The runtimes stages are left out (their packages come from the distributions'
repositories, which no local stand-in serves). The real hosts of the families' repositories
resolve to 127.0.0.1 on the nodes, so nothing leaves this machine whatever the deploy writes.

Each test runs per family (its id names it). The two zypper findings the Leap node showed (the KMP
unpinned beside a pinned userspace; a refused .repo file left behind) hold for SLES too and are
asserted here as fixed, as tests/e2e/test_family_zypper.py asserts them for Leap. A CUDA repository
whose rpms another key signed is refused by the same dnf on the Rocky node (test_family_dnf.py): here
the dnf families' refusal is the toolkit repository's, SLES's both.
"""

from __future__ import annotations

import contextlib
import platform as machine
from dataclasses import dataclass
from functools import cached_property

import family_rpm_more as more
import pytest
import standin_rpms
import suse_repo
from family_images import rpm_installed
from harness import assert_no_change, ensure_docker

from deploy.distros.package_managers import DNF, ZYPPER
from deploy.tasks.toolkit import REPOSITORY_NAME, TOOLKIT_PACKAGES

PINNED_DRIVER = standin_rpms.DRIVER_VERSIONS[0]  # the older of the two published
PINNED_TOOLKIT = standin_rpms.TOOLKIT_VERSIONS[0]
BRANCH = standin_rpms.DRIVER_BRANCH
# dnf families: the branch's meta package is what the deploy pins and locks; it requires the rest
# at the exact version, and nvidia-persistenced is pinned and locked beside it
DNF_META = f"cuda-drivers-{BRANCH}"
DNF_DRIVER = ("cuda-drivers", "nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms")
SUSE_DRIVER = ("nvidia-compute-G06", "nvidia-compute-utils-G06")
SLES_DRIVER_REPOSITORY = "nvidia-sles"  # the family table's nvidia-{distro_id}

FEDORA, AMAZON, SLES = "fedora40", "amzn2023", "sles15.5"
FAMILIES = (FEDORA, AMAZON, SLES)


@dataclass(frozen=True)
class Family:
    """One family's node, settings and package manager's answers."""

    name: str
    lab: Lab

    @property
    def dnf(self) -> more.DnfDistribution | None:
        return {FEDORA: more.FEDORA40, AMAZON: more.AMZN2023}.get(self.name)

    @property
    def repos(self):
        return self.lab.dnf_repos if self.dnf else self.lab.sles_repos

    def start_node(self):
        if self.dnf:
            node = more.overlay_node(self.dnf.image).start()
            self.repos.node_setup(node, self.dnf)
            return node
        node = more.overlay_node(more.SLES155_ZYPPER).start()
        self.repos.node_setup(node)
        return node

    def settings(self, *, tampered: bool = False, stages: str = "kernel,driver,toolkit") -> dict:
        data = {
            "stages": stages,
            "nvidia_driver_version": PINNED_DRIVER,
            "nvidia_kernel_modules": "proprietary",
            "nvidia_toolkit_repo_url": self.repos.toolkit_url(tampered),
            **self.repos.toolkit_key_data(tampered),  # keys over https, pinned to the stand-ins' own
            "nvidia_toolkit_version": PINNED_TOOLKIT,
            "allow_insecure_repositories": "true",  # http:// on 127.0.0.1; signatures are still checked
        }
        if self.dnf:
            # the tampered CUDA copy is the Rocky node's (tests/rpm_repo.py): these dists' keys are the good ones
            return {
                **data,
                "nvidia_cuda_repo_url": self.repos.cuda_url(tampered),
                "nvidia_driver_branch": BRANCH,
                **self.repos.cuda_key_data(self.dnf),
            }
        return {
            **data,
            "nvidia_driver_repo_url": f"{self.repos.url}/{suse_repo.TAMPERED}" if tampered else self.repos.url,
            **self.repos.driver_key_data(tampered, more.SLE_DRIVER_PATH),
        }

    @property
    def driver_release(self) -> str:
        return f"{PINNED_DRIVER}-1.{self.dnf.release_tag}" if self.dnf else f"{PINNED_DRIVER}-{suse_repo.RELEASE}"

    @property
    def toolkit_repo_file(self) -> str:
        return f"/etc/yum.repos.d/{REPOSITORY_NAME}.repo" if self.dnf else f"/etc/zypp/repos.d/{REPOSITORY_NAME}.repo"

    @property
    def driver_repo_file(self) -> str:
        if self.dnf:
            return f"/etc/yum.repos.d/cuda-{self.dnf.cuda_dist}-{standin_rpms.ARCH}.repo"
        return f"/etc/zypp/repos.d/{SLES_DRIVER_REPOSITORY}.repo"

    def driver_url(self) -> str:
        if self.dnf:
            return f"{self.repos.cuda_url()}/{self.dnf.cuda_dist}/{standin_rpms.ARCH}"
        return f"{self.repos.url}/{more.SLE_DRIVER_PATH}"

    @property
    def driver_names(self) -> tuple[str, ...]:
        return (DNF_META, *DNF_DRIVER, "nvidia-persistenced") if self.dnf else (*SUSE_DRIVER, suse_repo.PROPRIETARY_KMP)

    def locks(self, node) -> dict[str, str]:
        """name -> the lock's entry: dnf's versionlock list (name-epoch:version-release.*), zypper's locks table."""
        if self.dnf:
            entries = [line.strip() for line in node.sh("dnf -q versionlock list").stdout.splitlines() if line.strip()]
            return {entry.rsplit("-", 2)[0]: entry for entry in entries}
        rows = [line.split("|") for line in node.sh("zypper --non-interactive locks").stdout.splitlines()]
        return {
            cells[1].strip(): line
            for cells, line in ((cells, "|".join(cells)) for cells in rows)
            if len(cells) >= 3 and cells[0].strip().isdigit()
        }

    def refusals(self, output: str) -> list[str]:
        """The manager's signature refusals in a run's output, each message once
        (zypper prints its refusal with its prompt, answered no, and again as the error)."""
        if self.dnf:
            return [
                line
                for line in output.splitlines()
                if "GPG signature verification error" in line or "GPG check FAILED" in line
            ]
        return sorted(
            {
                line.split("] ", 1)[-1].split(" Continue?")[0].strip().rstrip(".")
                for line in output.splitlines()
                if "Signature verification failed for file" in line
            }
        )

    def refresh(self, node):
        return node.sh("dnf -q makecache" if self.dnf else "zypper --non-interactive refresh", check=False)


class Lab:
    """The repositories and nodes of the module, each made on first use (so ``-k fedora`` builds
    only dnf's), all removed at the end."""

    def __init__(self, tmp_path_factory) -> None:
        self.tmp = tmp_path_factory
        self.stack = contextlib.ExitStack()
        self.first: dict[str, tuple] = {}
        self.refused: dict[tuple[str, str], tuple] = {}

    @cached_property
    def dnf_repos(self) -> more.DnfRepos:
        return self.stack.enter_context(more.dnf_served(self.tmp.mktemp("dnf-repos") / "root"))

    @cached_property
    def sles_repos(self):
        # the container runs the machine's kernel: its variant's KMPs too, besides SLES's "default"
        variant = machine.release().rsplit("-", 1)[-1].lower()
        return self.stack.enter_context(more.sles_served(self.tmp.mktemp("sles-repos") / "root", ("default", variant)))

    def node(self, family: Family):
        node = family.start_node()
        self.stack.callback(node.remove)
        return node

    def first_run(self, family: Family) -> tuple:
        """The family's node after its first run, in pyinfra's default mode: (node, result, data)."""
        if family.name not in self.first:
            node = self.node(family)
            data = family.settings()
            self.first[family.name] = (node, node.deploy(data=data, default_mode=True, json_output=False), data)
        return self.first[family.name]

    def refused_run(self, family: Family, stages: str) -> tuple:
        """A fresh node of the family after a -y run of ``stages`` against the tampered repositories:
        (node, result)."""
        if (family.name, stages) not in self.refused:
            node = self.node(family)
            self.refused[family.name, stages] = (
                node,
                node.deploy(data=family.settings(tampered=True, stages=stages), json_output=False),
            )
        return self.refused[family.name, stages]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    ensure_docker()
    lab = Lab(tmp_path_factory)
    with lab.stack:
        yield lab


@pytest.fixture
def family(request, lab) -> Family:
    return Family(request.param, lab)


@pytest.fixture
def deployed(family):
    node, first, data = family.lab.first_run(family)
    assert first.returncode == 0, first.explain()
    return node, data


def imported_keys(node) -> list[str]:
    return node.sh("rpm -q gpg-pubkey --qf '%{VERSION}\\n'", check=False).stdout.split()


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_packages_first_run_in_default_mode_adds_repositories_with_signature_checks(family, deployed):
    """STAND-IN packages, first run in pyinfra's default mode: the toolkit's repository checks its
    metadata's signature (repo_gpgcheck) with the checked copy of the key at the URL given; the driver's
    repository (NVIDIA's CUDA repository for the dist, or NVIDIA's SLE 15 SP5 one) checks its packages',
    and its key is the one the deploy checked against its pin and imported into rpm's database; the
    manager reads both afterwards."""
    node, _ = deployed
    repos = family.repos
    manager = DNF if family.dnf else ZYPPER
    toolkit_repo = node.read(family.toolkit_repo_file)
    assert f"baseurl={repos.toolkit_url()}/rpm/$basearch\n" in toolkit_repo, toolkit_repo
    toolkit_key_file = manager.key_file.format(name=REPOSITORY_NAME)
    assert "repo_gpgcheck=1\n" in toolkit_repo and f"gpgkey=file://{toolkit_key_file}\n" in toolkit_repo
    driver_repo = node.read(family.driver_repo_file)
    assert f"baseurl={family.driver_url()}\n" in driver_repo and "gpgcheck=1\n" in driver_repo, driver_repo
    driver_name = family.driver_repo_file.rsplit("/", 1)[1].removesuffix(".repo")
    assert f"gpgkey=file://{manager.key_file.format(name=driver_name)}\n" in driver_repo, driver_repo
    driver_key = repos.cuda_key if family.dnf else repos.driver_key
    assert driver_key.fingerprint[-8:].lower() in imported_keys(node)
    refreshed = family.refresh(node)
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_packages_toolkit_installed_at_its_pin_and_locked(family, deployed):
    """STAND-IN toolkit rpms: all four at the pinned 1.17.8-1 although 1.20.0-1 is offered, each
    held by the family's lock (dnf versionlock at that version, zypper addlock); nvidia-ctk answers."""
    node, _ = deployed
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {name: PINNED_TOOLKIT for name in TOOLKIT_PACKAGES}
    locks = family.locks(node)
    for name in TOOLKIT_PACKAGES:
        assert name in locks, locks
        if family.dnf:
            assert locks[name] == f"{name}-0:{PINNED_TOOLKIT}.*", locks
    ctk = node.sh("nvidia-ctk --version").stdout
    assert ctk.startswith(f"NVIDIA Container Toolkit CLI version {PINNED_TOOLKIT.split('-')[0]}"), ctk
    assert node.sh("rpm -q --qf '%{SUMMARY}' nvidia-container-toolkit").stdout.startswith("STAND-IN")


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_packages_driver_installed_at_its_pin_and_locked(family, deployed):
    """STAND-IN driver rpms at the pinned 550.54.15 although 550.90.07 is offered. dnf: the branch's
    cuda-drivers-550 (pinned, versionlocked) and what it requires at that version, nvidia-persistenced
    pinned and versionlocked with it, kernel-devel from the distribution's repository. SLES: the G06
    userspace pinned, the proprietary KMP in and no open one, all locked, nvidia-persistenced's unit
    (in nvidia-compute-utils-G06) enabled. The stand-in nvidia-smi exits 9 as on a node without a driver."""
    node, _ = deployed
    installed = rpm_installed(node, [*family.driver_names, suse_repo.OPEN_KMP, "kmod-nvidia-open-dkms"])
    locks = family.locks(node)
    if family.dnf:
        tag = family.dnf.release_tag
        assert installed == {
            DNF_META: f"{PINNED_DRIVER}-1",
            "cuda-drivers": f"{PINNED_DRIVER}-1",
            **{name: family.driver_release for name in (*DNF_DRIVER[1:], "nvidia-persistenced")},
        }
        assert locks.get(DNF_META) == f"{DNF_META}-0:{PINNED_DRIVER}-1.*", locks
        assert (
            locks.get("nvidia-persistenced")
            == f"nvidia-persistenced-{standin_rpms.DRIVER_EPOCH}:{PINNED_DRIVER}-1.{tag}.*"
        ), locks
        assert set(rpm_installed(node, ["kernel-devel"])) == {"kernel-devel"}
    else:
        assert {name: installed.get(name) for name in SUSE_DRIVER} == {
            name: family.driver_release for name in SUSE_DRIVER
        }
        assert set(installed) == {*SUSE_DRIVER, suse_repo.PROPRIETARY_KMP}, installed
        assert {*SUSE_DRIVER, suse_repo.PROPRIETARY_KMP} <= set(locks), locks
        assert node.sh("systemctl is-enabled nvidia-persistenced", check=False).stdout.strip() == "enabled"
    smi = node.sh("nvidia-smi", check=False)
    assert smi.returncode == 9 and f"STAND-IN {PINNED_DRIVER}" in smi.stderr, smi


@pytest.mark.parametrize("family", [SLES], indirect=True)
def test_standin_packages_kmp_at_the_pinned_drivers_version(family, deployed):
    """STAND-IN KMP (SLES): the kernel module package is the pinned driver's, 550.54.15_k..., the only
    one installed (a KMP of another driver version does not load with 550.54.15's userspace)."""
    node, _ = deployed
    versions = node.sh(f"rpm -q --qf '%{{VERSION}}\\n' {suse_repo.PROPRIETARY_KMP}").stdout.split()
    assert [version.split("_")[0] for version in versions] == [PINNED_DRIVER], versions


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_packages_stay_at_their_pins_through_a_plain_upgrade(family, deployed):
    """STAND-IN packages: once a newer driver (550.127.05) and toolkit (1.20.1-1) are published, the
    node's own manager sees them and its plain `dnf upgrade` / `zypper up` leaves the locked packages."""
    node, _ = deployed
    repos = family.repos
    repos.publish_toolkit(standin_rpms.TOOLKIT_UPDATE)
    names = [*TOOLKIT_PACKAGES, *family.driver_names]
    before = rpm_installed(node, names)
    if family.dnf:
        repos.publish_driver(family.dnf, standin_rpms.DRIVER_UPDATE)
        offered = node.sh("dnf -q --refresh list --showduplicates " + " ".join(names)).stdout
        upgrade = node.sh("dnf -y upgrade", check=False)
        newer_driver = f"{standin_rpms.DRIVER_UPDATE}-1.{family.dnf.release_tag}"
    else:
        repos.publish_driver(suse_repo.DRIVER_UPDATE)
        refreshed = family.refresh(node)
        assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
        offered = node.sh("zypper --non-interactive search --details --match-exact " + " ".join(names)).stdout
        upgrade = node.sh("zypper --non-interactive up -y", check=False)
        newer_driver = f"{suse_repo.DRIVER_UPDATE}-{suse_repo.RELEASE}"
    assert standin_rpms.TOOLKIT_UPDATE in offered and newer_driver in offered, offered
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert rpm_installed(node, names) == before


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_packages_second_run_with_y_changes_nothing(family, deployed):
    """STAND-IN packages: the same settings again, with -y: nothing changes (the pins without their
    release, 550.54.15, match the installed version-release; the locks are read and kept)."""
    node, data = deployed
    assert_no_change(node.deploy(data=data, json_output=False))


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_toolkit_repository_whose_signature_does_not_verify_is_refused_and_nothing_installed(family):
    """STAND-IN toolkit repository, its repomd.xml altered after signing (repo_gpgcheck), with -y: the
    run fails with the manager's one refusal naming the repository; no toolkit package is in."""
    node, refused = family.lab.refused_run(family, "toolkit")
    assert refused.returncode != 0, refused.explain()
    refusals = family.refusals(refused.run_output)
    assert len(refusals) == 1 and f"'{REPOSITORY_NAME}'" in refusals[0], refused.explain()
    assert "Traceback" not in refused.output
    assert rpm_installed(node, TOOLKIT_PACKAGES) == {}


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_toolkit_repository_refused_leaves_the_nodes_own_manager_working(family):
    """STAND-IN toolkit repository whose signature does not verify: after the refused run the node's
    own `dnf makecache` / `zypper refresh` of the distribution's own repository still succeeds (as
    apt-get update does after apt's refusal)."""
    node, refused = family.lab.refused_run(family, "toolkit")
    assert refused.returncode != 0, refused.explain()
    own = family.refresh(node)
    assert own.returncode == 0, own.stdout + own.stderr


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_standin_toolkit_repository_refused_is_not_left_where_the_manager_reads(family):
    """STAND-IN toolkit repository whose signature does not verify: the refused run leaves no
    repository file of it in /etc/yum.repos.d or /etc/zypp/repos.d (dnf's check of the candidate
    turns skip_if_unavailable off, which Fedora's and Amazon Linux 2023's dnf.conf turn on)."""
    node, refused = family.lab.refused_run(family, "toolkit")
    assert refused.returncode != 0, refused.explain()
    assert not node.exists(family.toolkit_repo_file)


@pytest.mark.parametrize("family", [SLES], indirect=True)
def test_standin_driver_repository_whose_signature_does_not_verify_is_refused_and_nothing_installed(family):
    """STAND-IN driver repository at NVIDIA's SLE 15 SP5 path, its repomd.xml altered after signing,
    with -y: the run fails with zypper's one refusal naming nvidia-sles, and no driver package is in."""
    node, refused = family.lab.refused_run(family, "driver")
    assert refused.returncode != 0, refused.explain()
    assert family.refusals(refused.run_output) == [
        f"Signature verification failed for file 'repomd.xml' from repository '{SLES_DRIVER_REPOSITORY}'"
    ], refused.explain()
    assert "Traceback" not in refused.output
    assert rpm_installed(node, [*family.driver_names, suse_repo.OPEN_KMP]) == {}
