"""The GPU health section for the cluster: node-problem-detector's condition (deploy/k8s_gpu.py) and
the fleet view's quarantine (deploy/fleet_view.py); docs/cluster.md."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..errors import SettingsError, shown
from ..values import PinnedImage, TimeSpan, time_span_seconds
from .base import Section

# (low, high) in seconds, and in words: node-problem-detector's runs no closer than its plugin's
# timeout, a release at most a month out
SPANS = {
    "gpu_health_monitor_interval": (30, 3600, "30s to 1h"),
    "quarantine_release_after": (0, 30 * 86400, "0 to 30d"),
}


class HealthClusterSettings(Section):
    """
    GPU health in the cluster (node-problem-detector, the fleet view's quarantine)

    What acts on the health check the nodes run (docs/cluster.md): node-problem-detector turning it
    into a node condition (the control plane's settings), and the fleet view's quarantine, which
    taints a GPU node whose health report says unhealthy, bounded, and removes its own taint once the
    node has been healthy for `quarantine_release_after`.
    """

    gpu_health_monitor: Literal["off", "npd"] = Field(
        "off",
        description="npd: deploy/k8s_gpu.py runs node-problem-detector on the GPU nodes, whose custom plugin runs "
        "the node's health check and sets the node condition GPUUnhealthy (a privileged pod in the "
        "host's PID namespace on each GPU node, and an image from npd_image's registry: off unless asked)",
    )
    npd_image: PinnedImage = Field(
        "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.21",
        description="node-problem-detector's image (its official one by default; a mirror's, pinned by tag and "
        "optionally digest)",
    )
    gpu_health_monitor_interval: TimeSpan = Field(
        "1min",
        description="how often node-problem-detector runs the health check (a systemd time span, 30s to 1h; "
        "its config gets it in seconds)",
    )
    fleet_quarantine: bool = Field(
        False,
        description="the fleet view (deploy/fleet_view.py) also quarantines: taints a GPU node whose health report "
        "says unhealthy (kubectl on the control_plane host), bounded, and removes its own taint once "
        "the node is healthy again",
    )
    quarantine_max_nodes: int = Field(
        1,
        ge=0,
        le=100_000,
        description="at most this many of the run's GPU nodes quarantined at once, counting every taint "
        "gpu-node.nvidia.com/gpu-unhealthy the cluster holds (anyone's) and every node with a "
        "gpu-node DeviceTaintRule",
    )
    quarantine_max_percent: int = Field(
        50,
        ge=0,
        le=100,
        description="and at most this share of the run's GPU nodes (rounded down: a group of one is never "
        "quarantined at 50)",
    )
    quarantine_release_after: TimeSpan = Field(
        "1h",
        description="how long a quarantined node's health reports must say healthy (by their checked_at) before "
        "the quarantine removes its own taint (a systemd time span, 0 to 30d)",
    )
    quarantine_reset: Literal["off", "plan"] = Field(
        "off",
        description="plan: for a quarantined GPU whose problem needs a reset, say whether it could be reset now "
        "(nothing holds /dev/nvidia*: the driver reload's holder check); gpu-node resets nothing",
    )

    @model_validator(mode="after")
    def _cluster_spans_fit(self) -> HealthClusterSettings:  # a name of its own: Settings inherits every section
        for name, (low, high, allowed) in SPANS.items():
            if not low <= time_span_seconds(getattr(self, name)) <= high:
                raise SettingsError(f"invalid setting {name}={shown(getattr(self, name))}: allowed: {allowed}")
        return self
