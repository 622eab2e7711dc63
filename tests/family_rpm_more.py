"""
Nodes and local repositories for the three families the Rocky (dnf) and Leap (zypper) nodes leave:
Fedora 40 and Amazon Linux 2023 on the REAL dnf, SLES 15 SP5 on the REAL zypper.

Images: each is the image of the family that runs the same package manager (tests/family_images.py's
``ROCKY9_DNF``, tests/family_zypper.py's ``LEAP156_ZYPPER``) with the distribution's own files put
over it (``FamilyOverlay``): its os-release (tests/fixtures/nvidia/os-release/), its release files,
the manager's configuration where the distribution keeps it, and its rpm database's place. What
makes those images (Debian's dnf 4.14 with dnf-plugins-core's versionlock, zypper 1.14 with
libzypp 17, rpm 4.18, gpg) is shared, so each overlay builds in seconds and is cached under a hash
of its recipe and its base image's tag.

Repositories, on 127.0.0.1, each signed with its own throwaway key (tests/rpm_repo.py's ``index``):

- dnf (``DnfRepos``): NVIDIA's CUDA repository per dist (``cuda/fedora40/x86_64/``,
  ``cuda/amzn2023/x86_64/``; no module streams: NVIDIA publishes none for Fedora or Amazon Linux), its
  key at ``D42D0685.pub`` beside it; NVIDIA's toolkit repository (``toolkit/stable/rpm/x86_64/``, key at
  ``toolkit/stable/gpgkey``); each distribution's own repository with what the driver stage takes from
  it (kernel-devel, the versionlock plugin), its key installed on the node where the distribution keeps
  it; ``tampered/``: the toolkit repository with repomd.xml altered after signing (a CUDA repository
  whose rpms another key signed is tests/rpm_repo.py's, refused by the same dnf on the Rocky node).
- zypper (``sles_served``): tests/suse_repo.py's repositories, the G06 driver repository also served at
  the path of NVIDIA's SLE 15 SP5 repository (``suse/sle15sp5``), and SLES's own Basesystem repository
  (empty: the stages take nothing from it) as SUSEConnect configures it, signed with a throwaway key.

Every rpm is a STAND-IN of tests/standin_rpms.py (built with the real rpmbuild, signed with rpmsign)
under the real names; the driver's carry the dist's release tag (``1.fc40``, ``1.amzn2023``). The SLES
node gets the Leap 15.6 stand-ins (their release says lp156): no rpm of the SUSE family is real here;
its rpm database holds a stand-in sles-release, built with the image (``SLES155_ZYPPER``: why).
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import standin_rpms
import suse_repo
from apt_repo import GpgKey, make_key
from family_images import OS_RELEASES, ROCKY9_DNF, FamilyImage, committed_image, family_image
from family_zypper import LEAP156_ZYPPER
from harness import Node
from rpm_repo import CUDA_KEY_FILE, CUDA_PATH, TAMPERED, TOOLKIT_PATH, ServedUrls, index, repo_file_text, serving
from standin_rpms import StandinRpm


@dataclass(frozen=True)
class FamilyOverlay:
    """A family's node image made from ``base`` (a family running the same package manager): only
    the distribution's own files differ. ``setup`` runs after the files are written."""

    name: str
    base: FamilyImage
    os_release: str  # a file under tests/fixtures/nvidia/os-release
    files: dict[str, str] = field(default_factory=dict)
    setup: str = ""

    def recipe(self) -> str:
        text = (OS_RELEASES / self.os_release).read_text()
        files = {"/usr/lib/os-release": text, "/etc/os-release": text, **self.files}
        lines = ["set -eu"]
        for path, content in files.items():
            lines.append(f"mkdir -p {shlex.quote(str(Path(path).parent))}")
            lines.append(f"printf %s {shlex.quote(content)} > {shlex.quote(path)}")
        return "\n".join([*lines, self.setup] if self.setup else lines)


