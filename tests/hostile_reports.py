"""
Node reports a broken or hostile node may send (issue 44): a value of the wrong type at every field
the fleet view reads (and the rest of the format), control characters in what it prints, and
entries that are no file to read (a link to /dev/zero, a FIFO, 30 MB, more files than the bound).
tests/unit/test_fleet_from_reports_hostile.py puts each through the folder mode and the SSH mode;
tests/unit/test_report_formats.py holds the shipped schema to refusing the same reports as the model.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.reports.node_report import FAIL, PASS, NodeRecord, Step, report_json

# What no terminal line gpu-node prints may hold raw: C0 (but the newline ending it), DEL, C1, and
# lone surrogates (which a UTF-8 terminal cannot even be sent).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
DELETE = object()  # a value in WRONG_TYPES: the key removed


def passing_report(host: str) -> dict:
    """A node report as verify and a pull run write it (deploy/reports/node_report.py), of a node that passed."""
    return report_json(
        [
            NodeRecord(
                host=host,
                gpus=["0x2331 at 0000:01:00.0"],
                driver="535.261.03",
                toolkit="1.17.8",
                runtime="containerd 1.7.24",
                kernel_module_type="proprietary",
                steps=[Step("gpu_pci", PASS, "1 GPU"), Step("kernel_module", PASS, "loaded")],
            )
        ]
    )


def failing_report(host: str) -> dict:
    return report_json([NodeRecord(host=host, steps=[Step("kernel_module", FAIL, "no nvidia module")])])


# (where in a passing report, the value put there): each makes the report no report of the format.
WRONG_TYPES: list[tuple[str, Any]] = [
    ("version", "1"),
    ("gpu_node_version", 3),
    ("ok", "true"),
    ("nodes", [{"host": "gpu-x"}]),
    ("nodes.0.host", 17),
    ("nodes.0.host", ["gpu-17"]),
    ("nodes.0.host", ""),
    ("nodes.0.ok", "yes"),
    ("nodes.0.gpus", "0x2331"),
    ("nodes.0.gpus", [1]),
    ("nodes.0.gpus", DELETE),
    ("nodes.0.driver", 535),
    ("nodes.0.toolkit", {}),
    ("nodes.0.runtime", 1),
    ("nodes.0.kernel_module_type", []),
    ("nodes.0.persistence", {"on": True}),
    ("nodes.0.fabric_manager", 1.5),
    ("nodes.0.cuda", True),
    ("nodes.0.cdi", 0),
    ("nodes.0.steps", "abc"),
    ("nodes.0.steps", [1]),
    ("nodes.0.steps.0.name", 1),
    ("nodes.0.steps.0.status", "ok"),
    ("nodes.0.steps.0.reason", None),
    ("nodes.0.evil", "extra key"),
    ("nodes.0.module_flavour", "open"),  # gpu-node 0.2.0's name of kernel_module_type
    # a value nested 50 deep where the table reads text (under node_text's 64: the format refuses it)
    ("nodes.0.runtime", json.loads("[" * 50 + "]" * 50)),
]


def with_value(report: dict, where: str, value: Any) -> dict:
    """A copy of ``report`` with ``value`` at ``where`` (dotted keys and list indexes)."""
    changed = copy.deepcopy(report)
    *path, last = [int(part) if part.isdigit() else part for part in where.split(".")]
    target = changed
    for part in path:
        target = target[part]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return changed


def case_id(where: str, value: Any) -> str:
    return f"{where}={'deleted' if value is DELETE else type(value).__name__}"


def wrong_type_file(where: str, value: Any) -> Callable[[Path, str], None]:
    """Write ``name`` in a folder: a passing report with ``value`` at ``where``."""

    def write(folder: Path, name: str) -> None:
        (folder / name).write_text(json.dumps(with_value(passing_report("gpu-bad"), where, value)))

    return write


@dataclass
class Entry:
    """A folder entry that is no report file to read, and the words a line about it holds."""

    id: str
    write: Callable[[Path, str], None]
    says: str


def _link_to_dev_zero(folder: Path, name: str) -> None:
    os.symlink("/dev/zero", folder / name)


def _link_to_a_report(folder: Path, name: str) -> None:
    """A link to a passing report outside the folder: whatever it points at is not the node's file."""
    elsewhere = folder.parent / f"elsewhere-{name}"
    elsewhere.write_text(json.dumps(passing_report("gpu-bad")))
    os.symlink(elsewhere, folder / name)


def _fifo(folder: Path, name: str) -> None:
    os.mkfifo(folder / name)


def _char_device(folder: Path, name: str) -> None:
    """A character device: /dev/null's numbers, which opening does nothing to (another device's may)."""
    os.mknod(folder / name, stat.S_IFCHR | 0o600, os.makedev(1, 3))


