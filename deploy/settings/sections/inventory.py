"""The inventory groups section: which hosts of the inventory the deploys act on."""

from __future__ import annotations

from pydantic import Field

from ..values import GroupName
from .base import Section

# The inventory groups users put hosts in (inventory.py) unless gpu_nodes_group / control_plane_group
# name others: GPU nodes, and where kubectl runs.
GPU_NODES_GROUP = "gpu_nodes"
CONTROL_PLANE_GROUP = "control_plane"


class InventorySettings(Section):
    """
    Inventory groups

    Which hosts of the inventory the deploys act on. A host named on the command line
    (`pyinfra gpu1.example.internal deploy/gpu_node.py`), in no group of the inventory's, is a GPU
    node; a host in other groups only is refused in one line; deploy/k8s_gpu.py and
    `configure_cluster()` stop in one line when no host of the run is in the control-plane group.
    Set them where every host reads them: `group_data/all.py`, `--data` or the deploy call.
    """

    gpu_nodes_group: GroupName = Field(
        GPU_NODES_GROUP,
        description="the inventory group of the GPU nodes: the hosts the node deploys act on, and "
        "whose labels deploy/k8s_gpu.py sets",
    )
    control_plane_group: GroupName = Field(
        CONTROL_PLANE_GROUP,
        description="the inventory group of the hosts kubectl runs on (deploy/k8s_gpu.py, "
        "drain_before_restart); a host only there is no GPU node",
    )