def overlay_image(spec: FamilyOverlay) -> str:
    """The image of ``spec``, made on its base family's image the first time (seconds); its tag."""
    base = family_image(spec.base)
    digest = hashlib.sha256("\n".join([spec.recipe(), base]).encode()).hexdigest()[:12]
    return committed_image(f"gpu-node-test/node-{spec.name}:{digest}", base, spec.recipe(), network="none", timeout=300)


def overlay_node(spec: FamilyOverlay) -> Node:
    """A node container of ``spec``'s image (not started)."""
    return Node(image=overlay_image(spec), share_apt_cache=False)


# The dnf.conf Fedora's dnf package ships (Debian's dnf-data carries the same upstream file; Rocky's
# differs in best=True, skip_if_unavailable=False). Amazon Linux 2023's dnf is Fedora's.
FEDORA_DNF_CONF = """\
# see `man dnf.conf` for defaults and possible options

[main]
gpgcheck=True
installonly_limit=3
clean_requirements_on_remove=True
best=False
skip_if_unavailable=True
"""
# Rocky's files in the base image that these distributions do not have
NOT_ROCKY = "rm -f /etc/rocky-release /etc/redhat-release /etc/system-release /etc/yum.repos.d/*.repo"

FEDORA40_DNF = FamilyOverlay(
    name="fedora40-dnf",
    base=ROCKY9_DNF,
    os_release="fedora-40",
    files={
        "/etc/dnf/dnf.conf": FEDORA_DNF_CONF,
        # dnf takes $releasever from fedora-release; the stand-in node has no such rpm
        "/etc/dnf/vars/releasever": "40\n",
        # Fedora keeps rpm's database in /usr/lib/sysimage/rpm since 36
        "/etc/rpm/macros.dbpath": "%_dbpath /usr/lib/sysimage/rpm\n",
        "/etc/fedora-release": "Fedora release 40 (Forty)\n",
    },
    setup="\n".join(
        [
            NOT_ROCKY,
            "ln -s fedora-release /etc/redhat-release && ln -s fedora-release /etc/system-release",
            "rm -rf /var/lib/rpm && mkdir -p /usr/lib/sysimage/rpm && ln -s ../../usr/lib/sysimage/rpm /var/lib/rpm",
            "rpm --initdb",
        ]
    ),
)

AMZN2023_VERSION = "2023.4.20240416"  # the release os-release's PRETTY_NAME names
AMZN2023_DNF = FamilyOverlay(
    name="amzn2023-dnf",
    base=ROCKY9_DNF,
    os_release="amzn-2023",
    files={
        "/etc/dnf/dnf.conf": FEDORA_DNF_CONF,
        # dnf takes $releasever (AL2023's repository version lock) from the installed system-release
        # rpm; the stand-in node has none, so the override file AL2023 reads first names it
        "/etc/dnf/vars/releasever": f"{AMZN2023_VERSION}\n",
        "/etc/amazon-linux-release": f"Amazon Linux release {AMZN2023_VERSION} (Amazon Linux)\n",
    },
    setup="\n".join([NOT_ROCKY, "ln -s amazon-linux-release /etc/system-release"]),
)


def _doc(name: str) -> dict[str, str]:
    return {f"/usr/share/doc/{name}/STAND-IN": "stand-in\n"}


def installed_standin(rpm: StandinRpm) -> str:
    """Shell (run in the image's build) that builds ``rpm`` with the image's rpmbuild and installs it."""
    work = f"/tmp/standin-{rpm.name}"
    payload = f"{work}/payload"
    lines = [f"mkdir -p {work}/top {payload}"]
    for path, content in rpm.files.items():
        lines.append(f"mkdir -p {shlex.quote(str(Path(payload + path).parent))}")
        lines.append(f"printf %s {shlex.quote(content)} > {shlex.quote(payload + path)}")
    lines += [
        f"printf %s {shlex.quote(rpm.spec(payload))} > {work}/{rpm.name}.spec",
        f"rpmbuild --quiet -bb --define '_topdir {work}/top' --define '_rpmdir {work}/out' {work}/{rpm.name}.spec",
        f"rpm -i --nodeps {work}/out/{rpm.arch}/{rpm.filename}",
        f"rpm -q {rpm.name}",
        f"rm -rf {work}",
    ]
    return "\n".join(lines)


