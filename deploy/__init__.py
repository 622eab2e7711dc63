"""
gpu-node: pyinfra deploys that turn Linux hosts into Kubernetes GPU nodes. Installed, the package
is ``gpu_node``; a site calls its deploys from its own deploy file::

    from gpu_node import provision_gpu_node
    provision_gpu_node(container_runtimes=["containerd", "docker"], _sudo=True)

``provision_gpu_node``, ``verify_gpu_node``, ``undo_gpu_node``, ``configure_cluster`` and ``render_cluster_files`` (README,
"Using it from your own pyinfra deploy"). In a checkout the same code is the ``deploy`` folder, run by its entry
files (deploy/gpu_node.py, verify.py, undo.py, k8s_gpu.py, render_cluster.py, pull.py, fleet_view.py:
docs/architecture.md).
"""

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

__version__ = "0.3.0"
__all__ = ["provision_gpu_node", "verify_gpu_node", "undo_gpu_node", "configure_cluster", "render_cluster_files"]
_DEPLOYS = {
    "provision_gpu_node": ".entry",
    "verify_gpu_node": ".entry",
    "undo_gpu_node": ".entry",
    "configure_cluster": ".cluster",
    "render_cluster_files": ".cluster",
}


@contextmanager
def _bytecode_written() -> Iterator[None]:
    """pyinfra's CLI turns bytecode writing off for the whole process, so that the deploy files it
    executes leave no .pyc; this package's modules are ordinary imports, and compiling them again
    costs every run about 0.1 s of CPU. While they are imported they keep their bytecode as any import
    does (unless the environment says otherwise); then the process's setting is back as it was."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def load(module: str) -> ModuleType:
    """``module`` of this package (``.entry``, ``.fleet.from_reports`` ...), imported with its bytecode
    kept: what the entry files pyinfra executes run."""
    with _bytecode_written():
        return importlib.import_module(module, __name__)


def __getattr__(name: str) -> Any:
    # Imported on first use: importing the package alone (its version, an entry file's start) stays cheap.
    if name in _DEPLOYS:
        return getattr(load(_DEPLOYS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
