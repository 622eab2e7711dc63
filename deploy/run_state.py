"""
What one pyinfra run keeps between operations, in one place.

pyinfra runs every host of an inventory in greenlets of one process, and an operation gets only
its arguments. A few things must outlive one operation all the same; each is a field of
``RunState``, one record per pyinfra ``State``:

- ``settings``: each host's validated settings, parsed once (``deploy/settings.py``);
- ``known_facts``: facts read ahead in preflight's one command, reused while the host is
  unchanged (``deploy/facts/combined.py``);
- ``drains``: what this run did to each GPU host's Kubernetes node (cordoned, drained), so the
  uncordon and the failure message know (``deploy/operations/drain.py``);
- ``driver_notes``: the driver's state as the last operation saw it (no GPU, reboot
  required), for the fleet report (``deploy/operations/driver.py``, ``deploy/fleet_report.py``);
- ``apt_lists_refreshed``: hosts whose apt lists this run refreshed since their last apt source
  change; a first run installs in several stages and would otherwise refresh once per stage, and
  the host cannot tell (apt keeps no refresh time) (``deploy/operations/packages.py``);
- ``verify_report`` and ``fleet_report``: the end-of-run reports, printed by state callbacks
  (``deploy/report.py``, ``deploy/fleet_report.py``).

``run_state(state)`` creates the record on first use; it goes with its State (a weak reference),
so tests that build many States share nothing. Nothing is set on pyinfra's own objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from pyinfra.api import State

    from deploy.fleet_report import FleetReport
    from deploy.operations.drain import DrainRecord
    from deploy.report import ReportStore
    from deploy.settings import Settings


@dataclass(frozen=True)
class DriverNote:
    """The driver's state on one host, as the end-of-run driver report read it."""

    no_gpu: bool = False
    reboot_required: bool = False


@dataclass
class RunState:
    """Per-run state of gpu-node, keyed by inventory host name where it is per host."""

    settings: dict[str, Settings] = field(default_factory=dict)
    # host name -> (fact name, its arguments as JSON) -> (value, changes on the host when read)
    known_facts: dict[str, dict[tuple[str, str], tuple[Any, int]]] = field(default_factory=dict)
    drains: dict[str, DrainRecord] = field(default_factory=dict)
    driver_notes: dict[str, DriverNote] = field(default_factory=dict)
    apt_lists_refreshed: set[str] = field(default_factory=set)
    verify_report: ReportStore | None = None
    fleet_report: FleetReport | None = None


_RUNS: WeakKeyDictionary[State, RunState] = WeakKeyDictionary()


def run_state(state: State) -> RunState:
    """The record of the run ``state`` belongs to (created on first use)."""
    record = _RUNS.get(state)
    if record is None:
        record = _RUNS[state] = RunState()
    return record