# SLES 15 SP5 keeps zypp.conf's multiversion lines and rpm's database where Leap 15.6 does. Its rpm
# database holds packages, as a real SLES's does (sles-release and hundreds more): with none but
# gpg-pubkeys, libsolv's rpmdb2solv fails to refresh zypper's installed-packages cache from its previous
# one ("rpmdb2solv: no error"), so the first zypper command after rpm's database changed (a key import)
# fails with "Target initialization failed" - a fault of the stand-in node, not of SLES.
SLES_RELEASE = StandinRpm("sles-release", "15.5", "1", files=_doc("sles-release"))
SLES155_ZYPPER = FamilyOverlay(
    name="sles15.5-zypper", base=LEAP156_ZYPPER, os_release="sles-15.5", setup=installed_standin(SLES_RELEASE)
)


@dataclass(frozen=True)
class DnfDistribution:
    """What differs between the dnf families' repositories and nodes."""

    name: str
    image: FamilyOverlay
    cuda_dist: str  # the family table's repo_dist
    release_tag: str  # NVIDIA's driver rpms' release is 1.<tag> (1.el9 on RHEL 9)
    repo_id: str  # the distribution's own repository, as its .repo file names it
    repo_path: str
    repo_file: str
    key_file: str  # under /etc/pki/rpm-gpg, where the distribution keeps its key
    packages: tuple[StandinRpm, ...]
    real_hosts: tuple[str, ...]

    @property
    def key_on_node(self) -> str:
        return f"/etc/pki/rpm-gpg/{self.key_file}"


NVIDIA_HOSTS = ("developer.download.nvidia.com", "nvidia.github.io", "download.docker.com")
FEDORA40 = DnfDistribution(
    name="fedora40",
    image=FEDORA40_DNF,
    cuda_dist="fedora40",
    release_tag="fc40",
    repo_id="fedora",
    repo_path="fedora/releases/40/Everything/x86_64/os",
    repo_file="/etc/yum.repos.d/fedora.repo",
    key_file="RPM-GPG-KEY-fedora-40-x86_64",
    packages=(
        StandinRpm("kernel-devel", "6.8.5", "301.fc40", files=_doc("kernel-devel")),
        StandinRpm(
            "python3-dnf-plugin-versionlock",
            "4.6.0",
            "1.fc40",
            arch="noarch",
            files=_doc("python3-dnf-plugin-versionlock"),
        ),
    ),
    real_hosts=(*NVIDIA_HOSTS, "mirrors.fedoraproject.org", "dl.fedoraproject.org", "download.fedoraproject.org"),
)
AMZN2023 = DnfDistribution(
    name="amzn2023",
    image=AMZN2023_DNF,
    cuda_dist="amzn2023",
    release_tag="amzn2023",
    repo_id="amazonlinux",
    repo_path=f"al2023/core/mirrors/{AMZN2023_VERSION}/x86_64",
    repo_file="/etc/yum.repos.d/amazonlinux.repo",
    key_file="RPM-GPG-KEY-amazon-linux-2023",
    packages=(
        StandinRpm("kernel-devel", "6.1.84", "99.169.amzn2023", files=_doc("kernel-devel")),
        StandinRpm(
            "python3-dnf-plugin-versionlock",
            "4.3.0",
            "13.amzn2023",
            arch="noarch",
            files=_doc("python3-dnf-plugin-versionlock"),
        ),
    ),
    real_hosts=(
        *NVIDIA_HOSTS,
        "cdn.amazonlinux.com",
        "al2023-repos-us-east-1-de612dc2.s3.dualstack.us-east-1.amazonaws.com",
    ),
)
DNF_DISTRIBUTIONS = (FEDORA40, AMZN2023)


