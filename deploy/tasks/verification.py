"""The run's read-only reports: the verify stage's steps and report per node (deploy/verification/,
deploy/operations/verification.py), and the driver's state, the last word of every run."""

from __future__ import annotations

from collections.abc import Iterable

from ..facts.read_ahead import FactCall
from ..foundations.pyinfra_api import deploy
from ..operations import verification
from ..operations.driver import report_driver_state
from ..settings import Settings
from ..verification.options import VerifyOptions


def reads(settings: Settings) -> list[FactCall]:
    """What verify reads, for preflight's one command (the operation's own calls)."""
    return verification.reads(VerifyOptions.from_settings(settings))


@deploy("Verify")
def verify(settings: Settings, driver_packages: Iterable[str] = ()) -> None:
    """``driver_packages``: what this run's driver stage installs (a GPU node that awaits its reboot
    for them fails no verify step before it)."""
    verification.check_node(
        name="Verify the node can run GPU containers (read-only)",
        options=VerifyOptions.from_settings(settings),
        report_path=settings.verify_report_path,
        driver_packages=tuple(sorted(driver_packages)),
    )


@deploy("Driver report")
def driver_report(settings: Settings, driver_packages: Iterable[str] = ()) -> None:
    """``driver_packages``: what this run's driver stage installs (a reboot pending for them is said)."""
    report_driver_state(
        name="Report the NVIDIA driver's state",
        require_gpu=settings.require_gpu,
        driver_packages=sorted(driver_packages),
    )
