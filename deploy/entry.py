"""
The GPU node deploys, as a site calls them from its own deploy file (``from gpu_node import
provision_gpu_node``) and as deploy/gpu_node.py and deploy/verify.py run them: which hosts they act
on, their settings, the run's fleet report, then the stages.
"""

from __future__ import annotations

import difflib
import gc
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import pyinfra
from pyinfra import host, logger

from .facts.base import UnreadableOutput
from .foundations.pyinfra_api import deploy
from .foundations.redact import log_file_note
from .node import bake
from .node.records import RECORDS_DIR
from .operations.failure import HostRefusal, fail
from .reports.fleet_report import fleet_report_for
from .settings import DEFAULTS, Settings, call_settings, host_settings
from .signatures import document_settings
from .stages import read_only_steps, steps_for
from .tasks.drain import checked_drain_target
from .tasks.preflight import preflight, read_ahead

if TYPE_CHECKING:
    from pyinfra.api import Host


@cache
def freeze_imported_objects() -> None:
    """
    Exempt what the entry file has imported (pyinfra, pydantic's models, the deploy's modules and
    tables, the modules of the stages the first host runs: objects that live as long as the process)
    from every later garbage collection. At exit CPython runs full collections over every object
    still tracked: 70 to 90 ms of a one-node no-op (bench/noop.py) spent on objects the process's
    end frees anyway. Once per process, when the first host has read its node (its stages' modules
    are imported as it asks their reads, deploy/stages.py): what the hosts' runs make later is
    collected as usual.
    """
    gc.freeze()


def inventory_file_group() -> str | None:
    """The group pyinfra's CLI puts every host of an inventory file in, named after the file
    (``inventory`` for inventory.py); None outside the CLI or without a file. pyinfra keeps no note
    of the file, and the deploy runs in a greenlet of its own, out of reach of the CLI's click
    context: the command line is read again with pyinfra's own parser (no option acted on)."""
    if not pyinfra.is_cli:
        return None
    from pyinfra_cli.cli import cli

    try:
        inventory = cli.make_context("pyinfra", sys.argv[1:], resilient_parsing=True).params.get("inventory")
    except click.ClickException:
        return None
    return Path(inventory).name.rsplit(".", 1)[0] if isinstance(inventory, str) and Path(inventory).is_file() else None


def automatic_groups(host: Host) -> set[str]:
    """The groups pyinfra puts hosts in on its own, which say nothing of what a host is for: a
    connector's (``@ssh``, ``@docker``) and the inventory file's name."""
    groups = {group for group in host.groups if group.startswith("@")}
    file_group = inventory_file_group()
    if (
        file_group is not None
        and file_group in host.groups
        and len(host.inventory.get_group(file_group)) == len(host.inventory)
    ):
        groups.add(file_group)
    return groups


def outside_the_groups(host: Host, settings: Settings) -> str | None:
    """Why ``host`` is not a GPU node of this inventory, when it is in groups but not in
    ``gpu_nodes_group`` (a misnamed group); None for a GPU node or a host named on the command line
    (in none but pyinfra's own, ``automatic_groups``)."""
    wanted = settings.gpu_nodes_group
    automatic = automatic_groups(host)
    groups = [group for group in dict.fromkeys(host.groups) if group not in automatic]
    if not groups or wanted in groups:
        return None
    close = difflib.get_close_matches(wanted, groups, n=1, cutoff=0.6)
    hint = f" (is {close[0]!r} meant to be {wanted!r}?)" if close else ""
    return (
        f"in the inventory's groups {', '.join(groups)}, not in {wanted}: gpu-node provisions the hosts of "
        f"{wanted}{hint}; add it there, or name the GPU nodes' group with gpu_nodes_group"
    )


