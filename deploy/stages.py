"""
The steps of a GPU node run, in order, each declared once: the stage it belongs to (the `stages`
setting picks stages: kernel, driver, toolkit, runtimes, verify), whether it runs for these
settings, what preflight reads ahead for it, what preflight checks on its behalf (a refusal fails
the host before any change), and how it applies. deploy/entry.py's deploys loop over this table
(``steps_for``: provision_gpu_node's steps; ``read_only_steps``: verify_gpu_node's), and preflight
asks the steps it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import load
from .settings import Settings, Stage

if TYPE_CHECKING:
    from .distros.families import Platform
    from .facts.read_ahead import FactCall
    from .operations.drain import DrainTarget
    from .operations.runtime_config import WiredRuntime
    from .planning.findings import Findings, StepCheck


class _StageModule:
    """A stage's module in deploy/tasks/, imported when the run first calls one of its functions: a run
    loads the operations and facts of the stages it runs, not those of every stage (docs/benchmark.md)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, function: str) -> Callable[..., Any]:
        if function.startswith("_"):
            raise AttributeError(function)

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(load(f".tasks.{self.name}"), function)(*args, **kwargs)

        return call


# The type checker and lint-imports read the modules themselves; a run has each by name until it is used.
if TYPE_CHECKING:
    from .tasks import (
        boot,
        cdi,
        containerd,
        devices,
        docker,
        dra,
        drain,
        driver,
        gpudirect,
        health,
        imex,
        kernel,
        mig,
        rack,
        toolkit,
        verification,
    )
else:
    globals().update(
        (name, _StageModule(name))
        for name in [
            "boot",
            "cdi",
            "containerd",
            "devices",
            "docker",
            "dra",
            "drain",
            "driver",
            "gpudirect",
            "health",
            "imex",
            "kernel",
            "mig",
            "rack",
            "toolkit",
            "verification",
        ]
    )


def _no_reads(settings: Settings) -> list[FactCall]:
    return []


@dataclass(frozen=True)
class Step:
    name: str
    # the stage of the `stages` setting it belongs to; None: runs whatever the setting says
    stage: Stage | None
    # whether it runs for these settings, its stage picked
    wanted: Callable[[Settings], bool]
    apply: Callable[[Settings, Findings | None, DrainTarget | None], object]
    # the facts its decisions read, for preflight's one command
    reads: Callable[[Settings], list[FactCall]] = field(default=_no_reads)
    # what preflight checks for it: refusals, warnings, and the stage's plan (Findings.plans)
    check: Callable[[Settings, Platform, dict[str, Any]], StepCheck] | None = None
    # changes packages: preflight first waits for a busy package manager, finishes an interrupted one
    installs: bool = False
    # deploy/verify.py runs only these
    read_only: bool = False
    # a runtime's stage (its name the runtime's in deploy/runtimes/registry.py): the runtime as this run
    # wires it, from what preflight read (Findings.runtimes; the CDI stage decides on their versions)
    wired: Callable[[Settings], WiredRuntime] | None = None

    def runs(self, settings: Settings) -> bool:
        return (self.stage is None or settings.runs(self.stage)) and self.wanted(settings)


def _after_preflight(
    apply: Callable[[Settings, Findings, DrainTarget | None], object],
) -> Callable[[Settings, Findings | None, DrainTarget | None], object]:
    """A step's ``apply`` that reads preflight's findings, which every step is given but verify.py's read-only ones."""

    def applied(settings: Settings, found: Findings | None, target: DrainTarget | None) -> object:
        if found is None:
            raise ValueError("a step that reads preflight's findings ran without them")
        return apply(settings, found, target)

    return applied


def _always(settings: Settings) -> bool:
    return True


def _makes_a_node(settings: Settings) -> bool:
    """Whether the run makes a GPU node (a bake included), and so brings the first-boot unit and the
    health check: the driver stage (installing the driver, or with one an image's pipeline installs),
    the runtimes', the toolkit's where it installs the toolkit. The kernel stage alone prepares the
    kernel for a driver yet to come; verify only reads."""
    return (
        settings.runs("driver")
        or settings.runs("runtimes")
        or (settings.runs("toolkit") and settings.nvidia_toolkit_install)
    )


def _dra_node(settings: Settings) -> bool:
    """A node of the DRA group: the DRA steps run (their stages picked)."""
    return settings.gpu_allocator == "dra"


def _rack_parts(settings: Settings) -> bool:
    """Settings that ask for any of the rack's parts (an IMEX domain, nvidia-peermem, a MIG layout): verify checks them."""
    return settings.imex_domain is not None or settings.gpudirect_rdma != "false" or settings.mig_layout is not None


def _driver_packages(found: Findings | None) -> frozenset[str]:
    """The packages this run's driver stage installs (none without it, or for deploy/verify.py)."""
    plan = found.plans.get("driver") if found is not None else None
    return frozenset(plan.packages) if plan is not None else frozenset()


