"""
Which hosts to act on. Edit the two lists, or set the environment variables
GPU_NODES and CONTROL_PLANE to comma-separated pyinfra host names, e.g.

    GPU_NODES="@ssh/gpu1.example.internal,gpu2" pyinfra inventory.py deploy/gpu_node.py

An entry is a host name (SSH by default), any pyinfra connector target such as
"@docker/<container id>", or a (name, {data}) pair for per-host settings.
"""

import os
import sys

gpu_nodes = [
    # "gpu1.example.internal",
    # ("gpu2.example.internal", {"ssh_user": "ubuntu", "nvidia_driver_branch": "550"}),
]

control_plane = [
    # "cp1.example.internal",
]


def _from_environment(variable, default):
    value = os.environ.get(variable, "")
    names = [name.strip() for name in value.split(",") if name.strip()]
    return names or default


gpu_nodes = _from_environment("GPU_NODES", gpu_nodes)
control_plane = _from_environment("CONTROL_PLANE", control_plane)

if not gpu_nodes and not control_plane:
    # pyinfra would run over no host and exit 0, as if all were well.
    sys.exit(
        "inventory.py: no hosts: set GPU_NODES (and CONTROL_PLANE) to comma-separated pyinfra host names, "
        "or add them to the lists in inventory.py"
    )
