"""
What one pyinfra run keeps between operations: one record of each kind per pyinfra ``State``.

pyinfra runs every host of an inventory in greenlets of one process, and an operation gets only
its arguments. A few things must outlive one operation all the same. The module that keeps one
declares its record type beside the code that uses it, and asks ``per_run(state, RecordType)``:

- ``ParsedSettings`` and ``SettingsByValues`` (deploy/settings/sources.py): each host's validated settings,
  parsed once, and once per distinct set of setting values;
- ``KnownFacts`` (deploy/facts/read_ahead.py): facts read ahead, reused while the host is unchanged;
- ``Drains`` (deploy/operations/drain.py): what this run did to each host's Kubernetes node;
- ``DriverNotes`` (deploy/reports/node_report.py): the driver's state for the fleet report;
- ``FailureNotes`` (deploy/reports/node_report.py): the line each host failed with, by operation, for the
  fleet report (deploy/operations/failure.py notes it);
- ``PlannedRefusals`` (deploy/reports/node_report.py, kept by deploy/operations/failure.py): the refusals
  found while planning, printed then, for a run that executes nothing (deploy/reports/fleet_report.py);
- ``OverriddenData`` (deploy/settings/sources.py): the ``--data`` values a deploy call overrides, warned once;
- ``AptListsRefreshed`` (deploy/operations/packages.py): hosts whose apt lists this run refreshed
  since their last apt source change (apt keeps no refresh time);
- ``ReportStore`` (deploy/reports/node_report.py) and ``FleetReport`` (deploy/reports/fleet_report.py): the end-of-run
  reports, printed by state callbacks.

The records go with their State (a weak reference), so tests that build many States share
nothing. Nothing is set on pyinfra's own objects, and this module imports nothing of the deploy:
it is the bottom of every import chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from pyinfra.api import State

Record = TypeVar("Record")

_RUNS: WeakKeyDictionary[Any, dict[type, Any]] = WeakKeyDictionary()


def per_run(state: State, record_type: type[Record], created: Callable[[Record], None] | None = None) -> Record:
    """The run's one ``record_type()``, created on first use; ``created(record)`` runs then, once
    (a report hooks its callbacks into the State)."""
    records = _RUNS.setdefault(state, {})
    if record_type not in records:
        record = records[record_type] = record_type()
        if created is not None:
            created(record)
    kept: Record = records[record_type]
    return kept
