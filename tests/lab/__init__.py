"""
The test lab: real upstream software the tests use where no reachable registry has it (the NVIDIA
Container Toolkit debs, Kubernetes server binaries, images), built from upstream source and kept
in one folder outside the repository.

The folder comes from one setting: the environment variable ``GPU_NODE_LAB``; unset, it is
``../shared/lab`` relative to the repository's root when that exists. Each asset folder holds a
``SHA256SUMS`` file; ``verified`` checks a file against it before a test uses it. A missing folder
or file raises ``LabMissing`` whose message names the setting and what to provide.

The package also builds the lab cluster from these assets:

- ``control_plane``: etcd, kube-apiserver, controller-manager and scheduler as local processes
- ``kubelet``: join a node container as a kubelet (cgroup and /proc/sys set-up inside the node)
- ``cluster``: the whole lab (control plane + GPU nodes provisioned by deploy/gpu_node.py)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_ENV = "GPU_NODE_LAB"
DEFAULT_LAB = REPO.parent / "shared" / "lab"


class LabMissing(RuntimeError):
    """The lab folder, or an asset in it, is not there: the message says what to provide."""


def lab_root() -> Path:
    configured = os.environ.get(LAB_ENV)
    root = Path(configured).expanduser() if configured else DEFAULT_LAB
    if not root.is_dir():
        origin = f"{LAB_ENV}={configured}" if configured else f"{LAB_ENV} is unset and the default {root}"
        raise LabMissing(
            f"the test lab folder is missing ({origin} is not a folder): set {LAB_ENV} to the folder "
            "holding the lab's real upstream assets (nvidia-container-toolkit/1.20.0/, kubernetes/, bin/, images/)"
        )
    return root


def lab_path(*parts: str) -> Path:
    """A folder or file in the lab; LabMissing names it when it is not there."""
    path = lab_root().joinpath(*parts)
    if not path.exists():
        raise LabMissing(f"{path} is missing from the test lab ({LAB_ENV}={lab_root()}): provide {'/'.join(parts)}")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def expected_sums(folder: Path) -> dict[str, str]:
    """``SHA256SUMS`` of a lab folder: file name -> hex digest."""
    sums_file = folder / "SHA256SUMS"
    if not sums_file.is_file():
        raise LabMissing(f"{sums_file} is missing: each lab folder lists its files' SHA-256 there")
    sums = {}
    for line in sums_file.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.lstrip("*")] = digest.lower()
    return sums


def verified(folder: Path, name: str) -> Path:
    """``folder/name`` after checking it against the folder's SHA256SUMS."""
    expected = expected_sums(folder).get(name)
    path = folder / name
    if expected is None:
        raise LabMissing(f"{name} is not listed in {folder / 'SHA256SUMS'}")
    if not path.is_file():
        raise LabMissing(f"{path} is missing from the test lab: provide it (listed in SHA256SUMS)")
    actual = sha256(path)
    if actual != expected:
        raise LabMissing(
            f"{path} does not match SHA256SUMS (sha256 {actual}, expected {expected}): provide the lab's file"
        )
    return path
