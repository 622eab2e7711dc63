"""
Local signed dnf repositories on 127.0.0.1, as NVIDIA and Rocky Linux publish theirs: rpms signed
with rpmsign, ``repodata/`` made by the real createrepo_c (module metadata added with modifyrepo_c)
and ``repodata/repomd.xml.asc``, its detached signature (what ``repo_gpgcheck=1`` checks), each
repository with its own throwaway key, served by tests/apt_repo.py's ``serve``. The packages are
the STAND-INs of tests/standin_rpms.py.

One served root holds, for a Rocky Linux 9 node on x86_64:

- ``cuda/rhel9/x86_64/``: NVIDIA's CUDA repository layout, the key at ``D42D0685.pub`` beside it
  (the name NVIDIA's is published under), the ``nvidia-driver`` module streams;
- ``toolkit/stable/rpm/x86_64/``: NVIDIA's toolkit layout, the key at ``toolkit/stable/gpgkey``;
- ``rocky/9/BaseOS/x86_64/os/``: Rocky's own packages, the key at
  ``rocky/RPM-GPG-KEY-Rocky-9`` (installed on the node at /etc/pki/rpm-gpg/, as Rocky has it);
- ``tampered/...``: a copy of the toolkit and CUDA repositories whose signatures do not verify
  (repomd.xml altered after signing; rpms signed by another key);
- ``impostor/toolkit/stable/...``: a copy of the toolkit repository whose repomd.xml another valid key
  signed, that key at ``impostor/toolkit/stable/gpgkey`` (what a hijacked mirror or key URL serves);
- ``other-gpgkey``: that other key.

The repositories are served over http, their keys over https (``serve_keys``: a key is never fetched
over http); ``key_data`` gives the settings that point at a repository's key and pin its fingerprint.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import standin_rpms
from apt_repo import GpgKey, _run, make_key, serve, serve_keys
from family_images import RPM_TOOLS, family_image
from harness import run

CUDA_PATH = "cuda"  # nvidia_cuda_repo_url's path; NVIDIA's repository is <url>/<dist>/<arch>
CUDA_DIST = "rhel9"
CUDA_KEY_FILE = "D42D0685.pub"
TOOLKIT_PATH = "toolkit/stable"  # nvidia_toolkit_repo_url's path
ROCKY_PATH = "rocky/9/BaseOS/x86_64/os"
ROCKY_KEY_PATH = "rocky/RPM-GPG-KEY-Rocky-9"
ROCKY_KEY_ON_NODE = "/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9"
ROCKY_REPO_FILE = "/etc/yum.repos.d/rocky.repo"
TAMPERED = "tampered"
IMPOSTOR = "impostor"  # the served path of copies signed by another valid key, served beside them


def index(repo_dir: Path, key: GpgKey, modules: str | None = None) -> None:
    """createrepo_c over the rpms in ``repo_dir`` (and modifyrepo_c of ``modules``, modulemd YAML),
    then repomd.xml signed by ``key`` (repomd.xml.asc)."""
    commands = ["createrepo_c --quiet --general-compress-type=gz /repo"]
    if modules is not None:
        (repo_dir / "modules.yaml").write_text(modules)
        commands.append("modifyrepo_c --mdtype=modules /repo/modules.yaml /repo/repodata >/dev/null")
        commands.append("rm /repo/modules.yaml >/dev/null")
    result = run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{repo_dir.resolve()}:/repo",
            family_image(RPM_TOOLS),
            "sh",
            "-c",
            " && ".join(commands),
        ],
        check=False,
        timeout=300,
    )
    if result.returncode != 0:
        raise AssertionError(f"indexing {repo_dir} failed:\n{result.stdout}\n{result.stderr}")
    sign_metadata(repo_dir, key)


def sign_metadata(repo_dir: Path, key: GpgKey) -> None:
    """repodata/repomd.xml.asc: repomd.xml's detached signature by ``key``."""
    repomd = repo_dir / "repodata" / "repomd.xml"
    _run(
        "gpg",
        "--homedir",
        str(key.home),
        "--batch",
        "--yes",
        "--local-user",
        key.fingerprint,
        "--armor",
        "--detach-sign",
        "-o",
        f"{repomd}.asc",
        str(repomd),
    )
    key.stop_agent()


