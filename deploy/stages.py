"""
The stages of a GPU node run, in order, each declared once: whether it runs for these settings,
what preflight reads ahead for it, what preflight checks on its behalf (a refusal fails the host
before any change), and how it applies. deploy/gpu_node.py and deploy/verify.py loop over this
table, and preflight asks the stages it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .distros import Platform
from .facts.combined import FactCall
from .operations.drain import DrainTarget
from .settings import Settings
from .tasks import boot, cdi, containerd, devices, docker, driver, drain, kernel, toolkit, verification
from .tasks.preflight import Findings, StageCheck


def _no_reads(settings: Settings) -> list[FactCall]:
    return []


@dataclass(frozen=True)
class Stage:
    name: str
    runs: Callable[[Settings], bool]
    apply: Callable[[Settings, Findings | None, DrainTarget | None], object]
    # the facts its decisions read, for preflight's one command
    reads: Callable[[Settings], list[FactCall]] = field(default=_no_reads)
    # what preflight checks for it: refusals, warnings, and the stage's plan (Findings.plans)
    check: Callable[[Settings, Platform, dict], StageCheck] | None = None
    # changes packages: preflight first waits for a busy package manager, finishes an interrupted one
    installs: bool = False
    # deploy/verify.py runs only these
    read_only: bool = False


STAGES: tuple[Stage, ...] = (
    Stage("kernel", runs=lambda s: s.runs("kernel"), reads=kernel.reads,
          apply=lambda s, found, target: kernel.kernel_prerequisites(s, found.platform, found.nvidia)),
    Stage("driver", runs=lambda s: s.runs("driver") and s.nvidia_driver_install, check=driver.preflight_check, installs=True,
          apply=lambda s, found, target: driver.nvidia_driver(s, found.platform, found.plans["driver"], drain=target)),
    Stage("toolkit", runs=lambda s: s.runs("toolkit") and s.nvidia_toolkit_install, reads=toolkit.reads,
          check=toolkit.preflight_check, installs=True,
          apply=lambda s, found, target: toolkit.toolkit(s, found.platform)),
    Stage("containerd", runs=lambda s: s.runs("runtimes") and s.wires("containerd"), reads=containerd.reads,
          check=containerd.preflight_check, installs=True,
          apply=lambda s, found, target: containerd.containerd_runtime(
              s, found.platform.family, found.containerd, drain=target, pending_restarts=found.pending_restarts)),
    Stage("docker", runs=lambda s: s.runs("runtimes") and s.wires("docker"), reads=docker.reads,
          check=docker.preflight_check, installs=True,
          apply=lambda s, found, target: docker.docker_runtime(
              s, found.platform.family, drain=target, pending_restarts=found.pending_restarts)),
    Stage("cdi", runs=lambda s: s.runs("runtimes"), reads=cdi.reads,
          check=cdi.preflight_check, apply=lambda s, found, target: cdi.cdi(s, found.containerd)),
    # systemd re-applies containers' devices by their /dev/char names (the systemd cgroup driver)
    Stage("device links", runs=lambda s: s.runs("runtimes") and s.systemd_cgroup, reads=devices.reads,
          apply=lambda s, found, target: devices.device_links(s)),
    # The module, CDI spec and services at every boot (deploy/first_boot.py): installed, started by the next boot.
    Stage("first boot", runs=lambda s: s.runs("driver") and s.first_boot_unit, reads=boot.reads,
          apply=lambda s, found, target: boot.first_boot_unit(s)),
    Stage("verify", runs=lambda s: s.runs("verify"), reads=verification.reads, read_only=True,
          apply=lambda s, found, target: verification.verify(s)),
    # After verify, which fails the host first when a step fails: the node then stays cordoned.
    # Without verify, after the restarted runtime came back active.
    Stage("uncordon", runs=lambda s: s.drain_before_restart,
          apply=lambda s, found, target: target and drain.uncordon_drained_node(target)),
    # Last, so it ends the run's output: no GPU, reboot required.
    Stage("driver report", runs=lambda s: True,
          apply=lambda s, found, target: driver.driver_report(s, found.plans.get("driver"))),
)


def stages_for(settings: Settings) -> list[Stage]:
    """The stages deploy/gpu_node.py runs for ``settings``, in order."""
    return [stage for stage in STAGES if stage.runs(settings)]


def read_only_stages() -> list[Stage]:
    """The stages deploy/verify.py runs, whatever ``stages`` says: it only reads."""
    return [stage for stage in STAGES if stage.read_only]
