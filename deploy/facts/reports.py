"""The reports a node wrote itself (the first-boot unit's, a pull run's, the health check's), for the
fleet view read over SSH (deploy/fleet/from_reports.py)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text, shell_scripts
from .base import NodeFact

REPORTS_DIR = "/var/lib/gpu-node"
# gpu-node writes four there (boot-report.json, report.json, a pull run's fleet-report.json, the health
# check's health.json; its state is health.state, no report): a node sends at most this many files of
# MAX_FILE_BYTES each, the rest named "not read".
MAX_NODE_REPORTS = 8
NOT_REGULAR = "not a regular file (a symbolic link, FIFO, device or folder): not read"
TOO_MANY = f"more than {MAX_NODE_REPORTS} .json files in the folder: this one and those after it not read"


class NodeReports(NodeFact[list[Any]]):
    """
    The ``*.json`` entries directly in ``folder``, in one command, at most ``MAX_NODE_REPORTS``: a
    regular file's name, its modification time (seconds since the epoch) and its text; any other
    entry (a symbolic link, not followed; a FIFO, device or folder) and the first one past the bound,
    its name and why it was not read.

    .. code:: python

        [{"name": "boot-report.json", "mtime": 1764331200, "text": "{\\"version\\": 1, ...}"},
         {"name": "zero.json", "not_read": "not a regular file (...): not read"}]
    """

    def command(self, folder: str = REPORTS_DIR) -> str:
        return (
            node_text.base64_reader()
            + shell_scripts.script("node_reports", folder=folder, max_reports=MAX_NODE_REPORTS)
        ).strip()

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        reports: list[dict[str, Any]] = []
        for line in output:
            kind, name, mtime, text = (line.strip().split(" ") + ["", "", ""])[:4]
            if kind not in ("report", "other", "more"):
                continue
            try:
                entry: dict[str, Any] = {"name": node_text.decode(base64.b64decode(name, validate=True))}
                if kind == "report":
                    entry.update(mtime=int(mtime), text=node_text.decode(base64.b64decode(text, validate=True)))
                else:
                    entry["not_read"] = NOT_REGULAR if kind == "other" else TOO_MANY
            except (binascii.Error, ValueError) as error:
                raise FactProcessError(f"could not read a report's line: {error}") from None
            if len(reports) == MAX_NODE_REPORTS:  # as the script stops: a node that does not is held to it
                entry = {"name": entry["name"], "not_read": TOO_MANY}
            reports.append(entry)
            if entry.get("not_read") == TOO_MANY:
                break
        return reports
