"""
Local signed zypper repositories on 127.0.0.1, as NVIDIA publishes its SUSE ones: rpm-md
``repodata/`` made by the real createrepo_c, ``repodata/repomd.xml.asc`` (its detached signature,
what zypper's repo_gpgcheck checks) and ``repodata/repomd.xml.key`` (the key beside it, where the
family table's gpgkey ``{baseurl}/repodata/repomd.xml.key`` points), each repository with its own
throwaway key, served by tests/rpm_repo.py's ``serving``. Built with tests/rpm_repo.py's ``index``.

The packages are STAND-INs built with the real rpmbuild (tests/standin_rpms.py's builder) under
the real names NVIDIA's SUSE repository and its toolkit repository use:

- ``opensuse/leap/15.6/``: NVIDIA's driver repository for Leap 15.6 (download.nvidia.com's layout):
  nvidia-compute-G06, nvidia-compute-utils-G06 (it carries nvidia-persistenced and its unit: the
  family table names no package of its own), the proprietary KMP nvidia-driver-G06-kmp-default and
  the open one nvidia-open-driver-G06-signed-kmp-default (and both for other kernel variants asked
  for), whose versions carry the kernel's;
- ``toolkit/stable/rpm/x86_64/``: NVIDIA's toolkit layout, the key at ``toolkit/stable/gpgkey``
  (the toolkit's rpms are tests/standin_rpms.py's, its scripts tests/standin_toolkit.py's);
- ``tampered/...``: copies of both whose repomd.xml was altered after signing;
- ``impostor/toolkit/stable/...``: a copy of the toolkit repository whose repomd.xml another valid key
  signed, that key at ``impostor/toolkit/stable/gpgkey``.

Keys are served over https (tests/rpm_repo.py ``serving``); ``driver_key_data`` and
``toolkit_key_data`` give the settings that fetch a repository's key and pin its fingerprint.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import standin_rpms
from apt_repo import GpgKey, make_key
from rpm_repo import IMPOSTOR, TAMPERED, TOOLKIT_PATH, ServedUrls, impostor_copy, index, serving  # noqa: F401
from standin_rpms import PERSISTENCED_UNIT, StandinRpm

DRIVER_PATH = "opensuse/leap/15.6"  # the family table's baseurl path for Leap 15.6
KEY_FILE = "repodata/repomd.xml.key"
# NVIDIA's G06 rpms for Leap 15.6 carry an lp156 release; the KMPs' version carries the kernel's
RELEASE = "lp156.1.1"
KMP_KERNEL = "k6.4.0_150600.21"
DRIVER_VERSIONS = standin_rpms.DRIVER_VERSIONS
DRIVER_UPDATE = standin_rpms.DRIVER_UPDATE
KMP = "nvidia-driver-G06-kmp-{variant}"
OPEN_KMP_OF = "nvidia-open-driver-G06-signed-kmp-{variant}"
PROPRIETARY_KMP = KMP.format(variant="default")
OPEN_KMP = OPEN_KMP_OF.format(variant="default")


@dataclass(frozen=True)
class KmpRpm(StandinRpm):
    """A STAND-IN KMP: it provides multiversion(kernel), as SUSE's KMPs do (zypp.conf's multiversion
    installs a newer one beside the old instead of replacing it), and its base name at its version."""

    provides: tuple[str, ...] = ()

    def spec(self, payload: str) -> str:
        lines = "".join(f"Provides: {capability}\n" for capability in self.provides)
        return super().spec(payload).replace("%description", lines + "%description", 1)


def driver_packages(version: str, variants: tuple[str, ...] = ("default",)) -> list[StandinRpm]:
    """One G06 driver version's STAND-IN packages (both KMPs for each kernel variant)."""

    def doc(name):
        return {f"/usr/share/doc/packages/{name}/STAND-IN": f"stand-in {version}\n"}

    same = f"= {version}-{RELEASE}"
    kmp_version = f"{version}_{KMP_KERNEL}"
    return [
        StandinRpm("nvidia-compute-G06", version, RELEASE, files=doc("nvidia-compute-G06")),
        StandinRpm(
            "nvidia-compute-utils-G06",
            version,
            RELEASE,
            requires=(f"nvidia-compute-G06 {same}",),
            files={
                "/usr/bin/nvidia-smi": standin_rpms._smi_script(version),
                "/usr/bin/nvidia-persistenced": "#!/bin/sh\n# STAND-IN nvidia-persistenced\nexit 0\n",
                "/usr/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
            },
        ),
        # SUSE's KMPs require no userspace package (openSUSE's G06 KMPs list none): only a pin ties them
        *[
            KmpRpm(
                kmp.format(variant=variant),
                kmp_version,
                RELEASE,
                files=doc(kmp.format(variant=variant)),
                provides=("multiversion(kernel)", f"{kmp.format(variant='').rstrip('-')} = {kmp_version}"),
            )
            for variant in variants
            for kmp in (KMP, OPEN_KMP_OF)
        ],
    ]


