"""
The test lab: upstream software no reachable registry has (the NVIDIA Container Toolkit debs,
the Kubernetes server binaries, crictl, container images), as the upstream projects publish it,
in one folder outside the repository that the user provides.

The folder comes from one setting, the environment variable ``GPU_NODE_LAB``, and has no default:
unset, every test that needs it skips with one line saying so. docs/lab.md lists what goes in it
(release files exactly as published: nothing repacked, nothing built here) and where each comes
from. A missing folder or file raises ``LabMissing``, whose one-line message names the setting and
what to provide.

The package also unpacks those files and builds the lab cluster from them:

- ``assets``: the binaries and image contents, unpacked from the published archives into .cache/lab
- ``nvml_mock``: NVIDIA's mock NVML laid out as a node's driver root
- ``control_plane``: etcd, kube-apiserver, controller-manager and scheduler as local processes
- ``kubelet``: join a node container as a kubelet (cgroup and /proc/sys set-up inside the node)
- ``cluster``: the whole lab (control plane + GPU nodes provisioned by deploy/gpu_node.py)
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_ENV = "GPU_NODE_LAB"
LAB_DOC = "docs/lab.md"
UNSET = f"{LAB_ENV} is unset: set it to a folder holding the upstream release files listed in {LAB_DOC}"


class LabMissing(RuntimeError):
    """The lab folder, or a file in it, is not there or not usable: the message says what to provide."""


class LabFileMissing(LabMissing):
    """The lab folder is there, a file it should hold is not."""


def configured() -> bool:
    """Whether the user set GPU_NODE_LAB (the folder itself may still lack a file)."""
    return bool(os.environ.get(LAB_ENV, "").strip())


def lab_root() -> Path:
    if not configured():
        raise LabMissing(UNSET)
    root = Path(os.environ[LAB_ENV].strip()).expanduser()
    if not root.is_dir():
        raise LabMissing(f"{LAB_ENV}={root} is not a folder: point it at the folder described in {LAB_DOC}")
    return root


def lab_path(*parts: str) -> Path:
    """A folder or file in the lab; LabMissing names it when it is not there."""
    root = lab_root()
    path = root.joinpath(*parts)
    if not path.exists():
        raise LabFileMissing(f"{'/'.join(parts)} is missing from the lab ({LAB_ENV}={root}): see {LAB_DOC}")
    return path
