"""
What preflight hands the steps of a run (deploy/stages.py): each step's check (StepCheck) and the
node's findings. Below the tasks, so the tasks and the step table both import it and preflight
needs nothing from the table but the shape of a step (PreflightStep).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..distros.families import Platform
from ..facts.read_ahead import FactCall
from ..operations.runtime_config import WiredRuntime
from ..settings import Settings


@dataclass(frozen=True)
class StepCheck:
    """What preflight found for one step (deploy/stages.py): refusals, warnings, its plan."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plan: Any = None


@dataclass(frozen=True)
class Findings:
    """What preflight found on the node, for the stages."""

    platform: Platform
    # deploy/facts/nvidia.py NodeSurvey: GPUs, Secure Boot, modules, kernel, free disk
    nvidia: dict[str, Any] | None = None
    # the runtimes this run wires (deploy/runtimes/registry.py), by name, as their stages found them
    # (containerd: deploy/facts/containerd.py ContainerdInstallations plus "installation": {"name",
    # "service"}, who owns it: plain, k3s, rke2, k0s, microk8s)
    runtimes: dict[str, WiredRuntime] = field(default_factory=dict)
    # deploy/facts/recovery.py PendingRestarts: {unit: config} an interrupted run did not restart
    pending_restarts: dict[str, Any] | None = None
    # step name -> the plan its check made (the driver's DriverPlan)
    plans: dict[str, Any] = field(default_factory=dict)


class PreflightStep(Protocol):
    """What preflight reads of a step (deploy/stages.py Step: a frozen dataclass, so read-only here)."""

    @property
    def name(self) -> str: ...
    @property
    def reads(self) -> Callable[[Settings], list[FactCall]]: ...
    @property
    def check(self) -> Callable[[Settings, Platform, dict[str, Any]], StepCheck] | None: ...
    @property
    def installs(self) -> bool: ...
    # a runtime's stage: the runtime as this run wires it (Findings.runtimes)
    @property
    def wired(self) -> Callable[[Settings], WiredRuntime] | None: ...
