"""
The NVIDIA Container Toolkit the e2e tests and the demo install, in a local signed apt repository
on 127.0.0.1 with NVIDIA's layout (tests/apt_repo.py).

Which toolkit:

- NVIDIA's own debs, when the opt-in lab (env ``GPU_NODE_LAB``, docs/lab.md) holds them under
  ``nvidia-container-toolkit/``, exactly as NVIDIA's repository publishes them;
- otherwise the project's STAND-IN packages (tests/standin_toolkit.py): no package registry ships
  the toolkit, and NVIDIA's repository is not reachable without internet access.

Either way apt, gpg signature checks, pins and holds, containerd, Docker and runc are real; the
``kind`` says which toolkit it is, ``why`` says in one line why, and tests take the id
``real-toolkit`` or ``standin-toolkit`` from it (tests/e2e/conftest.py), so a test's name says
which one it ran on.

The proof that a container went through ``nvidia-container-runtime`` is the runtime's own log:
the real runtime's debug log (``[nvidia-container-runtime] debug``, set on the node after the
toolkit stage) or the stand-in's call log; ``ToolkitRepo.runtime_created`` reads whichever it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import standin_toolkit
from apt_repo import deploy_data, make_key, serve, serve_keys, sign_flat_repository
from lab import LAB_ENV, LabMissing, lab_path

from deploy.tasks.toolkit import TOOLKIT_PACKAGES

VERSION = "1.20.0-1"
LAB_FOLDER = "nvidia-container-toolkit"
REAL = "real-toolkit"
STANDIN = "standin-toolkit"
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
RUNTIME_DEBUG_LOG = "/var/log/nvidia-container-runtime.log"


def lab_debs(arch: str = "amd64") -> list[Path]:
    """NVIDIA's toolkit debs from the lab, as its repository publishes them (LabMissing names what
    to provide when the lab or a package is not there)."""
    folder = lab_path(LAB_FOLDER)
    debs = []
    for name in TOOLKIT_PACKAGES:
        deb = folder / f"{name}_{VERSION}_{arch}.deb"
        if not deb.is_file():
            raise LabMissing(f"{deb} is missing: provide NVIDIA's {name} {VERSION} deb (docs/lab.md)")
        debs.append(deb)
    return debs


def which_toolkit() -> tuple[str, str]:
    """(kind, why): the real toolkit when the lab holds it, else the stand-in; ``why`` is one line."""
    if not os.environ.get(LAB_ENV):
        return STANDIN, (
            f"STAND-IN NVIDIA Container Toolkit {VERSION}: no package registry ships the toolkit and "
            f"{LAB_ENV} is unset (set it to a folder of NVIDIA's debs for the real one, docs/lab.md)"
        )
    try:
        lab_debs()
    except LabMissing as missing:
        return STANDIN, f"STAND-IN NVIDIA Container Toolkit {VERSION}: {missing}"
    return REAL, f"the REAL NVIDIA Container Toolkit {VERSION}: NVIDIA's debs from {LAB_ENV}"


@dataclass
class ToolkitRepo:
    root: Path  # served as the repository base, NVIDIA's ".../stable"
    kind: str  # REAL or STANDIN
    why: str
    fingerprint: str  # of the throwaway key that signs it
    version: str = VERSION
    url: str = ""  # the repository, over http
    keys_url: str = ""  # its key, over https (a key is never fetched over http)

    def data(self, **kwargs) -> dict[str, str]:
        """The --data that points the toolkit stage at this repository once it is served, its key pinned."""
        return deploy_data(self.url, keys_url=self.keys_url, fingerprint=self.fingerprint, **kwargs)

    def enable_runtime_log(self, node) -> None:
        """Have the runtime log each call: the real one at debug level (as an admin would, with
        NVIDIA's ``nvidia-ctk config --set``; it reads its config on every call); the stand-in
        always logs."""
        if self.kind == REAL:
            node.sh(
                f"nvidia-ctk config --config-file={RUNTIME_CONFIG} --in-place "
                f"--set nvidia-container-runtime.debug={RUNTIME_DEBUG_LOG} "
                "--set nvidia-container-runtime.log-level=debug"
            )

    def runtime_log(self, node) -> str:
        """The runtime's log as text, for an assertion's message."""
        log = RUNTIME_DEBUG_LOG if self.kind == REAL else standin_toolkit.STANDIN_LOG
        return node.sh(f"tail -n 40 {log} 2>/dev/null || true").stdout

    def runtime_created(self, node, container_id: str) -> bool:
        """Whether nvidia-container-runtime handled ``create`` for this container id."""
        if self.kind == REAL:
            return real_runtime_created(node, container_id)
        return standin_toolkit.runtime_created(node, container_id)


def build_repo(root: Path, arch: str = "amd64") -> ToolkitRepo:
    """Publish the toolkit (real or stand-in, see ``which_toolkit``) at ``root/deb/<arch>``, signed,
    with the armoured public key at ``root/gpgkey``."""
    kind, why = which_toolkit()
    if kind == STANDIN:
        standin = standin_toolkit.build_repo(root, arch)
        return ToolkitRepo(root=root, kind=kind, why=why, fingerprint=standin.key.fingerprint)
    repo_dir = root / "deb" / arch
    repo_dir.mkdir(parents=True, exist_ok=True)
    for deb in lab_debs(arch):
        shutil.copyfile(deb, repo_dir / deb.name)
    key = make_key(root.parent / f"{root.name}-gnupg", "gpu-node-tests-toolkit-signing")
    sign_flat_repository(repo_dir, key, origin="gpu-node tests", label=f"NVIDIA Container Toolkit {VERSION} (lab)")
    (root / "gpgkey").write_text(key.armored_public_key())
    key.stop_agent()
    return ToolkitRepo(root=root, kind=kind, why=why, fingerprint=key.fingerprint)


@contextlib.contextmanager
def served(root: Path, arch: str = "amd64"):
    """Build the repository and serve it on 127.0.0.1 (its key over https); yields the ToolkitRepo
    with its ``url`` and ``keys_url``."""
    repo = build_repo(root, arch)
    with serve(root) as url, serve_keys(root) as keys_url:
        repo.url, repo.keys_url = url, keys_url
        yield repo


# --- The real runtime's debug log (lab only) ---------------------------------------------------------

BUNDLE = "Using bundle directory: "
CREATE = "Create command detected"


def real_runtime_records(node) -> list[dict]:
    """The real runtime's debug log, one JSON record per line (``level``, ``msg``, ``time``)."""
    text = node.sh(f"cat {RUNTIME_DEBUG_LOG} 2>/dev/null || true").stdout
    records = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


def real_runtime_created(node, container_id: str) -> bool:
    """The real runtime's record of the bundle directory (``.../<id>``, only ``create`` passes
    ``--bundle``) followed by its "Create command detected" before the next bundle it was given."""
    messages = [record.get("msg", "") for record in real_runtime_records(node)]
    for index, message in enumerate(messages):
        if message.startswith(BUNDLE) and message.rstrip("/").endswith(f"/{container_id}"):
            following = [m for m in messages[index + 1 :] if m.startswith((BUNDLE, CREATE))]
            if following and following[0].startswith(CREATE):
                return True
    return False


if __name__ == "__main__":
    # Build and serve the repository by hand: python tests/toolkit_repo.py
    import tempfile
    import time

    workdir = Path(tempfile.mkdtemp(prefix="toolkit-repo-"))
    with served(workdir / "stable") as repo:
        print(f"{repo.why}\nrepository at {repo.url} (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
