"""
The health report's names: what the node's health check (deploy/health/check.py) writes to
/var/lib/gpu-node/health.json and what the fleet view reads back. Its format is
``HealthReportFormat`` (deploy/reports/formats.py, deploy/schemas/health-report.schema.json);
docs/health.md explains each field. Standard library only and no import of the package: the health
archive (deploy/tasks/health.py) carries it to the node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

HealthReportVersion = Literal[1]
HEALTH_REPORT_VERSION: HealthReportVersion = 1
HEALTH_REPORT_PATH = "/var/lib/gpu-node/health.json"
# Where every GPU node keeps the check (deploy/tasks/archives.py puts it there), and how its units
# run it: node-problem-detector's plugin (deploy/k8s/health_monitor.py) and a reset's follow-up too
HEALTH_CHECK_PROGRAM = "/usr/lib/gpu-node/gpu-node-health.pyz"
HEALTH_CHECK_COMMAND = ("/usr/bin/python3", "-I", HEALTH_CHECK_PROGRAM)
# What a report holds at most (a node has a few dozen GPUs, each a few problems, and the Xids the
# check keeps for a boot): the check writes no more, a reader refuses more.
MAX_GPUS, MAX_PROBLEMS, MAX_LINE = 256, 1024, 1000

HealthStatus = Literal["healthy", "unhealthy", "unknown"]
STATUSES: tuple[HealthStatus, ...] = get_args(HealthStatus)
HEALTHY, UNHEALTHY, UNKNOWN = STATUSES
# the fleet view's word for a node whose last health report is older than health_silent_after
FleetHealthStatus = Literal[HealthStatus, "silent"]
SILENT: FleetHealthStatus = "silent"
# node-problem-detector's custom plugin protocol: 0 OK, 1 NonOK, anything else Unknown; the check's
# --npd line is at most NPD_LINE characters (the plugin's max_output_length)
EXIT_STATUS = {HEALTHY: 0, UNHEALTHY: 1, UNKNOWN: 2}
NPD_LINE = 80
# A GPU as sysfs names it (0000:3b:00.0; a VMD domain has more digits): a problem's gpu, a GPU's pci
PCI_ADDRESS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"

# How bad a problem is, worst first: the GPU or node needs a reboot or service; the GPU needs a
# reset; the node needs an operator or a gpu-node run (a service down, a module missing, a
# mismatch); a reading that could not be made; a fact worth showing that needs nothing.
Severity = Literal["fatal", "needs reset", "needs attention", "not read", "informational"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
FATAL, NEEDS_RESET, NEEDS_ATTENTION, NOT_READ, INFORMATIONAL = SEVERITIES
UNHEALTHY_SEVERITIES = (FATAL, NEEDS_RESET, NEEDS_ATTENTION)

# What a problem is about
ProblemKind = Literal[
    "xid", "gpu missing", "driver", "ecc", "row remap", "retired pages", "kernel module", "service", "reading"
]
KINDS: tuple[ProblemKind, ...] = get_args(ProblemKind)
XID, GPU_MISSING, DRIVER, ECC, ROW_REMAP, RETIRED_PAGES, KERNEL_MODULE, SERVICE, READING = KINDS


def status_of(severities: Iterable[str]) -> HealthStatus:
    """unhealthy when a problem is of an unhealthy severity, else unknown when a reading could not
    be made, else healthy."""
    severities = set(severities)
    if severities & set(UNHEALTHY_SEVERITIES):
        return UNHEALTHY
    return UNKNOWN if NOT_READ in severities else HEALTHY
