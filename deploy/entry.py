"""
The start the GPU node entry files (deploy/gpu_node.py, deploy/verify.py) share: which hosts they
act on, their settings, and the run's fleet report.
"""

from __future__ import annotations

import difflib
import gc
from functools import cache

from pyinfra import logger

from .fleet_report import fleet_report_for
from .operations.failure import fail
from .settings import CONTROL_PLANE_GROUP, GPU_NODES_GROUP, Settings, host_settings


@cache
def freeze_imported_objects() -> None:
    """
    Exempt what the entry file has imported (pyinfra, pydantic's models, the deploy's modules and
    tables: objects that live as long as the process) from every later garbage collection. At exit
    CPython runs full collections over every object still tracked: 70 to 90 ms of a one-node
    no-op (bench/noop.py) spent on objects the process's end frees anyway. Once per process: what
    the hosts' runs make later is collected as usual.
    """
    gc.freeze()


def outside_the_groups(host) -> str | None:
    """Why ``host`` is not a GPU node of this inventory, when it is in groups but not in gpu_nodes
    (a misnamed group); None for a GPU node or a host named on the command line (in no group but
    its connector's, ``@ssh``)."""
    groups = [group for group in host.groups if not group.startswith("@")]
    if not groups or GPU_NODES_GROUP in groups:
        return None
    close = difflib.get_close_matches(GPU_NODES_GROUP, groups, n=1, cutoff=0.6)
    hint = f" (is {close[0]!r} meant to be {GPU_NODES_GROUP!r}?)" if close else ""
    return (f"in the inventory's groups {', '.join(dict.fromkeys(groups))}, not in {GPU_NODES_GROUP}: gpu-node "
            f"provisions the hosts of {GPU_NODES_GROUP}{hint}; add it there")


def gpu_node_settings(host) -> Settings | None:
    """
    The settings of a host the GPU node entry files act on, with the run's fleet report hooked;
    None for a control-plane-only host, which is deploy/k8s_gpu.py's business, and for a host in
    other groups only, which fails in one line. Called once the entry file has imported what it
    needs (``freeze_imported_objects``).
    """
    freeze_imported_objects()
    if CONTROL_PLANE_GROUP in host.groups and GPU_NODES_GROUP not in host.groups:
        logger.info(f"{host.print_prefix}in {CONTROL_PLANE_GROUP} only: not a GPU node, skipped")
        return None
    refusal = outside_the_groups(host)
    if refusal:
        fail(name="Refuse this host (not in gpu_nodes)", message=refusal)
        return None
    settings = host_settings(host)
    # One table and one JSON file for the whole run, after the last host disconnects.
    fleet_report_for(host.state, settings.fleet_report_path)
    return settings
