"""
Turn every host into a Kubernetes GPU node:

    pyinfra inventory.py deploy/gpu_node.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host  # noqa: E402

from deploy.settings import host_settings  # noqa: E402
from deploy.tasks.kernel import kernel_prerequisites  # noqa: E402
from deploy.tasks.preflight import preflight  # noqa: E402
from deploy.tasks.toolkit import toolkit  # noqa: E402

settings = host_settings(host)
node = preflight(settings)
if settings.runs("kernel"):
    kernel_prerequisites(settings, node.platform)
# stage: driver (deploy/tasks/driver.py)
if settings.runs("toolkit") and settings.nvidia_toolkit_install:
    toolkit(settings, node.platform)
# stage: runtimes (deploy/tasks/containerd.py, deploy/tasks/docker.py)
# stage: verify (deploy/tasks/verify.py)