def driver_packages(version: str, release_tag: str) -> list[StandinRpm]:
    """tests/standin_rpms.py's driver packages of one version, with ``release_tag``'s release."""
    ours = f"1.{release_tag}"

    def retag(text: str) -> str:
        return text.replace(standin_rpms.DRIVER_RELEASE, ours)

    return [
        replace(rpm, release=retag(rpm.release), requires=tuple(retag(req) for req in rpm.requires))
        for rpm in standin_rpms.driver_packages(version)
    ]


@dataclass
class DnfRepos(ServedUrls):
    root: Path
    cuda_key: GpgKey
    toolkit_key: GpgKey
    distro_key: GpgKey
    url: str = ""
    keys_url: str = ""

    def cuda_dir(self, dist: DnfDistribution) -> Path:
        return self.root / CUDA_PATH / dist.cuda_dist / standin_rpms.ARCH

    def cuda_key_data(self, dist: DnfDistribution) -> dict[str, str]:
        return self.key_data(
            "nvidia_cuda", f"{CUDA_PATH}/{dist.cuda_dist}/{standin_rpms.ARCH}/{CUDA_KEY_FILE}", self.cuda_key
        )

    def publish_driver(self, dist: DnfDistribution, version: str) -> None:
        """Add one driver version to ``dist``'s CUDA repository (a newer release NVIDIA publishes)."""
        if not (self.cuda_dir(dist) / f"nvidia-driver-{version}-1.{dist.release_tag}.{standin_rpms.ARCH}.rpm").exists():
            standin_rpms.build(driver_packages(version, dist.release_tag), self.cuda_dir(dist), self.cuda_key)
            index(self.cuda_dir(dist), self.cuda_key)

    def publish_toolkit(self, version: str) -> None:
        upstream, release = version.split("-", 1)
        if not (self.toolkit_dir / f"nvidia-container-toolkit-{upstream}-{release}.{standin_rpms.ARCH}.rpm").exists():
            standin_rpms.build(standin_rpms.toolkit_packages(version), self.toolkit_dir, self.toolkit_key)
            index(self.toolkit_dir, self.toolkit_key)

    def node_setup(self, node: Node, dist: DnfDistribution) -> None:
        """The real hosts resolve to 127.0.0.1; the distribution's own repository as it ships it
        (packages checked against its key, its metadata unsigned), pointed at the local one."""
        node.sh(f"printf '127.0.0.1 %s\\n' {' '.join(dist.real_hosts)} >> /etc/hosts")
        node.write(dist.key_on_node, self.distro_key.armored_public_key())
        node.write(
            dist.repo_file,
            repo_file_text(
                dist.repo_id, f"{self.url}/{dist.repo_path}", f"file://{dist.key_on_node}", repo_gpgcheck=False
            ),
        )


def build_dnf(root: Path, dists: tuple[DnfDistribution, ...] = DNF_DISTRIBUTIONS) -> DnfRepos:
    """Build every repository of ``dists`` and the tampered toolkit copy under ``root`` (not served yet)."""
    keys = root.parent / f"{root.name}-gnupg"
    repos = DnfRepos(
        root=root,
        cuda_key=make_key(keys / "cuda", "standin-cuda"),
        toolkit_key=make_key(keys / "toolkit", "standin-toolkit-rpm"),
        distro_key=make_key(keys / "distro", "standin-distribution"),
    )
    for key in (repos.cuda_key, repos.toolkit_key, repos.distro_key):
        key.stop_agent()
    toolkit = [rpm for version in standin_rpms.TOOLKIT_VERSIONS for rpm in standin_rpms.toolkit_packages(version)]
    standin_rpms.build(toolkit, repos.toolkit_dir, repos.toolkit_key)
    index(repos.toolkit_dir, repos.toolkit_key)
    (root / TOOLKIT_PATH / "gpgkey").write_text(repos.toolkit_key.armored_public_key())
    for dist in dists:
        rpms = [rpm for version in standin_rpms.DRIVER_VERSIONS for rpm in driver_packages(version, dist.release_tag)]
        standin_rpms.build(rpms, repos.cuda_dir(dist), repos.cuda_key)
        index(repos.cuda_dir(dist), repos.cuda_key)
        (repos.cuda_dir(dist) / CUDA_KEY_FILE).write_text(repos.cuda_key.armored_public_key())
        standin_rpms.build(list(dist.packages), root / dist.repo_path, repos.distro_key)
        index(root / dist.repo_path, repos.distro_key)
    tampered_toolkit = root / TAMPERED / TOOLKIT_PATH
    shutil.copytree(root / TOOLKIT_PATH, tampered_toolkit)
    repomd = tampered_toolkit / "rpm" / standin_rpms.ARCH / "repodata" / "repomd.xml"
    repomd.write_text(repomd.read_text().replace("<revision>", "<revision>1", 1))  # its .asc no longer verifies
    return repos