def sign_and_key(repo_dir: Path, key: GpgKey) -> None:
    """createrepo_c, repomd.xml.asc, and repomd.xml.key beside them (NVIDIA's SUSE layout)."""
    index(repo_dir, key)
    (repo_dir / KEY_FILE).write_text(key.armored_public_key())


@dataclass
class SuseRepos(ServedUrls):
    root: Path
    driver_key: GpgKey
    toolkit_key: GpgKey
    other_key: GpgKey  # signed the IMPOSTOR copy only
    variants: tuple[str, ...] = ("default",)
    url: str = ""
    keys_url: str = ""

    @property
    def driver_dir(self) -> Path:
        return self.root / DRIVER_PATH

    def driver_url(self, tampered: bool = False) -> str:
        return self.served_url(DRIVER_PATH, tampered)

    def driver_key_data(self, tampered: bool = False, path: str = DRIVER_PATH) -> dict[str, str]:
        """The driver repository's key where it is published (``repodata/repomd.xml.key`` beside it),
        over https, pinned: NVIDIA publishes no fingerprint for it, so a site pins the key it checked."""
        key_path = f"{path}/{KEY_FILE}"
        return self.key_data("nvidia_driver", f"{TAMPERED}/{key_path}" if tampered else key_path, self.driver_key)

    def publish_driver(self, version: str) -> None:
        """Add one driver version to the driver repository (a newer release NVIDIA publishes)."""
        standin_rpms.build(
            driver_packages(version, self.variants), self.driver_dir / standin_rpms.ARCH, self.driver_key
        )
        sign_and_key(self.driver_dir, self.driver_key)

    def publish_toolkit(self, version: str) -> None:
        standin_rpms.build(standin_rpms.toolkit_packages(version), self.toolkit_dir, self.toolkit_key)
        index(self.toolkit_dir, self.toolkit_key)


def build(root: Path, variants: tuple[str, ...] = ("default",)) -> SuseRepos:
    """Build both repositories and their tampered copies under ``root`` (not served yet), the KMPs
    for each kernel variant in ``variants``."""
    keys = root.parent / f"{root.name}-gnupg"
    repos = SuseRepos(
        root=root,
        driver_key=make_key(keys / "driver", "standin-nvidia-suse"),
        toolkit_key=make_key(keys / "toolkit", "standin-toolkit-rpm"),
        other_key=make_key(keys / "other", "standin-other"),
        variants=tuple(dict.fromkeys(variants)),
    )
    for key in (repos.driver_key, repos.toolkit_key, repos.other_key):
        key.stop_agent()
    driver = [rpm for version in DRIVER_VERSIONS for rpm in driver_packages(version, repos.variants)]
    standin_rpms.build(driver, repos.driver_dir / standin_rpms.ARCH, repos.driver_key)
    sign_and_key(repos.driver_dir, repos.driver_key)
    toolkit = [rpm for version in standin_rpms.TOOLKIT_VERSIONS for rpm in standin_rpms.toolkit_packages(version)]
    standin_rpms.build(toolkit, repos.toolkit_dir, repos.toolkit_key)
    index(repos.toolkit_dir, repos.toolkit_key)
    (root / TOOLKIT_PATH / "gpgkey").write_text(repos.toolkit_key.armored_public_key())
    for repomd in (_tampered_copy(root, TOOLKIT_PATH) / "rpm" / standin_rpms.ARCH, _tampered_copy(root, DRIVER_PATH)):
        # repomd.xml changed after signing: its .asc no longer verifies (the keys are the good ones)
        path = repomd / "repodata" / "repomd.xml"
        path.write_text(path.read_text().replace("<revision>", "<revision>1", 1))
    impostor_copy(root, TOOLKIT_PATH, f"rpm/{standin_rpms.ARCH}", "gpgkey", repos.other_key)
    return repos


def _tampered_copy(root: Path, path: str) -> Path:
    shutil.copytree(root / path, root / TAMPERED / path)
    return root / TAMPERED / path


def served(root: Path, variants: tuple[str, ...] = ("default",)):
    """Build the repositories and serve them on 127.0.0.1; yields the SuseRepos with its ``url``."""
    return serving(build(root, variants), root)
