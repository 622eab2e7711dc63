"""
The Ubuntu family run by its real package manager: a node image (tests/family_images.py's
FamilyImage) on the bookworm node image with Ubuntu's os-release (tests/fixtures/nvidia/os-release/),
Ubuntu's own apt sources file, and a STAND-IN ``ubuntu-drivers``; and a local signed apt archive with
Ubuntu's layout on 127.0.0.1 holding STAND-IN debs under the real names and versions of Ubuntu's
``nvidia-graphics-drivers-<branch>-server`` packages.

What is real and what is a stand-in:

- REAL: apt 2.6 and dpkg (Debian's: the same apt Ubuntu runs), apt-mark holds, gpgv signature checks
  of the archive's InRelease, systemd; Ubuntu's /etc/os-release; Ubuntu's apt sources file (22.04's
  one-line /etc/apt/sources.list; 24.04's deb822 /etc/apt/sources.list.d/ubuntu.sources with its
  Signed-By keyring), its hosts rewritten to the local archive (and resolving to 127.0.0.1 besides).
- STAND-IN: every deb in the archive (built by dpkg-deb with tests/apt_repo.py: the driver's
  packages, with the exact-version dependencies Ubuntu's have between them, a ``nvidia-smi`` that
  exits 9 as on a node without a driver, a ``nvidia-persistenced`` unit; ``linux-headers-generic``;
  no DKMS, no module), the archive's signing key (installed where Ubuntu keeps its archive key), and
  ``ubuntu-drivers``: our script answering ``list --gpgpu`` in the real tool's format (one line per
  GPGPU driver, ``<nvidia-headless-no-dkms-...>, (kernel modules provided by <package>)``, DKMS's
  package since no linux-modules-nvidia package matches the machine's kernel), as the real one does
  on a node whose GPU every driver branch in the lists supports. Debian's own sources are removed.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from apt_repo import BUILD_EPOCH, GpgKey, _run, build_deb, make_key, serve
from family_images import FamilyImage

ARCH = "amd64"
BRANCH = "550"
ARCHIVE_PATH = "ubuntu"  # the archive's path on the local server, as archive.ubuntu.com/ubuntu
TAMPERED = "tampered"
REAL_HOSTS = (
    "archive.ubuntu.com",
    "security.ubuntu.com",
    "ports.ubuntu.com",
    "nvidia.github.io",
    "developer.download.nvidia.com",
    "download.docker.com",
)

# The stand-in recommender: the real ``list --gpgpu`` prints, for each driver package whose
# modaliases match the GPU, its headless-no-dkms metapackage and the package carrying its modules.
UBUNTU_DRIVERS = textwrap.dedent("""\
    #!/bin/sh
    # STAND-IN ubuntu-drivers (gpu-node tests): answers `list --gpgpu` in the real tool's format, as
    # on a node whose NVIDIA GPU every driver in the apt lists supports.
    if [ "$1 $2" != "list --gpgpu" ]; then
      echo "stand-in ubuntu-drivers: only 'list --gpgpu' is answered" >&2
      exit 2
    fi
    apt-cache pkgnames nvidia-headless-no-dkms- 2>/dev/null | sort | while read -r meta; do
      echo "$meta, (kernel modules provided by nvidia-dkms-${meta#nvidia-headless-no-dkms-})"
    done
    """)


@dataclass(frozen=True)
class UbuntuRelease:
    version: str  # 22.04
    codename: str  # jammy
    os_release: str  # a file under tests/fixtures/nvidia/os-release
    sources_path: str  # Ubuntu's own apt sources file
    sources: str
    key_path: str  # where Ubuntu keeps its archive key (binary keyring)
    headers_version: str  # linux-headers-generic's version in the release

    def driver_version(self, upstream: str) -> str:
        """Ubuntu's version of a driver release in this release's -updates: 550.127.05-0ubuntu0.22.04.1."""
        return f"{upstream}-0ubuntu0.{self.version}.1"

    def image(self) -> FamilyImage:
        return FamilyImage(
            name=f"ubuntu{self.version.replace('.', '')}-apt",
            packages=(),
            os_release=self.os_release,
            files={self.sources_path: self.sources, "/usr/bin/ubuntu-drivers": UBUNTU_DRIVERS},
            setup="\n".join(
                [
                    "chmod 755 /usr/bin/ubuntu-drivers",
                    # Debian's own sources go: the node's only archive is Ubuntu's (served locally)
                    "rm -f /etc/apt/sources.list.d/debian.sources",
                    *(["rm -f /etc/apt/sources.list"] if self.sources_path != "/etc/apt/sources.list" else []),
                ]
            ),
        )


# Ubuntu 22.04's /etc/apt/sources.list (its server install, comments left out)
JAMMY_SOURCES = "".join(
    f"deb http://{host}/ubuntu jammy{suite} main restricted universe multiverse\n"
    for host, suite in (
        ("archive.ubuntu.com", ""),
        ("archive.ubuntu.com", "-updates"),
        ("archive.ubuntu.com", "-backports"),
        ("security.ubuntu.com", "-security"),
    )
)
# Ubuntu 24.04's /etc/apt/sources.list.d/ubuntu.sources
NOBLE_SOURCES = textwrap.dedent("""\
    Types: deb
    URIs: http://archive.ubuntu.com/ubuntu/
    Suites: noble noble-updates noble-backports
    Components: main restricted universe multiverse
    Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg

    Types: deb
    URIs: http://security.ubuntu.com/ubuntu/
    Suites: noble-security
    Components: main restricted universe multiverse
    Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg
    """)

JAMMY = UbuntuRelease(
    "22.04",
    "jammy",
    "ubuntu-22.04",
    "/etc/apt/sources.list",
    JAMMY_SOURCES,
    "/etc/apt/trusted.gpg.d/ubuntu-keyring-2018-archive.gpg",
    "5.15.0.125.123",
)
NOBLE = UbuntuRelease(
    "24.04",
    "noble",
    "ubuntu-24.04",
    "/etc/apt/sources.list.d/ubuntu.sources",
    NOBLE_SOURCES,
    "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
    "6.8.0.49.49",
)

# Releases of the 550-server branch: an older one, the newest one (pinned), one published later
OLDER_UPSTREAM, PINNED_UPSTREAM, UPDATE_UPSTREAM = "550.127.05", "550.144.03", "550.163.01"
MODULE_TYPE_SUFFIXES = ("", "-open")  # the proprietary and open kernel module packages
COMPONENTS = ("main", "restricted", "universe", "multiverse")


def _smi(upstream: str) -> str:
    return (
        "#!/bin/sh\n# STAND-IN nvidia-smi (gpu-node tests)\n"
        f"echo 'STAND-IN {upstream}: NVIDIA-SMI has failed because it could not communicate with the "
        "NVIDIA driver.' >&2\nexit 9\n"
    )


PERSISTENCED_UNIT = textwrap.dedent("""\
    [Unit]
    Description=STAND-IN NVIDIA Persistence Daemon (gpu-node tests)
    ConditionPathExists=/dev/nvidiactl

    [Service]
    Type=oneshot
    ExecStart=/usr/bin/nvidia-persistenced

    [Install]
    WantedBy=multi-user.target
    """)


def driver_packages(version: str) -> dict[str, tuple[str, dict[str, str]]]:
    """package -> (Depends, files) of the 550-server branch at ``version``, with Ubuntu's names and the
    exact-version dependencies between them (Ubuntu's also depend on dkms and more; left out)."""
    upstream = version.split("-")[0]
    at = f"(= {version})"
    common = {
        f"libnvidia-compute-{BRANCH}-server": (
            "",
            {f"/usr/share/doc/libnvidia-compute-{BRANCH}-server/STAND-IN": "stand-in\n"},
        ),
        f"nvidia-kernel-common-{BRANCH}-server": (
            "",
            {f"/usr/share/doc/nvidia-kernel-common-{BRANCH}-server/STAND-IN": "stand-in\n"},
        ),
        f"nvidia-compute-utils-{BRANCH}-server": (
            "",
            {
                "/usr/bin/nvidia-persistenced": f"#!/bin/sh\n# STAND-IN nvidia-persistenced {upstream}\nexit 0\n",
                "/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
            },
        ),
        f"nvidia-utils-{BRANCH}-server": (
            f"libnvidia-compute-{BRANCH}-server {at}",
            {"/usr/bin/nvidia-smi": _smi(upstream)},
        ),
    }
    for suffix in MODULE_TYPE_SUFFIXES:
        common[f"nvidia-headless-no-dkms-{BRANCH}-server{suffix}"] = (
            f"nvidia-compute-utils-{BRANCH}-server {at}, libnvidia-compute-{BRANCH}-server {at}, "
            f"nvidia-kernel-common-{BRANCH}-server {at}",
            {},
        )
        common[f"nvidia-dkms-{BRANCH}-server{suffix}"] = (
            f"nvidia-kernel-common-{BRANCH}-server {at}",
            {f"/usr/src/nvidia-{upstream}/STAND-IN": f"stand-in {'open' if suffix else 'proprietary'} module source\n"},
        )
        common[f"nvidia-headless-{BRANCH}-server{suffix}"] = (
            f"nvidia-headless-no-dkms-{BRANCH}-server{suffix} {at}, nvidia-dkms-{BRANCH}-server{suffix} {at}",
            {},
        )
    return common


def with_source(deb: Path, source: str) -> None:
    """Name the deb's source package in its control file (Ubuntu's driver binaries all come from
    nvidia-graphics-drivers-<branch>-server: apt preferences can pin them as ``src:``)."""
    unpacked = Path(tempfile.mkdtemp(prefix="deb-source-"))
    try:
        _run("dpkg-deb", "-R", str(deb), str(unpacked / "root"))
        control = unpacked / "root" / "DEBIAN" / "control"
        lines = control.read_text().splitlines()
        control.write_text("\n".join([lines[0], f"Source: {source}", *lines[1:]]) + "\n")
        for path in [unpacked / "root", *(unpacked / "root").rglob("*")]:
            os.utime(path, (BUILD_EPOCH, BUILD_EPOCH), follow_symlinks=False)
        _run(
            "dpkg-deb",
            "--root-owner-group",
            "--build",
            str(unpacked / "root"),
            str(deb),
            env={**os.environ, "SOURCE_DATE_EPOCH": str(BUILD_EPOCH)},
        )
    finally:
        shutil.rmtree(unpacked)


DESCRIPTION = "STAND-IN for tests, not Ubuntu's {name}\n Built by gpu-node's test suite."


@dataclass
class UbuntuArchive:
    """The local archive of one release: ``<root>/ubuntu/{dists,pool}``; ``tampered/ubuntu`` is a copy
    whose InRelease was altered after signing."""

    release: UbuntuRelease
    root: Path
    key: GpgKey
    url: str = ""
    published: list[str] = field(default_factory=list)  # upstream driver versions in -updates

    @property
    def pool(self) -> Path:
        return self.root / ARCHIVE_PATH / "pool"

    def suite_dir(self, suite: str) -> Path:
        return self.root / ARCHIVE_PATH / "dists" / suite

    def publish_driver(self, upstream: str) -> str:
        """Build the driver's packages at Ubuntu's version of ``upstream`` into -updates and sign again."""
        version = self.release.driver_version(upstream)
        out = self.pool / "restricted" / "n" / f"nvidia-graphics-drivers-{BRANCH}-server"
        out.mkdir(parents=True, exist_ok=True)
        for name, (depends, files) in driver_packages(version).items():
            deb = build_deb(out, name, version, depends, files, ARCH, DESCRIPTION.format(name=name))
            with_source(deb, f"nvidia-graphics-drivers-{BRANCH}-server")
        self.published.append(upstream)
        self.index()
        return version

    def index(self) -> None:
        """Packages of each suite and component (drivers in -updates/restricted, headers in the release's
        main; the other suites empty), each suite's Release signed as InRelease and Release.gpg."""
        base = self.root / ARCHIVE_PATH
        codename = self.release.codename
        placed = {(codename, "main"): "pool/main", (f"{codename}-updates", "restricted"): "pool/restricted"}
        for suffix in ("", "-updates", "-backports", "-security"):
            suite = f"{codename}{suffix}"
            for component in COMPONENTS:
                binary = self.suite_dir(suite) / component / f"binary-{ARCH}"
                binary.mkdir(parents=True, exist_ok=True)
                where = placed.get((suite, component))
                text = _run("apt-ftparchive", "packages", where, cwd=base).stdout if where else ""
                (binary / "Packages").write_text(text)
                (binary / "Packages.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
            for stale in ("Release", "InRelease", "Release.gpg"):
                (self.suite_dir(suite) / stale).unlink(missing_ok=True)
            release = _run(
                "apt-ftparchive",
                "-o",
                "APT::FTPArchive::Release::Origin=Ubuntu",
                "-o",
                "APT::FTPArchive::Release::Label=Ubuntu (STAND-IN archive of gpu-node's tests)",
                "-o",
                f"APT::FTPArchive::Release::Suite={suite}",
                "-o",
                f"APT::FTPArchive::Release::Codename={codename}",
                "-o",
                f"APT::FTPArchive::Release::Architectures={ARCH}",
                "-o",
                f"APT::FTPArchive::Release::Components={' '.join(COMPONENTS)}",
                "release",
                ".",
                cwd=self.suite_dir(suite),
            ).stdout
            (self.suite_dir(suite) / "Release").write_text(release)
            for args, out in ((["--clearsign"], "InRelease"), (["-abs"], "Release.gpg")):
                _run(
                    "gpg",
                    "--homedir",
                    str(self.key.home),
                    "--batch",
                    "--yes",
                    "--local-user",
                    self.key.fingerprint,
                    *args,
                    "-o",
                    str(self.suite_dir(suite) / out),
                    str(self.suite_dir(suite) / "Release"),
                )
        self.key.stop_agent()
        self._tampered_copy()

    def _tampered_copy(self) -> None:
        copy = self.root / TAMPERED / ARCHIVE_PATH
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.root / ARCHIVE_PATH, copy)
        updates = copy / "dists" / f"{self.release.codename}-updates"
        (updates / "Release.gpg").unlink()
        signed = (updates / "InRelease").read_text()
        # Changed after signing: the clearsigned text no longer matches its signature (apt: BADSIG)
        (updates / "InRelease").write_text(signed.replace("Label: Ubuntu", "Label: ALTERED", 1))

    def archive_url(self, tampered: bool = False) -> str:
        return f"{self.url}/{TAMPERED}/{ARCHIVE_PATH}" if tampered else f"{self.url}/{ARCHIVE_PATH}"

    def node_setup(self, node, tampered: bool = False) -> None:
        """Ubuntu's sources file pointed at the local archive, its key where Ubuntu keeps the archive's,
        and the real hosts resolving to 127.0.0.1 besides."""
        node.sh(f"printf '127.0.0.1 %s\\n' {' '.join(REAL_HOSTS)} >> /etc/hosts")
        key = self.key.binary_public_key()
        path = self.release.key_path
        subprocess.run(
            ["docker", "exec", "-i", node.id, "sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}"],
            input=key,
            check=True,
        )
        url = self.archive_url(tampered)
        node.sh(
            f"sed -i -e 's#http://archive.ubuntu.com/ubuntu/*#{url}/#' "
            f"-e 's#http://security.ubuntu.com/ubuntu/*#{url}/#' {self.release.sources_path}"
        )


def build(release: UbuntuRelease, root: Path) -> UbuntuArchive:
    """The archive with the headers and the driver at an older and the newest (pinned) version."""
    keys = root.parent / f"{root.name}-gnupg"
    archive = UbuntuArchive(release=release, root=root, key=make_key(keys / "archive", "standin-ubuntu-archive"))
    main = archive.pool / "main" / "l" / "linux-meta"
    main.mkdir(parents=True, exist_ok=True)
    build_deb(
        main,
        "linux-headers-generic",
        release.headers_version,
        "",
        {"/usr/share/doc/linux-headers-generic/STAND-IN": "stand-in\n"},
        ARCH,
        DESCRIPTION.format(name="linux-headers-generic"),
    )
    for upstream in (OLDER_UPSTREAM, PINNED_UPSTREAM):
        archive.publish_driver(upstream)
    return archive


@contextlib.contextmanager
def served(release: UbuntuRelease, root: Path):
    """Build the archive and serve it on 127.0.0.1; yields the UbuntuArchive with its ``url``."""
    archive = build(release, root)
    with serve(root) as url:
        archive.url = url
        yield archive
