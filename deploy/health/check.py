"""
gpu-node's health check on a GPU node (docs/health.md): run every health_check_interval by
``gpu-node-health.timer``, once at every boot by the first-boot unit, and by node-problem-detector
(``--npd``), as root, from the standard library alone:

    python3 -I /usr/lib/gpu-node/gpu-node-health.pyz [--npd] [--forget-xids] [--config /etc/gpu-node/health-check.json]

It reads the Xid events in the kernel's log since its last run (journalctl, from a cursor kept in
its state, /var/lib/gpu-node/health.state), the GPUs on the PCI bus against those the driver and
NVML see, ECC errors, retired pages and row remaps (nvidia-smi), the loaded module's version against
the NVML library's, the nvidia module of the running and of the next boot's kernel, and
persistenced, Fabric Manager (where NVSwitches are) and IMEX (where enabled). It writes
/var/lib/gpu-node/health.json (deploy/reports/health_report.py's names; the format:
deploy/schemas/health-report.schema.json) and its state, nothing else, each whole even after a power
loss (deploy/node/root_files.py). Without ``--npd`` it prints
one line (the unit's journal) when the node's state changed since the last line it printed; with
``--npd``, one line of at most 80 characters naming the worst problem, every run.

Exit status (node-problem-detector's custom plugin protocol): 0 healthy, 1 unhealthy, 2 unknown
(what it read is not enough to say, or it could not run).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from .. import __version__
from ..foundations.command_line import ArgumentParser
from ..node.root_files import MissingFile, UntrustedFile, read_roots_file, write_json_durably
from ..reports.health_report import (
    EXIT_STATUS,
    HEALTH_REPORT_VERSION,
    HEALTHY,
    INFORMATIONAL,
    MAX_GPUS,
    MAX_PROBLEMS,
    NPD_LINE,
    SEVERITIES,
    UNKNOWN,
    status_of,
)
from . import journal, readings
from .node import HealthHost, printable
from .problems import KeptXid, Problem, Readings, assess, services_wanted
from .settings import CONFIG_PATH, HealthSettings
from .xids import xid_event

STATE_VERSION = 1
MAX_STATE_BYTES = 256 * 1024
# distinct (GPU, Xid) pairs kept for a boot; more are counted in one informational problem
MAX_KEPT_XIDS = 64
LOCK_SECONDS = 30
SAID = "gpu-node health"


@dataclass
class State:
    """What one run hands the next: this boot's id, the journal's cursor, the Xids of this boot, and
    the state the timer's run last printed a line for."""

    boot_id: str | None = None
    cursor: str | None = None
    read_until: int = 0  # microseconds since this boot: its kernel entries read up to there
    xids: list[KeptXid] = field(default_factory=list)
    dropped_xids: int = 0
    logged: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "boot_id": self.boot_id,
            "cursor": self.cursor,
            "read_until": self.read_until,
            "xids": [vars(kept) for kept in self.xids],
            "dropped_xids": self.dropped_xids,
            "logged": self.logged,
        }


