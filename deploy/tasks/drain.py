"""
Live nodes: with ``drain_before_restart``, check while preparing that the control plane can
drain this node, so an unreachable API server stops the host before any change; and, after
verify, uncordon the node this run cordoned. The drain itself runs inside the operations that
restart (deploy/operations/drain.py). With the setting off, none of this runs a command.
"""

from __future__ import annotations

from collections.abc import Collection

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import NoGroupError
from pyinfra.facts.server import Hostname

from ..facts.drain import KubeNodeSchedule
from ..facts.gpu_node_identity import kube_node_name
from ..facts.k8s import kubeconfig_words
from ..foundations.pyinfra_api import deploy
from ..operations import drain as drain_ops
from ..operations import failure
from ..operations.drain import DrainTarget
from ..settings import Settings, host_settings

WITHOUT_DRAIN = "set drain_before_restart=false to restart without draining"


def _refuse(message: str) -> None:
    failure.fail(name="Check the control plane can drain this node", message=f"{message}; {WITHOUT_DRAIN}")


@deploy("Live node")
def checked_drain_target(settings: Settings) -> DrainTarget | None:
    """
    The node to drain before a restart, once the control plane was checked able to drain it
    (None: drain_before_restart is off, or this host fails first because it cannot).
    """
    if not settings.drain_before_restart:
        return None
    try:
        control_planes = inventory.get_group(settings.control_plane_group)
    except NoGroupError:
        control_planes = []
    if not control_planes:
        _refuse(
            f"drain_before_restart=true but the inventory has no {settings.control_plane_group} host to run kubectl on"
        )
        return None
    control_plane = control_planes[0]
    kubeconfig = host_settings(control_plane).kubeconfig
    names = dict(settings.kube_node_names)
    # The kubelet registers the hostname by default: read it only when no mapping names the node.
    node = names[host.name] if host.name in names else kube_node_name(names, host.name, host.get_fact(Hostname))

    try:
        schedule = control_plane.get_fact(KubeNodeSchedule, kubeconfig=kubeconfig, node=node)
    except Exception as error:  # noqa: BLE001 - the control plane itself is unreachable
        schedule = {"reachable": False, "error": str(error)}
    if not schedule["reachable"]:
        _refuse(
            f"drain_before_restart=true but {control_plane.name} cannot reach the Kubernetes API with "
            f"{kubeconfig_words(kubeconfig)}: {schedule['error']}; nothing was changed"
        )
        return None

    where = f"Kubernetes node {node}, through {control_plane.name}"
    if not schedule["registered"]:
        logger.warning(f"{host.print_prefix}{where}: not registered, nothing to drain before a restart")
    elif schedule["unschedulable"]:
        host.log_styled(f"{where}: already cordoned: drained before a restart, left cordoned after", fg="yellow")
    return DrainTarget(
        node=node, control_plane=control_plane.name, kubeconfig=kubeconfig, timeout=settings.drain_timeout
    )


@deploy("Live node")
def uncordon_drained_node(target: DrainTarget, driver_packages: Collection[str] = ()) -> None:
    """Uncordon the node if this run cordoned it: the node's last stage (after verify, or after the
    restarts when verify does not run); ``driver_packages``: this run's driver stage's (a GPU node
    awaiting the reboot they need stays cordoned)."""
    drain_ops.uncordon_node(
        name=f"Uncordon Kubernetes node {target.node} after the restart",
        target=target,
        driver_packages=tuple(sorted(driver_packages)),
    )