def impostor_copy(root: Path, path: str, repo_dir: str, key_file: str, key: GpgKey) -> None:
    """``root/IMPOSTOR/path``: the repository at ``root/path`` with its metadata (``repo_dir`` under it)
    signed by ``key``, whose public key is ``key_file`` beside it."""
    shutil.copytree(root / path, root / IMPOSTOR / path)
    sign_metadata(root / IMPOSTOR / path / repo_dir, key)
    (root / IMPOSTOR / path / key_file).write_text(key.armored_public_key())


def repo_file_text(name: str, baseurl: str, gpgkey: str, repo_gpgcheck: bool = True) -> str:
    """A .repo section checking the packages' signatures, and the metadata's with ``repo_gpgcheck``."""
    return (
        f"[{name}]\nname={name}\nbaseurl={baseurl}\nenabled=1\ngpgcheck=1\n"
        + ("repo_gpgcheck=1\n" if repo_gpgcheck else "")
        + f"gpgkey={gpgkey}\n"
    )


class ServedUrls:
    """The toolkit folder and the URLs of repositories under ``root`` served at ``url`` (their keys at
    ``keys_url``, over https), each with a TAMPERED copy beside it (for the signature-refusal tests):
    the Rocky, the other dnf and the SUSE families' repositories."""

    root: Path
    url: str
    keys_url: str
    toolkit_key: GpgKey

    @property
    def toolkit_dir(self) -> Path:
        return self.root / TOOLKIT_PATH / "rpm" / standin_rpms.ARCH

    def served_url(self, path: str, tampered: bool = False) -> str:
        """The URL of the repository at ``path`` under ``root``, or of its TAMPERED copy."""
        return f"{self.url}/{TAMPERED}/{path}" if tampered else f"{self.url}/{path}"

    def cuda_url(self, tampered: bool = False) -> str:
        return self.served_url(CUDA_PATH, tampered)

    def toolkit_url(self, tampered: bool = False) -> str:
        return self.served_url(TOOLKIT_PATH, tampered)

    def key_data(self, repository: str, path: str, key: GpgKey) -> dict[str, str]:
        """The settings that fetch ``repository``'s key (nvidia_toolkit, nvidia_cuda, nvidia_driver) from
        ``path`` under ``root`` over https and pin ``key``'s fingerprint."""
        return {
            f"{repository}_gpgkey_url": f"{self.keys_url}/{path}",
            f"{repository}_gpgkey_fingerprint": key.fingerprint,
        }

    def toolkit_key_data(self, tampered: bool = False) -> dict[str, str]:
        return self.key_data(
            "nvidia_toolkit",
            f"{TAMPERED}/{TOOLKIT_PATH}/gpgkey" if tampered else f"{TOOLKIT_PATH}/gpgkey",
            self.toolkit_key,
        )


@dataclass
class RockyRepos(ServedUrls):
    root: Path
    cuda_key: GpgKey
    toolkit_key: GpgKey
    rocky_key: GpgKey
    other_key: GpgKey
    url: str = ""
    keys_url: str = ""
    module_version: int = 9030020240101

    def cuda_key_data(self, tampered: bool = False) -> dict[str, str]:
        path = f"{CUDA_PATH}/{CUDA_DIST}/{standin_rpms.ARCH}/{CUDA_KEY_FILE}"
        return self.key_data("nvidia_cuda", f"{TAMPERED}/{path}" if tampered else path, self.cuda_key)

    @property
    def cuda_dir(self) -> Path:
        return self.root / CUDA_PATH / CUDA_DIST / standin_rpms.ARCH

    def driver_rpms(self) -> list[standin_rpms.StandinRpm]:
        return [
            rpm for rpm_list in (standin_rpms.driver_packages(v) for v in self.driver_versions()) for rpm in rpm_list
        ]

    def driver_versions(self) -> list[str]:
        names = {path.name for path in self.cuda_dir.glob("nvidia-driver-[0-9]*.rpm")}
        versions = [*standin_rpms.DRIVER_VERSIONS, standin_rpms.DRIVER_UPDATE]
        return [v for v in versions if f"nvidia-driver-{v}-{standin_rpms.DRIVER_RELEASE}.x86_64.rpm" in names]

    def publish_driver(self, version: str) -> None:
        """Add one driver version to the CUDA repository (a newer release NVIDIA publishes)."""
        standin_rpms.build(standin_rpms.driver_packages(version), self.cuda_dir, self.cuda_key)
        self.module_version += 1
        index(self.cuda_dir, self.cuda_key, standin_rpms.modules_yaml(self.driver_rpms(), self.module_version))

    def publish_toolkit(self, version: str) -> None:
        standin_rpms.build(standin_rpms.toolkit_packages(version), self.toolkit_dir, self.toolkit_key)
        index(self.toolkit_dir, self.toolkit_key)

    def node_setup(self, node) -> None:
        """The distribution's own repository on the node, as Rocky ships it: its .repo file (packages
        checked, gpgcheck=1; Rocky's metadata is not signed) and its key under /etc/pki/rpm-gpg."""
        node.write(ROCKY_KEY_ON_NODE, (self.root / ROCKY_KEY_PATH).read_text())
        node.write(
            ROCKY_REPO_FILE,
            repo_file_text("baseos", f"{self.url}/{ROCKY_PATH}", f"file://{ROCKY_KEY_ON_NODE}", repo_gpgcheck=False),
        )