def gpu_node_settings(host: Host) -> Settings | None:
    """
    The settings of a host the GPU node entry files act on, with the run's fleet report hooked;
    None for a control-plane-only host, which is deploy/k8s_gpu.py's business, and for a host in
    other groups only, which fails in one line.
    """
    settings = host_settings(host)
    # One table and one JSON file for the whole run, after the last host disconnects.
    fleet_report_for(host.state, settings.fleet_report_path)
    if settings.control_plane_group in host.groups and settings.gpu_nodes_group not in host.groups:
        logger.info(f"{host.print_prefix}in {settings.control_plane_group} only: not a GPU node, skipped")
        return None
    refusal = outside_the_groups(host, settings)
    if refusal:
        fail(name=f"Refuse this host (not in {settings.gpu_nodes_group})", message=refusal)
        return None
    return settings


@document_settings
@deploy("GPU node", data_defaults=DEFAULTS)
def provision_gpu_node(**settings: Any) -> None:
    """
    Turn this host into a Kubernetes GPU node: preflight, then every stage its settings run
    (kernel, driver, toolkit, runtimes, verify; docs/node-run.md). Settings are keyword arguments
    (docs/settings.md) and win over the hosts' data and --data; an unknown one stops the run before
    any change. Hosts in the control-plane group only are skipped.
    """
    call_settings(host.state, settings, "provision_gpu_node")
    node = gpu_node_settings(host)
    if node is None:
        return
    steps = steps_for(node)
    # An image root (@chroot): only what an image holds; the rest said in one line each (deploy/node/bake.py).
    baking = bake.is_image_root(host.connector)
    if baking:
        steps = bake.image_steps(steps, lambda line: logger.info(f"{host.print_prefix}{line}"))
    try:
        found = preflight(node, steps, image_root=baking)
    except (HostRefusal, UnreadableOutput) as refusal:
        # This host alone fails, before any change on it; the rest of the fleet goes on.
        fail(name="Refuse this host (preflight)", message=str(refusal))
        return
    freeze_imported_objects()
    # drain_before_restart: the node to drain before a restart; its control plane checked now.
    drain = checked_drain_target(node)
    log_file_note(
        host,
        f"{RECORDS_DIR}/",
        "gpu-node's records of what this run changes (each file as it was "
        "before gpu-node and as gpu-node left it, units, packages, holds, keys): root's alone, read by "
        "deploy/undo.py",
    )
    for step in steps:
        step.apply(bake.step_settings(node, step.name) if baking else node, found, drain)


@document_settings
@deploy("Verify GPU node", data_defaults=DEFAULTS)
def verify_gpu_node(**settings: Any) -> None:
    """Verify this GPU node, read-only: every verify step and a report (deploy/verify.py), changing nothing.
    Settings as ``provision_gpu_node`` takes them."""
    call_settings(host.state, settings, "verify_gpu_node")
    node = gpu_node_settings(host)
    if node is None:
        return
    # No preflight: its refusals (disk, headers) are about installing, and verification must
    # still report on a node that would not pass them.
    steps = read_only_steps(node)
    try:
        read_ahead(node, steps)
    except UnreadableOutput as unreadable:
        # This host alone fails; the rest of the fleet is verified.
        fail(name="Refuse this host (its read)", message=str(unreadable))
        return
    freeze_imported_objects()
    for step in steps:
        step.apply(node, None, None)


@document_settings
@deploy("Undo GPU node", data_defaults=DEFAULTS)
def undo_gpu_node(**settings: Any) -> None:
    """
    Take gpu-node back off this host (deploy/undo.py): every file it changed back to what it held
    before gpu-node, or its nvidia wiring taken out where someone changed it since; its own files,
    the units it enabled, its holds and repositories back as they were; with
    ``undo_remove_packages=True`` the packages it installed removed (docs/undo.md). Settings as
    ``provision_gpu_node`` takes them; a node gpu-node never changed is left as it is.
    """
    # imported here: the undo reads every stage's files, which a run of the stages need not load
    from .tasks import undo

    call_settings(host.state, settings, "undo_gpu_node")
    node = gpu_node_settings(host)
    if node is None:
        return
    try:
        found = undo.read_node(node)
    except (HostRefusal, UnreadableOutput) as refusal:
        # This host alone fails, before any change on it; the rest of the fleet goes on.
        fail(name="Refuse this host (undo)", message=str(refusal))
        return
    freeze_imported_objects()
    undo.take_it_back_off(node, found)
