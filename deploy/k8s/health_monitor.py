"""
node-problem-detector (NPD) on the GPU nodes, pure: its custom plugin monitor runs gpu-node's health
check on the host every ``gpu_health_monitor_interval`` (a time span, given NPD as Go's "60s") and sets
the node condition ``GPUUnhealthy`` from its exit status (NPD's plugin protocol: 0 OK, 1 NonOK, any
other Unknown) and its one line of output (the worst problem). deploy/tasks/k8s.py applies the
bundle; deploy/tasks/gitops.py writes it.

The plugin runs in the host's namespaces, not the image's: ``nsenter`` (util-linux, in NPD's
official image) into PID 1's mount, UTS, IPC and PID namespaces (the pod shares the host's PID
namespace), so the check reads the host's journal, sysfs, NVML and systemd as the node's own timer
does. The config's fields are the ones NPD's custom plugin monitor documents (its
docs/custom_plugin_monitor.md and config types); tests/unit/test_health_monitor.py checks them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..foundations import templates
from ..reports.health_report import HEALTH_CHECK_COMMAND, NPD_LINE
from ..settings.values import time_span_seconds
from . import dra

if TYPE_CHECKING:
    from ..settings import Settings

NAMESPACE = "gpu-node-health"
APP = "gpu-node-health-monitor"
BUNDLE = "gpu-health-monitor"
CONDITION = "GPUUnhealthy"
SOURCE = "gpu-node-health"
CONFIG_FILE = "gpu-node-health.json"
CONFIG_DIR = "/config"
# Kubernetes' own ClusterRole for NPD (read its node, patch its status, write events): no role of ours.
CLUSTER_ROLE = "system:node-problem-detector"
NSENTER = "/usr/bin/nsenter"
# As the node's own gpu-node-health.service runs it (deploy/tasks/health.py), with its --npd line
HEALTH_CHECK = (*HEALTH_CHECK_COMMAND, "--npd")
# NPD's own bound: the check must end within it.
PLUGIN_TIMEOUT_SECONDS = 30
# The labels deploy/tasks/k8s.py's node_labels gives a GPU node, one or the other: the DaemonSet's
# node affinity (a term each, either matches).
GPU_NODE_LABELS = (("nvidia.com/gpu.present", "true"), (dra.ALLOCATOR_LABEL, "dra"))


def plugin_command() -> list[str]:
    """What NPD runs: the health check in the host's namespaces."""
    return [NSENTER, "--target", "1", "--mount", "--uts", "--ipc", "--pid", "--", *HEALTH_CHECK]


def plugin_config(interval_seconds: int) -> dict[str, Any]:
    """The custom plugin monitor's config: one permanent rule setting ``CONDITION``."""
    timeout = f"{PLUGIN_TIMEOUT_SECONDS}s"
    path, *args = plugin_command()
    return {
        "plugin": "custom",
        "pluginConfig": {
            "invoke_interval": f"{int(interval_seconds)}s",
            "timeout": timeout,
            "max_output_length": NPD_LINE,
            "concurrency": 1,
            # a new worst problem updates the condition's message, not only a change of status
            "enable_message_change_based_condition_update": True,
        },
        "source": SOURCE,
        "metricsReporting": True,
        "conditions": [
            {"type": CONDITION, "reason": "GPUsHealthy", "message": "gpu-node's health check finds no problem"}
        ],
        "rules": [
            {
                "type": "permanent",
                "condition": CONDITION,
                "reason": "GPUHealthCheckFailed",
                "path": path,
                "args": args,
                "timeout": timeout,
            }
        ],
    }


def render(settings: Settings) -> str:
    """The bundle: namespace, service account, its binding to NPD's ClusterRole, the config, the DaemonSet."""
    return templates.render(
        "k8s/health-monitor.yaml.j2",
        namespace=NAMESPACE,
        app=APP,
        image=settings.npd_image,
        cluster_role=CLUSTER_ROLE,
        config_dir=CONFIG_DIR,
        config_file=CONFIG_FILE,
        config_text=json.dumps(plugin_config(time_span_seconds(settings.gpu_health_monitor_interval)), indent=2) + "\n",
        node_labels=GPU_NODE_LABELS,
    )
