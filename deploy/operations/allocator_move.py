"""
The steps that move one Kubernetes node between the device plugin and DRA (deploy/k8s/dra.py's
move_plan orders them), through kubectl on the control plane: each an operation, so the first that
fails stops the host, and with it every later node's move (the node stays cordoned, as the drain
leaves a node whose restart failed).
"""

from __future__ import annotations

from pyinfra.api import QuoteString, StringCommand, operation

from ..facts.k8s import kubectl
from ..foundations.pyinfra_api import Commands
from ..k8s.dra import DRIVER
from .drain import DrainTarget


def _gpus_offered(kubeconfig: str | None, node: str, allocator: str) -> StringCommand:
    """Shell that prints something while ``allocator`` offers ``node``'s GPUs (nothing once it does not)."""
    if allocator == "dra":
        return kubectl(
            kubeconfig,
            "get",
            "resourceslices",
            "-o",
            "name",
            QuoteString(f"--field-selector=spec.nodeName={node},spec.driver={DRIVER}"),
        )
    # The kubelet keeps an unregistered device plugin's resource at 0.
    return StringCommand(
        kubectl(
            kubeconfig,
            "get",
            "node",
            QuoteString(node),
            "-o",
            QuoteString("jsonpath={.status.allocatable.nvidia\\.com/gpu}"),
        ),
        "| grep -v '^0*$'",
    )


def _wait(condition: StringCommand, until: str, timeout: int, what: str) -> StringCommand:
    """Poll ``condition`` every 2 s until its output is ``until`` ("empty" or "some"), for ``timeout`` s."""
    test = "-z" if until == "empty" else "-n"
    return StringCommand(
        f'_end=$(( $(date +%s) + {int(timeout)} )); until [ {test} "$(',
        condition,
        '2>/dev/null)" ]; do',
        "if [ $(date +%s) -ge $_end ]; then echo",
        QuoteString(f"gpu-node: {what} after {int(timeout)} s"),
        ">&2; exit 1; fi; sleep 2; done",
    )


@operation()
def move_step(target: DrainTarget, kind: str, allocator: str, labels: dict[str, str | None]) -> Commands:
    """
    One step of ``target.node``'s move to ``allocator`` (deploy/k8s/dra.py MoveStep): cordon, drain,
    relabel (``labels``; None removes), wait-gone (the other allocator no longer offers the
    node's GPUs), wait-ready (``allocator`` offers them), uncordon.
    """
    node, kubeconfig, other = target.node, target.kubeconfig, "device-plugin" if allocator == "dra" else "dra"
    if kind == "cordon":
        yield kubectl(kubeconfig, "cordon", QuoteString(node))
    elif kind == "drain":
        yield target.drain_command()
    elif kind == "relabel":
        yield kubectl(
            kubeconfig,
            "label",
            "node",
            QuoteString(node),
            "--overwrite",
            *(QuoteString(f"{key}-" if value is None else f"{key}={value}") for key, value in labels.items()),
        )
    elif kind == "wait-gone":
        yield _wait(
            _gpus_offered(kubeconfig, node, other),
            "empty",
            target.timeout,
            f"the {other} still offers node {node}'s GPUs",
        )
    elif kind == "wait-ready":
        yield _wait(
            _gpus_offered(kubeconfig, node, allocator),
            "some",
            target.timeout,
            f"the {allocator} offers no GPU of node {node}",
        )
    elif kind == "uncordon":
        yield kubectl(kubeconfig, "uncordon", QuoteString(node))
