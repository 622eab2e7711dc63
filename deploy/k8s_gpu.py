"""
Make the cluster schedule GPUs; acts on the control_plane hosts only, reading the facts of
the gpu_nodes hosts of the same run for their labels:

    pyinfra inventory.py deploy/k8s_gpu.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host  # noqa: E402

from deploy.entry import freeze_imported_objects  # noqa: E402
from deploy.settings import CONTROL_PLANE_GROUP, host_settings  # noqa: E402
from deploy.tasks.k8s import device_plugin, gpu_cluster, needs_device_plugin, uses_gpushare  # noqa: E402

freeze_imported_objects()
if CONTROL_PLANE_GROUP in host.groups:
    settings = host_settings(host)
    gpu_nodes = gpu_cluster(settings)
    if uses_gpushare(settings, gpu_nodes):
        from deploy.tasks.gpushare import gpushare

        gpushare(settings, [node for node in gpu_nodes if node.gpu_sharing == "gpushare"])
    if needs_device_plugin(settings, gpu_nodes):
        device_plugin(settings, gpu_nodes)
