"""
The one operation that wires the NVIDIA runtime into a container runtime's config, whatever the
runtime: a plan made from the node's facts by the runtime's own planner (``operations/containerd.py``,
``operations/docker.py``, each over its engine in ``deploy/runtimes/``) applied through the safe
install, the runtime's service restarted once, after the last file; in an image root (a bake,
deploy/node/bake.py) checked by the runtime's own binary alike, and restarted by nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.command import PyinfraCommand

from ..facts.read_ahead import FactCall, changes_so_far
from ..foundations import redact
from ..foundations.pyinfra_api import Commands
from ..node import bake
from . import safe_install
from .failure import failing_command


@dataclass(frozen=True)
class WiredRuntime:
    """A runtime this run wires (its ``name`` in deploy/runtimes/registry.py), as its stage knows it on
    the node: what preflight found of it (containerd: which installation runs it) and the read of its
    version, on which CDI's cdi=auto is decided (deploy/operations/cdi.py)."""

    name: str
    version_read: FactCall
    found: Any = None


@dataclass
class PlannedFile:
    """One file the runtime reads, as the wiring leaves it."""

    path: str
    current: str | None  # None: the file is missing
    text: str  # what the wiring writes
    changed: bool  # whether it needs writing (the engine decides: text, or the values it means)
    notes: list[str] = field(default_factory=list)
    created_from: str = ""  # for a missing file: what its text starts from, as the log names it


# The runtime's own check of the new files before any is installed (the daemon asked what it would
# run); it yields its commands and returns False when the files must not be installed.
CandidateCheck = Callable[["RuntimeConfigPlan"], Generator["str | PyinfraCommand", Any, bool]]


@dataclass
class RuntimeConfigPlan:
    """What the runtimes stage does to one runtime's config files on a node."""

    file_format: str  # the engine's: how diffs are masked, how the undo run reads the file
    service: str | None  # the unit restarted on change (None: the runtime reloads by itself)
    files: list[PlannedFile]  # the main config first, then the files it imports, in load order
    in_place_note: str  # what a run that changes nothing says
    changes: int  # the host's changes this run when the plan was made (changes_so_far)
    refusal: str = ""  # the files cannot or must not be wired: why, in one line
    validator: safe_install.Validator | None = None  # the daemon's check of each installed candidate
    check: CandidateCheck | None = None

    @property
    def changed(self) -> list[PlannedFile]:
        return [file for file in self.files if file.changed]

    @property
    def path(self) -> str:
        return self.files[0].path

    def in_place(self) -> bool:
        return not (self.refusal or self.changed)


def still_current(plan: RuntimeConfigPlan | None, make_plan: Callable[[], RuntimeConfigPlan]) -> RuntimeConfigPlan:
    """``plan``, unless an operation changed the host since it was made (an install before this
    operation, say) or none was made ahead: then the plan made from what the host holds now."""
    if plan is not None and plan.changes == changes_so_far(host):
        return plan
    return make_plan()


@operation()
def configure_nvidia_runtime(
    make_plan: Callable[[], RuntimeConfigPlan],
    plan: RuntimeConfigPlan | None = None,
    restart_timeout: int = 30,
    restart_pending: bool = False,
    before_restart: Sequence[PyinfraCommand] = (),
    keep_backups: int = safe_install.KEEP_BACKUPS,
) -> Commands:
    """
    Apply a runtime's wiring plan: the changed files installed safely, the service restarted on change.

    + make_plan: makes the plan from the node's facts (the runtime's planner)
    + plan: the plan the stage made ahead, used while the host has not changed since
    + restart_timeout: seconds the restarted service has to become active before rollback
    + restart_pending: an interrupted run installed this config without restarting the service
    + before_restart: commands run after the candidate's check, before the swap and restart (a drain)
    + keep_backups: how many backups of each file stay after a swap (the newest)
    """
    plan = still_current(plan, make_plan)
    if bake.is_image_root(host.connector):
        # An image root (a bake): no daemon runs to restart; the check of the candidate by the
        # runtime's own binary (config dump, dockerd --validate) still runs, offline.
        restart_pending, before_restart, service = False, (), None
    else:
        service = plan.service
    if plan.refusal:
        yield failing_command(plan.refusal)
        return
    changed = plan.changed
    if not changed:
        yield from safe_install.file_in_place(
            plan.path, service, restart_pending, restart_timeout, before_restart, plan.in_place_note
        )
        return

    for file in changed:
        for note in file.notes:
            host.log_styled(f"{file.path}: {note}", fg="yellow")
        if file.current is None and file.created_from:
            host.log_styled(f"{file.path} is missing: creating it from {file.created_from}", fg="yellow")
        redact.log_masked_diff(host, file.path, file.current, file.text, plan.file_format)

    if plan.check is not None and not (yield from plan.check(plan)):
        return
    if plan.service and service is None:
        host.log_styled(f"{plan.service} not restarted: an image root (its boot starts it on the new files)")
    for file in changed:
        last = file is changed[-1]
        # One restart, after the last file: the runtime reads them together.
        yield from safe_install.install_file._inner(
            path=file.path,
            content=file.text,
            validator=plan.validator,
            service=service if last else None,
            restart_timeout=restart_timeout,
            before_restart=before_restart if last else (),
            keep_backups=keep_backups,
            record=safe_install.FileRecord(unit=plan.service, format=plan.file_format),
        )