def dnf_served(root: Path):
    """The dnf families' repositories served on 127.0.0.1: the DnfRepos with its ``url``."""
    return serving(build_dnf(root), root)


SLE_DRIVER_PATH = "suse/sle15sp5"  # the family table's {driver_repo_url}/suse/sle{major}sp{minor}
# SLES's own repository, as SUSEConnect adds it (SCC's layout; its rpms are not needed here: empty)
SLES_OWN_REPOSITORY = "SLE-Module-Basesystem15-SP5-Pool"
SLES_OWN_PATH = "SUSE/Products/SLE-Module-Basesystem/15-SP5/x86_64/product"
SLES_REAL_HOSTS = (
    "download.nvidia.com",
    "developer.download.nvidia.com",
    "nvidia.github.io",
    "updates.suse.com",
    "scc.suse.com",
    "installer-updates.suse.com",
)


@dataclass
class SlesRepos(suse_repo.SuseRepos):
    """tests/suse_repo.py's repositories and SLES's own one (signed by ``own_key``)."""

    own_key: GpgKey | None = None

    def node_setup(self, node: Node) -> None:
        """The real hosts resolve to 127.0.0.1; SLES's own repository as SUSEConnect adds it (metadata
        and packages checked), its key trusted before the deploy runs (SUSE's come with the system)."""
        node.sh(f"printf '127.0.0.1 %s\\n' {' '.join(SLES_REAL_HOSTS)} >> /etc/hosts")
        node.write(
            f"/etc/zypp/repos.d/{SLES_OWN_REPOSITORY}.repo",
            f"[{SLES_OWN_REPOSITORY}]\nname={SLES_OWN_REPOSITORY}\nenabled=1\nautorefresh=1\n"
            f"baseurl={self.url}/{SLES_OWN_PATH}\ntype=rpm-md\ngpgcheck=1\nrepo_gpgcheck=1\n",
        )
        node.sh("zypper --non-interactive --gpg-auto-import-keys refresh")


@contextlib.contextmanager
def sles_served(root: Path, variants: tuple[str, ...] = ("default",)):
    """tests/suse_repo.py's repositories on 127.0.0.1, the driver's (and its tampered copy) also at
    SLE 15 SP5's path, and SLES's own repository: the SlesRepos with its ``url``."""
    repos = SlesRepos(
        **vars(suse_repo.build(root, variants)),
        own_key=make_key(root.parent / f"{root.name}-gnupg" / "sle", "standin-sle"),
    )
    repos.own_key.stop_agent()
    (root / SLES_OWN_PATH).mkdir(parents=True)
    suse_repo.sign_and_key(root / SLES_OWN_PATH, repos.own_key)
    for base in (root, root / TAMPERED):
        link = base / SLE_DRIVER_PATH
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..") / suse_repo.DRIVER_PATH)
    with serving(repos, root) as served:
        yield served


if __name__ == "__main__":
    # Build (or find) the images by hand: python tests/family_rpm_more.py
    for each in (FEDORA40_DNF, AMZN2023_DNF, SLES155_ZYPPER):
        print(overlay_image(each))