def thirty_mb(folder: Path, name: str) -> None:
    # valid JSON all through, so only the bound refuses it
    (folder / name).write_text('{"version": 1, "pad": "' + "x" * (30 * 1024 * 1024) + '"}')


ENTRIES = [
    Entry("link-to-dev-zero", _link_to_dev_zero, "not a regular file"),
    Entry("link-to-a-report", _link_to_a_report, "not a regular file"),
    Entry("fifo", _fifo, "not a regular file"),
    Entry("char-device", _char_device, "not a regular file"),
    Entry("30-mb", thirty_mb, "larger than gpu-node reads"),
]

# Text with every kind of control character a terminal acts on: erase the line and go back to its
# start, move up, a window title (OSC ended by BEL), CSI as one C1 byte, and a lone surrogate.
ERASE_LINE, CURSOR_UP, TITLE, C1_CSI, LONE_SURROGATE = "\x1b[2K\r", "\x1b[1A", "\x1b]0;owned\x07", "\x9b2K", "\udc80"
EVIL_HOST = f"{ERASE_LINE}gpu-evil{TITLE}"
EVIL_STEP = f"{CURSOR_UP}{ERASE_LINE}kernel_module{C1_CSI}"
# a name of bytes that are not UTF-8 (0x80) too: a report's text must be UTF-8, a file's name need not
EVIL_FILE_NAME = f"{ERASE_LINE}{TITLE}{LONE_SURROGATE}junk.json"


def evil_report(host: str = EVIL_HOST) -> dict:
    """A report of the format (every type right) whose host, runtime and failed step carry control characters."""
    return report_json(
        [
            NodeRecord(
                host=host,
                runtime=f"containerd{C1_CSI}",
                cuda=f"ok{TITLE}",
                steps=[Step(EVIL_STEP, FAIL, f"no module{ERASE_LINE}all fine")],
            )
        ]
    )


# --- health reports (deploy/health/check.py's health.json, docs/health.md) -------------------------


def health_report(
    host: str,
    status: str = "healthy",
    problems: tuple[dict, ...] = (),
    gpus: tuple[str, ...] = ("0000:17:00.0",),
    checked_at: str = "2030-01-01T00:00:00+00:00",
) -> dict:
    """A health report as the check writes it (its format: HealthReportFormat)."""
    return {
        "version": 1,
        "gpu_node_version": "0.3.0",
        "host": host,
        "checked_at": checked_at,
        "healthy": status == "healthy",
        "status": status,
        "problems": list(problems),
        "gpus": [
            {
                "pci": pci,
                "name": "NVIDIA H100 PCIe",
                "seen_by_driver": True,
                "ecc_uncorrected": 0,
                "retired_pages": None,
                "retired_pages_pending": None,
                "pending_row_remap": False,
                "row_remap_failure": False,
            }
            for pci in gpus
        ],
    }


XID_79 = {
    "kind": "xid",
    "gpu": "0000:17:00.0",
    "severity": "fatal",
    "line": "Xid 79 on 0000:17:00.0: GPU fallen off the bus",
}

# (where in a healthy report, the value put there): each makes it no health report of the format.
HEALTH_WRONG_TYPES: list[tuple[str, Any]] = [
    ("version", 2),
    ("host", ""),
    ("host", 17),
    ("checked_at", "yesterday"),
    ("checked_at", 1_893_456_000),
    ("checked_at", "2030-01-01T00:00:00+02:00"),  # not UTC
    ("healthy", "yes"),
    ("status", "sick"),
    ("status", "silent"),  # the fleet view's word, not a node's
    ("problems", "none"),
    ("problems", [{**XID_79, "severity": "bad"}]),
    ("problems", [{**XID_79, "gpu": 17}]),
    ("problems", [{**XID_79, "line": ["x"]}]),
    ("problems", [{**XID_79, "line": "x" * 1001}]),
    ("problems", [{**XID_79, "kind": "gossip"}]),
    ("problems", [XID_79] * 1025),
    ("gpus", [{"pci": ""}]),
    # a GPU is a PCI address (the quarantine matches it to a DRA device by it)
    ("problems", [{**XID_79, "gpu": "0000:17:00.0 --all"}]),
    ("problems", [{**XID_79, "gpu": "GPU-0b11d014"}]),
    ("gpus.0.pci", "../../sys"),
    ("gpus.0.ecc_uncorrected", -1),
    ("gpus.0.ecc_uncorrected", "3"),
    ("gpus.0.seen_by_driver", 1),
    ("gpus.0.pci", ""),
    ("gpus.0.name", DELETE),
    ("evil", "extra key"),
]


def evil_health_report(host: str = EVIL_HOST) -> dict:
    """A health report of the format whose host, problem line and GPU name carry control characters."""
    report = health_report(host, "unhealthy", problems=({**XID_79, "line": f"Xid 79{ERASE_LINE}all fine{TITLE}"},))
    report["gpus"][0]["name"] = f"H100{C1_CSI}{CURSOR_UP}"
    return report