def _text(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and len(value) <= limit else None


def load_state(path: str, top: str = "/") -> State:
    """The state the last run wrote; a fresh one where there is none or it is not what a run writes
    (its Xids are then read again from this boot's start). Read only when root alone can have
    written it and every folder above it (``read_roots_file``; ``top``: where that walk starts):
    UntrustedFile in one line otherwise (another user's Xids would make the node unhealthy)."""
    try:
        data = json.loads(read_roots_file(path, MAX_STATE_BYTES, top=top)[:MAX_STATE_BYTES])
    except MissingFile:
        return State()
    except UntrustedFile:
        raise
    except (OSError, ValueError, RecursionError):
        return State()
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(data.get("xids"), list):
        return State()
    kept = []
    for item in data["xids"][:MAX_KEPT_XIDS]:
        if (
            isinstance(item, dict)
            and _text(item.get("gpu"), 16)
            and type(item.get("xid")) is int
            and item.get("severity") in SEVERITIES
            and _text(item.get("meaning"), 200)
            and type(item.get("count")) is int
            and item["count"] > 0
        ):
            kept.append(KeptXid(item["gpu"], item["xid"], item["severity"], item["meaning"], item["count"]))
    counts = {
        key: number if type(number := data.get(key)) is int and number >= 0 else 0
        for key in ("read_until", "dropped_xids")
    }
    return State(
        _text(data.get("boot_id"), 32),
        _text(data.get("cursor"), journal.MAX_CURSOR),
        counts["read_until"],
        kept,
        counts["dropped_xids"],
        _text(data.get("logged"), 65536),
    )


def keep_xids(state: State, messages: Iterable[str]) -> None:
    """The Xid events of ``messages`` added to the boot's, one record per (GPU, Xid) with its count."""
    by_key = {(kept.gpu, kept.xid): kept for kept in state.xids}
    for message in messages:
        event = xid_event(message)
        if event is None:
            continue
        key = (event.gpu, event.xid)
        if key in by_key:
            by_key[key] = replace(
                by_key[key], count=by_key[key].count + 1, severity=event.severity, meaning=event.meaning
            )
        elif len(by_key) < MAX_KEPT_XIDS:
            by_key[key] = KeptXid(event.gpu, event.xid, event.severity, event.meaning)
        else:
            state.dropped_xids += 1
    state.xids = list(by_key.values())


def read_node(settings: HealthSettings, host: HealthHost, state: State, forget_xids: bool = False) -> Readings:
    """One run's readings; ``state`` takes this boot's id, the new cursor and Xids (``forget_xids``:
    none, those of this boot until now forgotten)."""
    bus = readings.bus(host)
    this_boot = journal.boot_id(host)
    if this_boot is None or state.boot_id != this_boot:
        state.boot_id, state.read_until, state.xids, state.dropped_xids = this_boot, 0, [], 0
    if not bus["gpus"]:
        return Readings(bus, readings.Driver(None, None, None), readings.Smi())
    kernel = journal.kernel_messages(host, state.cursor, this_boot, state.read_until)
    state.cursor, state.read_until = kernel.cursor, kernel.read_until
    if forget_xids:
        state.xids, state.dropped_xids = [], 0
    else:
        keep_xids(state, kernel.messages)
    module = readings.module_version(host, host.kernel)
    release, how = readings.next_boot_kernel(host)
    after = (release, *readings.module_version(host, release), how) if release and release != host.kernel else None
    return Readings(
        bus,
        readings.read_driver(host),
        readings.read_smi(host, settings.driver_root),
        library=readings.library(host, settings.driver_root)[0],
        running=(host.kernel, *module),
        next_boot=after,
        units=readings.units(host, services_wanted(bus, settings.nvidia_persistenced, settings.fabric_manager_install)),
        xids=list(state.xids),
        journal_problem=kernel.problem,
        journal_more=kernel.more,
        nvidia_persistenced=settings.nvidia_persistenced,
        fabric_manager_install=settings.fabric_manager_install,
    )


def health_report(found: Readings, state: State, now: datetime | None = None) -> dict[str, Any]:
    gpus, problems = assess(found)
    if state.dropped_xids:
        problems.append(
            Problem(
                "xid",
                None,
                INFORMATIONAL,
                f"{state.dropped_xids} Xid event(s) of GPU/Xid pairs past the {MAX_KEPT_XIDS} kept this boot not shown",
            )
        )
    status = status_of(problem.severity for problem in problems)
    # the format's bounds (deploy/reports/health_report.py): the worst problems kept
    return {
        "version": HEALTH_REPORT_VERSION,
        "gpu_node_version": __version__,
        "host": printable(socket.gethostname()),
        "checked_at": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        "healthy": status == HEALTHY,
        "status": status,
        "problems": [problem.as_json() for problem in problems[:MAX_PROBLEMS]],
        "gpus": gpus[:MAX_GPUS],
    }


def worst_line(report: dict[str, Any], limit: int = NPD_LINE) -> str:
    """The report in one line: its worst problem (one that makes its status), or that all is well."""
    if report["status"] == HEALTHY:
        count = len(report["gpus"])
        line = f"healthy: {count} GPU(s)" if count else "healthy: no NVIDIA GPU on the PCI bus"
    else:
        line = report["problems"][0]["line"]
        more = len([problem for problem in report["problems"] if problem["severity"] != INFORMATIONAL]) - 1
        line += f" (and {more} more)" if more > 0 and len(line) + 15 <= limit else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def signature(report: dict[str, Any]) -> str:
    """What a change of state is: the status and the problems, not how often an Xid repeated."""
    return json.dumps(
        [
            report["status"],
            [
                [
                    problem["kind"],
                    problem["gpu"],
                    problem["severity"],
                    re.sub(r" \(\d+ times this boot\)$", "", problem["line"]),
                ]
                for problem in report["problems"]
            ],
        ]
    )


def _locked(folder: str) -> int:
    """The state folder's lock (flock), held until its descriptor is closed: two runs (the timer's
    and node-problem-detector's) do not read the same journal lines or write the state at once."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    deadline = time.monotonic() + LOCK_SECONDS
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"another health check has held {folder} for {LOCK_SECONDS} s") from None
            time.sleep(0.1)


def say(problem: str, npd: bool) -> None:
    """The one line of a run that could not say the node's health (exit 2)."""
    line = printable(problem if npd else f"{SAID}: unknown: {problem}")
    print(line if not npd or len(line) <= NPD_LINE else line[: NPD_LINE - 3] + "...")


def main(argv: list[str] | None = None, host: HealthHost | None = None, top: str = "/") -> int:
    """``top``: where the settings' owner check starts (``/``; a test gives a folder of its own)."""
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--npd",
        action="store_true",
        help="node-problem-detector's custom plugin: one line of at most 80 characters, every run",
    )
    parser.add_argument(
        "--forget-xids",
        action="store_true",
        help="after the GPUs were reset: forget the Xid events of this boot until now (the kernel's log "
        "is read up to now first), then check",
    )
    parser.add_argument(
        "--config",
        default=CONFIG_PATH,
        help=f"the settings deploy/tasks/health.py wrote (default: {CONFIG_PATH}); read only when root "
        "alone can have written it and every folder above it; none there: the defaults",
    )
    args = parser.parse_args(argv)
    try:
        settings = HealthSettings.from_file(args.config, top=top)
    except MissingFile:
        settings = HealthSettings()
    except (UntrustedFile, OSError, ValueError) as error:
        # node-problem-detector's line names the file by its name: the whole path leaves no room for why
        npd = str(error).replace(args.config, os.path.basename(args.config))
        say(f"settings: {npd}" if args.npd else f"cannot read {args.config}: {error}", args.npd)
        return EXIT_STATUS[UNKNOWN]
    lock = None
    try:
        lock = _locked(os.path.dirname(settings.state_path) or ".")
        state = load_state(settings.state_path, top=top)
        report = health_report(read_node(settings, host or HealthHost(), state, args.forget_xids), state)
        write_json_durably(settings.report_path, report)
        changed = signature(report) != state.logged
        if not args.npd:
            state.logged = signature(report)
        write_json_durably(settings.state_path, state.as_json())
    except UntrustedFile as error:
        path = settings.state_path
        say(f"state: {str(error).replace(path, os.path.basename(path)) if args.npd else error}", args.npd)
        return EXIT_STATUS[UNKNOWN]
    except (OSError, TimeoutError) as error:
        say(str(error), args.npd)
        return EXIT_STATUS[UNKNOWN]
    except Exception as error:  # noqa: BLE001 - a reading no test foresaw: unknown in one line, never a traceback
        say(f"the check failed: {type(error).__name__}: {error}", args.npd)
        return EXIT_STATUS[UNKNOWN]
    finally:
        if lock is not None:
            os.close(lock)
    if args.npd:
        print(worst_line(report))
    elif changed:
        print(f"{SAID}: {report['status']}: {worst_line(report, limit=400)} ({settings.report_path})")
    return EXIT_STATUS[report["status"]]


if __name__ == "__main__":
    sys.exit(main())