def build(root: Path) -> RockyRepos:
    """Build the three repositories and the tampered copies under ``root`` (not served yet)."""
    keys = root.parent / f"{root.name}-gnupg"
    repos = RockyRepos(
        root=root,
        cuda_key=make_key(keys / "cuda", "standin-cuda"),
        toolkit_key=make_key(keys / "toolkit", "standin-toolkit-rpm"),
        rocky_key=make_key(keys / "rocky", "standin-rocky"),
        other_key=make_key(keys / "other", "standin-other"),
    )
    for key in (repos.cuda_key, repos.toolkit_key, repos.rocky_key, repos.other_key):
        key.stop_agent()
    repos.cuda_dir.mkdir(parents=True)
    rpms = [rpm for version in standin_rpms.DRIVER_VERSIONS for rpm in standin_rpms.driver_packages(version)]
    standin_rpms.build(rpms, repos.cuda_dir, repos.cuda_key)
    index(repos.cuda_dir, repos.cuda_key, standin_rpms.modules_yaml(rpms, repos.module_version))
    (repos.cuda_dir / CUDA_KEY_FILE).write_text(repos.cuda_key.armored_public_key())

    toolkit = [rpm for version in standin_rpms.TOOLKIT_VERSIONS for rpm in standin_rpms.toolkit_packages(version)]
    standin_rpms.build(toolkit, repos.toolkit_dir, repos.toolkit_key)
    index(repos.toolkit_dir, repos.toolkit_key)
    (root / TOOLKIT_PATH / "gpgkey").write_text(repos.toolkit_key.armored_public_key())

    rocky_dir = root / ROCKY_PATH
    standin_rpms.build(standin_rpms.distribution_packages(), rocky_dir, repos.rocky_key)
    index(rocky_dir, repos.rocky_key)
    (root / ROCKY_KEY_PATH).write_text(repos.rocky_key.armored_public_key())
    (root / "other-gpgkey").write_text(repos.other_key.armored_public_key())
    _write_tampered(repos)
    impostor_copy(root, TOOLKIT_PATH, f"rpm/{standin_rpms.ARCH}", "gpgkey", repos.other_key)
    return repos


def _write_tampered(repos: RockyRepos) -> None:
    """The toolkit repository with repomd.xml changed after signing (its .asc no longer verifies),
    and the CUDA repository with its rpms signed by another key (keys as the good ones')."""
    root = repos.root
    toolkit = root / TAMPERED / TOOLKIT_PATH
    shutil.copytree(root / TOOLKIT_PATH, toolkit)
    repomd = toolkit / "rpm" / standin_rpms.ARCH / "repodata" / "repomd.xml"
    repomd.write_text(repomd.read_text().replace("<revision>", "<revision>1", 1))
    cuda = root / TAMPERED / CUDA_PATH / CUDA_DIST / standin_rpms.ARCH
    rpms = [rpm for version in standin_rpms.DRIVER_VERSIONS for rpm in standin_rpms.driver_packages(version)]
    standin_rpms.build(rpms, cuda, repos.other_key)
    index(cuda, repos.cuda_key, standin_rpms.modules_yaml(rpms, repos.module_version))
    (cuda / CUDA_KEY_FILE).write_text(repos.cuda_key.armored_public_key())


@contextlib.contextmanager
def serving(repos: ServedUrls, root: Path):
    """``repos``, built under ``root``, served on 127.0.0.1 (keys over https): yields them with their
    ``url`` and ``keys_url`` set."""
    with serve(root) as url, serve_keys(root) as keys_url:
        repos.url, repos.keys_url = url, keys_url
        yield repos


def served(root: Path):
    """Build the repositories and serve them on 127.0.0.1; yields the RockyRepos with its ``url``."""
    return serving(build(root), root)
