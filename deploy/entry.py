"""
The start the GPU node entry files (deploy/gpu_node.py, deploy/verify.py) share: which hosts they
act on, their settings, and the run's fleet report.
"""

from __future__ import annotations

from pyinfra import logger

from deploy.fleet_report import fleet_report_for
from deploy.settings import CONTROL_PLANE_GROUP, GPU_NODES_GROUP, Settings, host_settings


def gpu_node_settings(host) -> Settings | None:
    """
    The settings of a host the GPU node entry files act on, with the run's fleet report hooked;
    None for a control-plane-only host, which is deploy/k8s_gpu.py's business.
    """
    if CONTROL_PLANE_GROUP in host.groups and GPU_NODES_GROUP not in host.groups:
        logger.info(f"{host.print_prefix}in {CONTROL_PLANE_GROUP} only: not a GPU node, skipped")
        return None
    settings = host_settings(host)
    # One table and one JSON file for the whole run, after the last host disconnects.
    fleet_report_for(host.state, settings.fleet_report_path)
    return settings