STEPS: tuple[Step, ...] = (
    Step(
        "kernel",
        "kernel",
        _always,
        reads=kernel.reads,
        apply=_after_preflight(lambda s, found, target: kernel.kernel_prerequisites(s, found.platform, found.nvidia)),
    ),
    Step(
        "driver",
        "driver",
        lambda s: s.nvidia_driver_install,
        check=driver.preflight_check,
        installs=True,
        apply=_after_preflight(
            lambda s, found, target: driver.nvidia_driver(s, found.platform, found.plans["driver"], drain=target)
        ),
    ),
    # The rack's parts beside the driver (deploy/rack/): an IMEX domain's daemon and members, nvidia-peermem
    # after the RDMA stack, the MIG layout mig-parted applies at boot
    Step(
        "imex",
        "driver",
        lambda s: s.imex_domain is not None,
        reads=imex.reads,
        check=imex.preflight_check,
        installs=True,
        apply=_after_preflight(lambda s, found, target: imex.imex_domain(s, found.platform, found.plans["imex"])),
    ),
    Step(
        "gpudirect rdma",
        "driver",
        lambda s: s.gpudirect_rdma != "false",
        reads=gpudirect.reads,
        check=gpudirect.preflight_check,
        apply=_after_preflight(
            lambda s, found, target: gpudirect.gpudirect_rdma(s, found.plans["gpudirect rdma"], found.nvidia)
        ),
    ),
    Step(
        "mig layout",
        "driver",
        lambda s: s.mig_layout is not None,
        reads=mig.reads,
        check=mig.preflight_check,
        installs=True,
        apply=_after_preflight(
            lambda s, found, target: mig.mig_layout(s, found.platform, found.plans["mig layout"], drain=target)
        ),
    ),
    Step(
        "toolkit",
        "toolkit",
        lambda s: s.nvidia_toolkit_install,
        reads=toolkit.reads,
        check=toolkit.preflight_check,
        installs=True,
        apply=_after_preflight(lambda s, found, target: toolkit.toolkit(s, found.platform)),
    ),
    Step(
        "containerd",
        "runtimes",
        lambda s: s.wires("containerd"),
        reads=containerd.reads,
        check=containerd.preflight_check,
        installs=True,
        wired=containerd.wired,
        apply=_after_preflight(
            lambda s, found, target: containerd.containerd_runtime(
                s,
                found.platform.family,
                found.runtimes["containerd"].found,
                drain=target,
                pending_restarts=found.pending_restarts,
            )
        ),
    ),
    Step(
        "docker",
        "runtimes",
        lambda s: s.wires("docker"),
        reads=docker.reads,
        check=docker.preflight_check,
        installs=True,
        wired=docker.wired,
        apply=_after_preflight(
            lambda s, found, target: docker.docker_runtime(
                s, found.platform.family, drain=target, pending_restarts=found.pending_restarts
            )
        ),
    ),
    Step(
        "cdi",
        "runtimes",
        _always,
        reads=cdi.reads,
        check=lambda s, platform, nvidia: cdi.preflight_check(s, platform, nvidia, wired_runtimes(s)),
        apply=_after_preflight(lambda s, found, target: cdi.cdi(s, tuple(found.runtimes.values()))),
    ),
    # systemd re-applies containers' devices by their /dev/char names (the systemd cgroup driver)
    Step(
        "device links",
        "runtimes",
        lambda s: s.systemd_cgroup,
        reads=devices.reads,
        apply=lambda s, found, target: devices.device_links(s),
    ),
    # gpu_allocator=dra: the DRA driver's host prerequisites refused in preflight, IMEX handed over
    Step(
        "dra",
        "runtimes",
        _dra_node,
        reads=dra.reads,
        check=dra.preflight_check,
        apply=lambda s, found, target: dra.dra_node(s, drain=target),
    ),
    # The module, CDI spec and services at every boot (deploy/node/first_boot.py): installed, started by the next boot.
    Step(
        "first boot",
        None,
        lambda s: s.first_boot_unit and _makes_a_node(s),
        reads=boot.reads,
        apply=lambda s, found, target: boot.first_boot_unit(s),
    ),
    # The node's health check every health_check_interval (deploy/health/check.py): installed and started.
    Step(
        "health check",
        None,
        lambda s: s.health_check and _makes_a_node(s),
        reads=health.reads,
        apply=lambda s, found, target: health.health_check_units(s),
    ),
    # Before verify: its steps join the node's report, which verify adds and fails on.
    Step(
        "verify dra",
        "verify",
        _dra_node,
        reads=dra.verify_reads,
        read_only=True,
        apply=lambda s, found, target: dra.verify_dra(s),
    ),
    Step(
        "verify rack",
        "verify",
        _rack_parts,
        reads=rack.verify_reads,
        read_only=True,
        apply=lambda s, found, target: rack.verify_rack(s),
    ),
    Step(
        "verify",
        "verify",
        _always,
        reads=verification.reads,
        read_only=True,
        apply=lambda s, found, target: verification.verify(s, _driver_packages(found)),
    ),
    # After verify, which fails the host first when a step fails: the node then stays cordoned.
    # Without verify, after the restarted runtime came back active.
    Step(
        "uncordon",
        None,
        lambda s: s.drain_before_restart,
        apply=lambda s, found, target: target and drain.uncordon_drained_node(target, _driver_packages(found)),
    ),
    # Last, so it ends the run's output: no GPU, reboot required.
    Step(
        "driver report",
        None,
        _always,
        apply=_after_preflight(lambda s, found, target: verification.driver_report(s, _driver_packages(found))),
    ),
)


def wired_runtimes(settings: Settings) -> tuple[WiredRuntime, ...]:
    """The runtimes ``settings`` wire, as their stages know them on the node (from preflight's read)."""
    return tuple(step.wired(settings) for step in STEPS if step.wired is not None and step.wanted(settings))


def steps_for(settings: Settings) -> list[Step]:
    """The steps deploy/gpu_node.py runs for ``settings``, in order."""
    return [step for step in STEPS if step.runs(settings)]


def read_only_steps(settings: Settings) -> list[Step]:
    """The steps deploy/verify.py runs for ``settings``, whatever ``stages`` says: it only reads."""
    return [step for step in STEPS if step.read_only and step.wanted(settings)]
