"""
Verify's driver branch step: the node's driver branch, its kind and end of life
(deploy/driver/branches.py). Pure.
"""

from __future__ import annotations

from typing import Any

from ..driver.branches import branch_summary, end_of_life_warning
from ..driver.versions import upstream_version
from ..reports.node_report import PASS, SKIP, Step
from .options import VerifyOptions
from .readout import driver_version


def lifecycle_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    """The driver branch's kind and end of life; one past it is named with what to move to, as a
    pass: the driver works, and a refusal would fail every node of that branch at once."""
    kernels = (readout.get("kernels") or {}).get("kernels") or {}
    version = (
        driver_version(readout)
        or readout["node"]["built_version"]
        or next(
            (module["version"] for kernel in kernels.values() for module in kernel["modules"] if module["version"]),
            None,
        )
    )
    head = upstream_version(version).split(".")[0] if version else ""
    if not head.isdigit():
        return Step("driver_branch", SKIP, "no NVIDIA driver installed")
    warning = end_of_life_warning(int(head), options.today, f"the node's driver {version}")
    return Step("driver_branch", PASS, warning or branch_summary(int(head), options.today))
