"""
A STAND-IN for NVIDIA's container toolkit, served from a local signed apt repository. No package
registry ships the toolkit, so this is what the e2e tests and the demo install unless the opt-in lab
(env GPU_NODE_LAB, docs/lab.md) holds NVIDIA's own debs (tests/toolkit_repo.py decides which).

Three versions (1.17.7-1, 1.17.8-1 and 1.20.0-1, so a pin to an older one and a pin move are
observable), and the faults a repository can have. The packages carry the real toolkit's four
names and binary paths; their ``/usr/bin/nvidia-container-runtime`` appends its arguments to a log
and execs ``runc`` (what the real runtime does for a container that asks for no GPU), and every
description says STAND-IN. What only the real toolkit shows is listed in docs/lab.md. The repository has NVIDIA's layout (``<base>/deb/<arch>/``, a flat
repository), is signed with a throwaway GPG key and served on 127.0.0.1 only.

The faults, for the failure tests: a key URL that serves an HTML error page or an empty body, the
key served unarmoured, a key that did not sign the repository, a copy of the repository whose
InRelease was altered after signing (``tampered``), a copy signed by another valid key served
beside it (``impostor``: what a hijacked mirror or key URL serves), a port with nothing listening
(``refused_url``) and a server that accepts connections and never answers (``silent_server``). The
repository is served over http, its keys over https (``serve_keys``: a key is never fetched over
http). Every test that uses this module says "standin" in its name and STAND-IN in its docstring.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

from apt_repo import GpgKey, build_deb, make_key, serve, serve_keys, sign_flat_repository
from apt_repo import deploy_data as _deploy_data

STANDIN_LOG = "/var/log/nvidia-container-runtime-standin.log"
VERSIONS = ("1.17.7-1", "1.17.8-1", "1.20.0-1")  # several, so a pin to an older one is observable
NEWEST = VERSIONS[-1]


def _runtime_script(version: str) -> str:
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nvidia-container-runtime (gpu-node tests): log the call, then run runc.
        if [ "$1" = "--version" ]; then
          echo "NVIDIA Container Runtime version {version.split("-")[0]} (stand-in for tests)"
          exec runc --version
        fi
        echo "$(date +%s) $*" >> {STANDIN_LOG}
        exec runc "$@"
        """
    )


