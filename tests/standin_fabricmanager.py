"""
STAND-IN NVIDIA Fabric Manager packages, served from a local signed apt repository laid out like
NVIDIA's CUDA repository: no package registry ships Fabric Manager, NVSwitch hardware is not
here, and NVIDIA's repository is not reachable from the tests.

What is REAL (NVIDIA's, as its CUDA repository for Debian 12 publishes them; the names and the
version scheme as NVIDIA's driver container installs them):

- the layout: a flat repository at ``<base>/debian12/x86_64/`` (``deb <base>/debian12/x86_64/ /``),
  its armoured key beside it as ``3bf863cc.pub``, what ``nvidia_cuda_repo_url`` points at;
- the package names: up to branch 575 the branch is in the name (``nvidia-fabricmanager-535``,
  ``libnvidia-nscq-535``), from 580 it is not (``nvidia-fabricmanager``, ``libnvidia-nscq``); the
  version is the driver's own with ``-1`` (``535.261.03-1`` beside Debian's driver 535.261.03-1);
  ``nvlsm`` carries a date version (``2025.10.14-1``) that follows no driver;
- the paths: ``/usr/bin/nv-fabricmanager``, its config ``/usr/share/nvidia/nvswitch/fabricmanager.cfg``,
  the unit ``nvidia-fabricmanager.service`` (a forking daemon with its PID file under
  ``/var/run/nvidia-fabricmanager/``), ``/opt/nvidia/nvlsm/sbin/nvlsm``.

What is a STAND-IN (ours): every file's content. ``nv-fabricmanager`` logs its start to
``STANDIN_LOG`` and stays up (so the unit can be enabled and started in a node container without an
NVSwitch); the unit file, the config and NSCQ are our own short text; ``nvlsm`` only logs. Every
package description says STAND-IN. The repository is signed with a throwaway key and served on
127.0.0.1 only; apt, gpgv, the deploy's pins and holds and systemd run for real against it. Every
test that uses this module says "standin" in its name and STAND-IN in its docstring.
"""

from __future__ import annotations

import contextlib
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from apt_repo import build_deb, make_key, serve, serve_keys, sign_flat_repository

STANDIN_LOG = "/var/log/nvidia-fabricmanager-standin.log"
UNIT = "nvidia-fabricmanager.service"
DIST = "debian12"
REPO_ARCH = "x86_64"
KEY_FILE = "3bf863cc.pub"
# Debian bookworm's driver release the tests pin (nvidia_driver_version): the matching Fabric
# Manager is 535.261.03-1. (bookworm-security carries a newer 535 too; a pin keeps the tests exact.)
DRIVER_VERSION = "535.261.03"
DRIVER_PACKAGE_VERSION = "535.261.03-1"
# An older and a newer 535 beside it, so an unpinned install or a wrong pin is observable; and one
# 580, the branch whose packages dropped the branch from their names.
FABRIC_VERSIONS = ("535.247.01-1", "535.261.03-1", "535.274.02-1", "580.95.05-1")
NVLSM_VERSION = "2025.10.14-1"


def branch_of(version: str) -> int:
    return int(version.split(".", 1)[0])


def fabric_package(version: str) -> str:
    """NVIDIA's name of Fabric Manager's package for a driver version."""
    return "nvidia-fabricmanager" if branch_of(version) >= 580 else f"nvidia-fabricmanager-{branch_of(version)}"


def nscq_package(version: str) -> str:
    return "libnvidia-nscq" if branch_of(version) >= 580 else f"libnvidia-nscq-{branch_of(version)}"


def package_names(fabric_versions: tuple[str, ...] = FABRIC_VERSIONS) -> list[str]:
    """The Fabric Manager and NSCQ package names the repository serves for these versions."""
    return sorted({name for version in fabric_versions for name in (fabric_package(version), nscq_package(version))})


