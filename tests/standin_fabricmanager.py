"""
STAND-IN NVIDIA Fabric Manager and IMEX packages, served from a local signed apt repository laid out
like NVIDIA's CUDA repository: no package registry ships Fabric Manager or IMEX, NVSwitch and
multi-node NVLink hardware are not here, and NVIDIA's repository is not reachable from the tests.

What is REAL (NVIDIA's, as its CUDA repository for Debian 12 publishes them; the names and the
version scheme as NVIDIA's driver container installs them):

- the layout: a flat repository at ``<base>/debian12/x86_64/`` (``deb <base>/debian12/x86_64/ /``),
  its armoured key beside it as ``3bf863cc.pub``, what ``nvidia_cuda_repo_url`` points at;
- the package names: up to branch 575 the branch is in the name (``nvidia-fabricmanager-535``,
  ``libnvidia-nscq-535``), from 580 it is not (``nvidia-fabricmanager``, ``libnvidia-nscq``); the
  version is the driver's own with ``-1`` (``535.261.03-1`` beside Debian's driver 535.261.03-1);
  ``nvlsm`` carries a date version (``2025.10.14-1``) that follows no driver; IMEX is
  ``nvidia-imex-<branch>`` up to 575 and ``nvidia-imex`` from 580, at the driver's version, from 550 on;
- the paths: ``/usr/bin/nv-fabricmanager``, its config ``/usr/share/nvidia/nvswitch/fabricmanager.cfg``,
  the unit ``nvidia-fabricmanager.service`` (a forking daemon with its PID file under
  ``/var/run/nvidia-fabricmanager/``), ``/opt/nvidia/nvlsm/sbin/nvlsm``; IMEX's
  ``/usr/bin/nvidia-imex``, ``/usr/bin/nvidia-imex-ctl``, ``/etc/nvidia-imex/config.cfg`` (its keys
  ``SERVER_PORT`` and ``IMEX_NODE_CONFIG_FILE`` as NVIDIA's IMEX guide names them) and the unit
  ``nvidia-imex.service``.

What is a STAND-IN (ours): every file's content. ``nv-fabricmanager`` logs its start to
``STANDIN_LOG`` and stays up (so the unit can be enabled and started in a node container without an
NVSwitch); the unit file, the config and NSCQ are our own short text; ``nvlsm`` only logs. The
IMEX daemon (python3) serves its one line, "READY <version>", on its address and the config's port,
and logs its start and stop with the kernel's monotonic clock (one clock for every node container);
it forks once it serves (as IMEX does with DAEMONIZE=1, so systemd's start and restart return then);
the real daemon finds its address among the node's interfaces, which node containers share, so the
stand-in reads it from ``IMEX_ADDRESS_FILE`` (the test writes it). ``nvidia-imex-ctl -N`` asks every
member of nodes_config.cfg and prints the domain in the shape NVIDIA's and AWS's guides show
("Node #N - ADDRESS - STATE - Version: V", "Domain State: UP|DEGRADED|DOWN"). Every package
description says STAND-IN. The repository is signed with a throwaway key and served on
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
# IMEX is packaged from 550 on: the stand-in driver the IMEX test gives its nodes (a STAND-IN nvidia.ko,
# tests/standin_kmod.py) is 550.163.01; an older and a newer 550 beside it, and one 580
IMEX_DRIVER_VERSION = "550.163.01"
IMEX_VERSIONS = ("550.144.03-1", "550.163.01-1", "550.181.05-1", "580.95.05-1")
IMEX_ADDRESS_FILE = "/etc/nvidia-imex/standin-address"
IMEX_LOG = "/var/log/nvidia-imex-standin.log"
IMEX_PID_FILE = "/run/nvidia-imex-standin.pid"
IMEX_UNIT = "nvidia-imex.service"


def branch_of(version: str) -> int:
    return int(version.split(".", 1)[0])


def fabric_package(version: str) -> str:
    """NVIDIA's name of Fabric Manager's package for a driver version."""
    return "nvidia-fabricmanager" if branch_of(version) >= 580 else f"nvidia-fabricmanager-{branch_of(version)}"


def nscq_package(version: str) -> str:
    return "libnvidia-nscq" if branch_of(version) >= 580 else f"libnvidia-nscq-{branch_of(version)}"


def imex_package(version: str) -> str:
    return "nvidia-imex" if branch_of(version) >= 580 else f"nvidia-imex-{branch_of(version)}"


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
        fabric_package(version): (
            version,
            "",
            {
                "/usr/bin/nv-fabricmanager": _daemon_script(version),
                "/lib/systemd/system/nvidia-fabricmanager.service": UNIT_TEXT,
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg": CONFIG_TEXT,
            },
        ),
        nscq: (version, "", {f"/usr/share/doc/{nscq}/STAND-IN": "stand-in NSCQ (gpu-node tests)\n"}),
    }


NVLSM = {"nvlsm": (NVLSM_VERSION, "", {"/opt/nvidia/nvlsm/sbin/nvlsm": NVLSM_SCRIPT})}


def _imex_daemon(version: str) -> str:
    upstream = version.split("-")[0]
    return textwrap.dedent(
        f"""\
        #!/usr/bin/python3
        # STAND-IN nvidia-imex (gpu-node tests): serve "READY <version>" on this member's address and the
        # config's SERVER_PORT; log start and stop with the kernel's monotonic clock.
        import os, signal, socket, sys, time
        config = {{}}
        with open(sys.argv[sys.argv.index("-c") + 1] if "-c" in sys.argv else "/etc/nvidia-imex/config.cfg") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key and not key.startswith("#"):
                    config[key] = value
        address = open("{IMEX_ADDRESS_FILE}").read().strip()
        members = [line.strip() for line in open(config["IMEX_NODE_CONFIG_FILE"]) if line.strip()]
        def log(event):
            with open("{IMEX_LOG}", "a") as out:
                out.write(f"{{time.monotonic_ns()}} {{event}} {{address}} version={upstream} "
                          f"members={{','.join(members)}}\\n")
        def stop(*_):
            log("stop")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        server = socket.create_server((address, int(config.get("SERVER_PORT", "50000"))))
        log("start")
        # a forking daemon, as IMEX's DAEMONIZE=1: systemd's start returns once it serves
        child = os.fork()
        if child:
            with open("{IMEX_PID_FILE}", "w") as pid_file:
                pid_file.write(f"{{child}}\\n")
            os._exit(0)
        while True:
            connection, _ = server.accept()
            connection.sendall(b"READY {upstream}\\n")
            connection.close()
        """
    )


IMEX_CTL = textwrap.dedent(
    """\
    #!/usr/bin/python3
    # STAND-IN nvidia-imex-ctl (gpu-node tests): -N asks every member of nodes_config.cfg for its state.
    import socket, sys
    config = {}
    for line in open("/etc/nvidia-imex/config.cfg"):
        key, _, value = line.strip().partition("=")
        if key and not key.startswith("#"):
            config[key] = value
    port = int(config.get("SERVER_PORT", "50000"))
    members = [line.strip() for line in open(config["IMEX_NODE_CONFIG_FILE"]) if line.strip()]
    def ask(address):
        try:
            with socket.create_connection((address, port), timeout=2) as connection:
                return connection.makefile().readline().split()
        except OSError:
            return ["UNAVAILABLE", "-"]
    own = open("/etc/nvidia-imex/standin-address").read().strip()
    if "-N" not in sys.argv:
        sys.exit("STAND-IN nvidia-imex-ctl: only -N")
    if ask(own)[0] != "READY":
        sys.exit("STAND-IN nvidia-imex-ctl: failed to connect to the local IMEX daemon")
    states = [ask(address) for address in members]
    print("Nodes:")
    for index, (address, (state, version)) in enumerate(zip(members, states)):
        print(f"Node #{index:<3} - {address:<15} - {state:<20} - Version: {version}")
    ready = sum(state == "READY" for state, _ in states)
    print()
    print("Domain State: " + ("UP" if ready == len(states) else "DOWN" if ready == 0 else "DEGRADED"))
    """
)

IMEX_UNIT_TEXT = textwrap.dedent(
    """\
    # STAND-IN unit (gpu-node tests), shaped like NVIDIA's nvidia-imex.service
    [Unit]
    Description=NVIDIA IMEX service (STAND-IN)
    After=network-online.target

    [Service]
    Type=forking
    PIDFile=/run/nvidia-imex-standin.pid
    ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg

    [Install]
    WantedBy=multi-user.target
    """
)


def imex_packages(version: str, port: int) -> dict[str, tuple[str, str, dict[str, str]]]:
    """name -> (version, Depends, {path: content}) of one IMEX release, its daemon on ``port``."""
    config = (
        "# STAND-IN config.cfg (gpu-node tests)\n"
        f"SERVER_PORT={port}\nIMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n"
    )
    return {
        imex_package(version): (
            version,
            "python3",
            {
                "/usr/bin/nvidia-imex": _imex_daemon(version),
                "/usr/bin/nvidia-imex-ctl": IMEX_CTL,
                "/lib/systemd/system/nvidia-imex.service": IMEX_UNIT_TEXT,
                "/etc/nvidia-imex/config.cfg": config,
            },
        )
    }


def free_port() -> int:
    """A TCP port free on the loopback addresses the IMEX test's members serve on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class StandinCudaRepo:
    root: Path  # served as the base, NVIDIA's ".../compute/cuda/repos"
    fabric_versions: tuple[str, ...]
    imex_port: int = 0  # where the stand-in IMEX daemons serve (their config.cfg's SERVER_PORT)
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
        return {
            "nvidia_cuda_repo_url": self.url,
            "allow_insecure_repositories": "true",
            "nvidia_cuda_gpgkey_url": f"{self.keys_url}/{DIST}/{REPO_ARCH}/{KEY_FILE}",
            "nvidia_cuda_gpgkey_fingerprint": self.fingerprint,
        }


def build_repo(root: Path, fabric_versions: tuple[str, ...] = FABRIC_VERSIONS, arch: str = "amd64") -> StandinCudaRepo:
    """Publish the stand-in packages at ``root/debian12/x86_64``, signed, with the armoured key
    beside them as ``3bf863cc.pub``."""
    repo = StandinCudaRepo(root=root, fabric_versions=fabric_versions, imex_port=free_port())
    repo.repo_dir.mkdir(parents=True, exist_ok=True)
    releases = [packages(version) for version in fabric_versions] + [NVLSM]
    releases += [imex_packages(version, repo.imex_port) for version in IMEX_VERSIONS]
    for release in releases:
        for name, (version, depends, files) in release.items():
            build_deb(
                repo.repo_dir,
                name,
                version,
                depends,
                files,
                arch,
                f"STAND-IN for NVIDIA's {name} (gpu-node tests; not NVIDIA's software)",
            )
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