def _ctk_script(version: str) -> str:
    # `cdi generate` writes a spec in the CDI format naming the /dev/nvidiaN nodes under the driver
    # root (with the UUIDs nvidia-smi -L gives), as the real generator does from NVML.
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nvidia-ctk (gpu-node tests)
        if [ "$1 $2" != "cdi generate" ]; then
          echo "NVIDIA Container Toolkit CLI version {version.split("-")[0]} (stand-in for tests)"
          exit 0
        fi
        shift 2
        output=${{NVIDIA_CTK_CDI_OUTPUT_FILE_PATH:-/var/run/cdi/nvidia.yaml}}
        root=${{NVIDIA_CTK_DRIVER_ROOT:-/}}
        while [ $# -gt 0 ]; do
          case "$1" in
            --output|--driver-root) [ "$1" = --output ] && output=$2 || root=$2; shift 2 ;;
            --output=*) output=${{1#*=}}; shift ;;
            --driver-root=*) root=${{1#*=}}; shift ;;
            *) shift ;;
          esac
        done
        dev=${{root%/}}/dev
        node() {{ echo "    - path: /dev/$1"; [ "$root" = / ] || echo "      hostPath: $dev/$1"; }}
        gpus=$(cd "$dev" && for n in nvidia[0-9]*; do [ -c "$n" ] && echo "${{n#nvidia}}"; done | sort -n)
        [ -n "$gpus" ] || {{ echo "stand-in nvidia-ctk: no /dev/nvidiaN under $dev" >&2; exit 1; }}
        mkdir -p "$(dirname "$output")"
        {{
          echo "# STAND-IN CDI spec, written by the gpu-node tests' stand-in nvidia-ctk"
          echo "cdiVersion: 0.5.0"
          echo "kind: nvidia.com/gpu"
          echo "devices:"
          for index in $gpus; do
            uuid=$(nvidia-smi -L 2>/dev/null | sed -n "s/^GPU $index: .*(UUID: \\(GPU-[^)]*\\)).*/\\1/p")
            for name in $index $uuid; do
              echo "- name: \\"$name\\""; echo "  containerEdits:"; echo "    deviceNodes:"; node "nvidia$index"
            done
          done
          echo "- name: all"; echo "  containerEdits:"; echo "    deviceNodes:"
          for index in $gpus; do node "nvidia$index"; done
          echo "containerEdits:"; echo "  deviceNodes:"
          for control in nvidiactl nvidia-uvm nvidia-uvm-tools; do [ -c "$dev/$control" ] && node "$control"; done
          # the driver's programs are mounted into the container, as the real spec mounts them
          smi=${{root%/}}/usr/bin/nvidia-smi
          if [ -x "$smi" ]; then
            echo "  mounts:"; echo "    - hostPath: $smi"; echo "      containerPath: /usr/bin/nvidia-smi"
            echo "      options: [ro, nosuid, nodev, bind]"
          fi
          true
        }} > "$output.tmp" && mv "$output.tmp" "$output"
        """
    )


# The nvidia runtime's config.toml as a site has it: a STAND-IN of ours with its shape (a commented
# key, top-level keys, the [nvidia-container-runtime] table and its modes), for the mode edit's tests.
STANDIN_RUNTIME_CONFIG = """\
# STAND-IN (gpu-node tests): the nvidia runtime's config, in the shape its package ships
#debug-everything = false
disable-require = false

[nvidia-container-cli]
environment = []

[nvidia-container-runtime]
# the site's note on the runtime
log-level = "info"
mode = "auto"
runtimes = ["runc"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]
"""


# The refresh units the toolkit ships from 1.18 (not enabled by the package): ours, for the stand-in.
REFRESH_PATH_UNIT = """\
[Unit]
Description=STAND-IN (gpu-node tests): refresh the NVIDIA CDI spec when the driver or nvidia-ctk changes

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/usr/bin/nvidia-ctk

[Install]
WantedBy=multi-user.target
"""
REFRESH_SERVICE_UNIT = """\
[Unit]
Description=STAND-IN (gpu-node tests): refresh the NVIDIA CDI spec
ConditionPathExists=/usr/bin/nvidia-smi
ConditionPathExists=/usr/bin/nvidia-ctk

[Service]
Type=oneshot
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecStart=/usr/bin/nvidia-smi -L
ExecStart=/usr/bin/nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml
"""
CDI_REFRESH_SINCE = (1, 18)


def _cli_script(version: str) -> str:
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nvidia-container-cli (gpu-node tests)
        echo "cli-version: {version.split("-")[0]}"
        echo "lib-version: {version.split("-")[0]} (stand-in for tests)"
        """
    )


def _packages(version: str) -> dict[str, tuple[str, dict[str, str]]]:
    """package -> (Depends, {path: content})"""
    return {
        "libnvidia-container1": ("", {"/usr/share/doc/libnvidia-container1/STAND-IN": "stand-in\n"}),
        "libnvidia-container-tools": (
            f"libnvidia-container1 (= {version})",
            {"/usr/bin/nvidia-container-cli": _cli_script(version)},
        ),
        "nvidia-container-toolkit-base": (
            "",
            {
                "/usr/bin/nvidia-container-runtime": _runtime_script(version),
                "/usr/bin/nvidia-ctk": _ctk_script(version),
                **(
                    {
                        "/usr/lib/systemd/system/nvidia-cdi-refresh.path": REFRESH_PATH_UNIT,
                        "/usr/lib/systemd/system/nvidia-cdi-refresh.service": REFRESH_SERVICE_UNIT,
                    }
                    if tuple(map(int, version.split("-")[0].split(".")[:2])) >= CDI_REFRESH_SINCE
                    else {}
                ),
            },
        ),
        "nvidia-container-toolkit": (
            f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (= {version})",
            {"/usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\n# STAND-IN hook\nexit 0\n"},
        ),
    }


DESCRIPTION = (
    "STAND-IN for tests, not NVIDIA's {name}\n"
    " Built by gpu-node's test suite; its runtime logs each call and execs runc."
)


@dataclass
class StandinRepo:
    root: Path  # served as the repository base, NVIDIA's ".../stable"
    key: GpgKey
    other_key: GpgKey  # a key that did not sign the repository (it signed the IMPOSTOR copy)
    versions: tuple[str, ...] = VERSIONS
    url: str = ""  # where it is served (http), once it is
    keys_url: str = ""  # where its keys are served (https)

    def data(self, **kwargs) -> dict[str, str]:
        """The --data that points the toolkit stage at this repository once it is served, its own key
        pinned (``deploy_data``'s arguments)."""
        return deploy_data(self.url, keys_url=self.keys_url, fingerprint=self.key.fingerprint, **kwargs)


def build_repo(root: Path, arch: str = "amd64") -> StandinRepo:
    """Build the signed flat repository at ``root/deb/<arch>`` and two keys beside it."""
    repo_dir = root / "deb" / arch
    repo_dir.mkdir(parents=True, exist_ok=True)
    for version in VERSIONS:
        for name, (depends, files) in _packages(version).items():
            build_deb(repo_dir, name, version, depends, files, arch, DESCRIPTION.format(name=name))
    keys = root.parent / f"{root.name}-gnupg"
    key = make_key(keys / "signing", "standin-signing")
    other = make_key(keys / "other", "standin-other")
    sign_flat_repository(repo_dir, key, origin="gpu-node stand-in", label="STAND-IN nvidia-container-toolkit")
    (root / "gpgkey").write_text(key.armored_public_key())
    (root / "wrong-gpgkey").write_text(other.armored_public_key())
    # The same key unarmoured, as some mirrors serve it.
    (root / "gpgkey.bin").write_bytes(key.binary_public_key())
    _write_faults(root, repo_dir, arch, other)
    key.stop_agent()
    other.stop_agent()
    return StandinRepo(root=root, key=key, other_key=other)


GARBAGE_KEY_PAGE = "<html><head><title>502 Bad Gateway</title></head><body>proxy error</body></html>\n"
TAMPERED = "tampered"  # the served path of the repository copy whose InRelease fails its signature
# the served path of the copy signed by the other key, whose public key is ``<IMPOSTOR>/gpgkey``: a
# valid signature by a valid key, just not the pinned one
IMPOSTOR = "impostor"


def _write_faults(root: Path, repo_dir: Path, arch: str, other: GpgKey) -> None:
    """Key URLs that return no key, a copy of the repository with a broken signature, and one signed
    by another key that is served beside it."""
    impostor = root / IMPOSTOR / "deb" / arch
    impostor.mkdir(parents=True, exist_ok=True)
    for deb in repo_dir.glob("*.deb"):
        shutil.copy2(deb, impostor / deb.name)
    sign_flat_repository(impostor, other, origin="gpu-node stand-in", label="STAND-IN nvidia-container-toolkit")
    (root / IMPOSTOR / "gpgkey").write_text(other.armored_public_key())
    (root / "garbage-gpgkey").write_text(GARBAGE_KEY_PAGE)
    (root / "empty-gpgkey").write_text("")
    tampered = root / TAMPERED / "deb" / arch
    tampered.mkdir(parents=True, exist_ok=True)
    for item in repo_dir.iterdir():
        if item.name not in ("InRelease", "Release.gpg"):
            shutil.copy2(item, tampered / item.name)
    # Changed after signing: the clearsigned text no longer matches its signature (apt: BADSIG).
    signed = (repo_dir / "InRelease").read_text()
    (tampered / "InRelease").write_text(signed.replace("Label: STAND-IN", "Label: ALTERED", 1))


def refused_url(scheme: str = "http") -> str:
    """A URL on 127.0.0.1 whose port has nothing listening: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"{scheme}://127.0.0.1:{probe.getsockname()[1]}"


def unfetched_keys() -> dict[str, str]:
    """Key settings for runs that stop before any repository is added (preflight, ``--dry``) against a
    repository mirror on http: the CUDA and SUSE driver keys' URLs (never http) on a port where nothing
    listens, and a pin for the SUSE driver repository's key (NVIDIA publishes no fingerprint for it)."""
    base = refused_url("https")
    return {
        "nvidia_cuda_gpgkey_url": f"{base}/cuda.asc",
        "nvidia_driver_gpgkey_url": f"{base}/driver.asc",
        "nvidia_driver_gpgkey_fingerprint": "A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699",
    }


@contextlib.contextmanager
def silent_server(scheme: str = "http"):
    """A server on 127.0.0.1 that accepts connections and never answers (not even a TLS handshake);
    yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_hold():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept_and_hold, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


def deploy_data(
    base_url: str,
    *,
    keys_url: str,
    fingerprint: str,
    wrong_key: bool = False,
    version: str | None = None,
    key: str | None = None,
    repo_url: str | None = None,
    key_url: str | None = None,
) -> dict[str, str]:
    """
    The settings that point the toolkit stage at a served stand-in repository, its keys served at
    ``keys_url`` and ``fingerprint`` pinned: ``key`` names another key file beside it
    (``wrong-gpgkey``, ``garbage-gpgkey``, ``empty-gpgkey``, ``impostor/gpgkey``); ``repo_url`` /
    ``key_url`` replace either URL whole (a tampered copy, a dead server).
    """
    key = key or ("wrong-gpgkey" if wrong_key else "gpgkey")
    return _deploy_data(
        base_url,
        keys_url=keys_url,
        fingerprint=fingerprint,
        version=version,
        key=key,
        repo_url=repo_url,
        key_url=key_url,
    )


@contextlib.contextmanager
def served(root: Path, arch: str = "amd64"):
    """Build the stand-in repository and serve it on 127.0.0.1 (keys over https); yields the
    StandinRepo with its ``url`` and ``keys_url``."""
    repo = build_repo(root, arch)
    with serve(root) as url, serve_keys(root) as keys_url:
        repo.url, repo.keys_url = url, keys_url
        yield repo


def runtime_calls(node) -> list[list[str]]:
    """The stand-in runtime's log: the arguments of each call, oldest first."""
    text = node.sh(f"cat {STANDIN_LOG} 2>/dev/null || true").stdout
    return [line.split()[1:] for line in text.splitlines() if line.strip()]


def runtime_created(node, container_id: str) -> bool:
    """Whether the stand-in runtime was called with ``create --bundle .../<id>`` (containerd's shim
    and dockerd pass the bundle only to ``create``)."""
    for args in runtime_calls(node):
        if "create" in args and "--bundle" in args[:-1]:
            bundle = args[args.index("--bundle") + 1]
            if bundle.rstrip("/").endswith(f"/{container_id}"):
                return True
    return False


if __name__ == "__main__":
    # Build and serve a repository by hand: python tests/standin_toolkit.py
    import time

    workdir = Path(tempfile.mkdtemp(prefix="standin-toolkit-"))
    with served(workdir / "stable") as repo:
        print(f"STAND-IN toolkit repository at {repo.url}, keys at {repo.keys_url} (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