def _daemon_script(version: str) -> str:
    upstream = version.split("-")[0]
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nv-fabricmanager (gpu-node tests): log the start, then stay up as a forking daemon.
        if [ "$1" = "--version" ] || [ "$1" = "-v" ]; then
          echo "Fabric Manager version is : {upstream} (stand-in for tests)"
          exit 0
        fi
        mkdir -p /var/run/nvidia-fabricmanager
        echo "$(date +%s) start version={upstream} args=$*" >> {STANDIN_LOG}
        sleep infinity >/dev/null 2>&1 &
        echo $! > /var/run/nvidia-fabricmanager/nv-fabricmanager.pid
        """
    )


UNIT_TEXT = textwrap.dedent(
    """\
    # STAND-IN unit (gpu-node tests), shaped like NVIDIA's nvidia-fabricmanager.service
    [Unit]
    Description=NVIDIA fabric manager service (STAND-IN)
    After=network-online.target

    [Service]
    Type=forking
    PIDFile=/var/run/nvidia-fabricmanager/nv-fabricmanager.pid
    ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
    LimitCORE=infinity
    TimeoutStartSec=30

    [Install]
    WantedBy=multi-user.target
    """
)

CONFIG_TEXT = "# STAND-IN fabricmanager.cfg (gpu-node tests)\nLOG_FILE_NAME=/var/log/fabricmanager.log\n"

NVLSM_SCRIPT = textwrap.dedent(
    f"""\
    #!/bin/sh
    # STAND-IN nvlsm (gpu-node tests)
    echo "$(date +%s) nvlsm args=$*" >> {STANDIN_LOG}
    """
)


def packages(version: str) -> dict[str, tuple[str, str, dict[str, str]]]:
    """name -> (version, Depends, {path: content}) of one Fabric Manager release."""
    nscq = nscq_package(version)
    return {
        fabric_package(version): (version, "", {
            "/usr/bin/nv-fabricmanager": _daemon_script(version),
            "/lib/systemd/system/nvidia-fabricmanager.service": UNIT_TEXT,
            "/usr/share/nvidia/nvswitch/fabricmanager.cfg": CONFIG_TEXT,
        }),
        nscq: (version, "", {f"/usr/share/doc/{nscq}/STAND-IN": "stand-in NSCQ (gpu-node tests)\n"}),
    }


NVLSM = {"nvlsm": (NVLSM_VERSION, "", {"/opt/nvidia/nvlsm/sbin/nvlsm": NVLSM_SCRIPT})}


@dataclass
class StandinCudaRepo:
    root: Path  # served as the base, NVIDIA's ".../compute/cuda/repos"
    fabric_versions: tuple[str, ...]
    fingerprint: str = ""  # of the throwaway key that signs it
    served: dict[str, list[str]] = field(default_factory=dict)  # package -> versions in the index
    url: str = ""  # over http
    keys_url: str = ""  # the same tree over https, for its key (a key is never fetched over http)

    @property
    def repo_dir(self) -> Path:
        return self.root / DIST / REPO_ARCH

    def data(self) -> dict[str, str]:
        """The --data that points the deploy's Fabric Manager at this repository once it is served, its
        key pinned."""
        return {"nvidia_cuda_repo_url": self.url, "allow_insecure_repositories": "true",
                "nvidia_cuda_gpgkey_url": f"{self.keys_url}/{DIST}/{REPO_ARCH}/{KEY_FILE}",
                "nvidia_cuda_gpgkey_fingerprint": self.fingerprint}


def build_repo(root: Path, fabric_versions: tuple[str, ...] = FABRIC_VERSIONS, arch: str = "amd64") -> StandinCudaRepo:
    """Publish the stand-in packages at ``root/debian12/x86_64``, signed, with the armoured key
    beside them as ``3bf863cc.pub``."""
    repo = StandinCudaRepo(root=root, fabric_versions=fabric_versions)
    repo.repo_dir.mkdir(parents=True, exist_ok=True)
    releases = [packages(version) for version in fabric_versions] + [NVLSM]
    for release in releases:
        for name, (version, depends, files) in release.items():
            build_deb(repo.repo_dir, name, version, depends, files, arch,
                      f"STAND-IN for NVIDIA's {name} (gpu-node tests; not NVIDIA's software)")
            repo.served.setdefault(name, []).append(version)
    key = make_key(root.parent / f"{root.name}-gnupg", "gpu-node-tests-cuda-signing")
    sign_flat_repository(repo.repo_dir, key, origin="gpu-node tests", label="NVIDIA CUDA repository STAND-IN")
    (repo.repo_dir / KEY_FILE).write_text(key.armored_public_key())
    key.stop_agent()
    repo.fingerprint = key.fingerprint
    return repo


@contextlib.contextmanager
def served(root: Path, fabric_versions: tuple[str, ...] = FABRIC_VERSIONS, arch: str = "amd64"):
    """Build the repository and serve it on 127.0.0.1; yields the StandinCudaRepo with its ``url``."""
    repo = build_repo(root, fabric_versions, arch)
    with serve(root) as url, serve_keys(root) as keys_url:
        repo.url, repo.keys_url = url, keys_url
        yield repo


if __name__ == "__main__":
    # Build and serve the repository by hand: python tests/standin_fabricmanager.py
    import tempfile
    import time

    workdir = Path(tempfile.mkdtemp(prefix="standin-cuda-repo-"))
    with served(workdir / "repos") as repo:
        print(f"STAND-IN CUDA repository at {repo.url}/{DIST}/{REPO_ARCH}/ (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
