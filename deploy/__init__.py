"""
gpu-node: pyinfra deploys that turn Linux hosts into Kubernetes GPU nodes. Installed, the package
is ``gpu_node``; a site calls its deploys from its own deploy file::

    from gpu_node import provision_gpu_node
    provision_gpu_node(container_runtimes=["containerd", "docker"], _sudo=True)

``provision_gpu_node``, ``verify_gpu_node``, ``undo_gpu_node``, ``configure_cluster`` and ``render_cluster_files`` (README,
"Using it from your own pyinfra deploy"). In a checkout the same code is the ``deploy`` folder, run by deploy/gpu_node.py,
deploy/verify.py, deploy/undo.py and deploy/k8s_gpu.py.
"""

import importlib
import os
import sys

__version__ = "0.3.0"
__all__ = ["provision_gpu_node", "verify_gpu_node", "undo_gpu_node", "configure_cluster", "render_cluster_files"]
_DEPLOYS = {"provision_gpu_node": ".entry", "verify_gpu_node": ".entry", "undo_gpu_node": ".entry",
            "configure_cluster": ".cluster", "render_cluster_files": ".cluster"}


def __getattr__(name: str):
    # Imported on first use: importing the package alone (its version, an entry file's start) stays cheap.
    if name in _DEPLOYS:
        return getattr(importlib.import_module(_DEPLOYS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# pyinfra's CLI turns bytecode writing off so that the files it executes leave no .pyc; this
# package's modules are ordinary imports, and compiling them again costs every run about 0.1 s of
# CPU. Unless the environment asks otherwise, they keep their bytecode as any import does.
if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
    sys.dont_write_bytecode = False
