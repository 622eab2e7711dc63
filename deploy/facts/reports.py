"""The reports a node wrote itself (the first-boot unit's, a pull run's), for the fleet view read
over SSH (deploy/fleet_from_reports.py)."""

from __future__ import annotations

import base64
import binascii

from pyinfra.api.exceptions import FactProcessError

from .. import node_text, shell_scripts
from .base import NodeFact

REPORTS_DIR = "/var/lib/gpu-node"


class NodeReports(NodeFact):
    """
    Each regular ``*.json`` file directly in ``folder`` (a symbolic link is not followed): its
    name, its modification time (seconds since the epoch) and its text, in one command.

    .. code:: python

        [{"name": "boot-report.json", "mtime": 1764331200, "text": "{\\"version\\": 1, ...}"}]
    """

    def command(self, folder=REPORTS_DIR):
        return (node_text.base64_reader() + shell_scripts.script("node_reports", folder=folder)).strip()

    @staticmethod
    def default():
        return []

    def process(self, output):
        reports = []
        for line in output:
            kind, name, mtime, text = (line.strip().split(" ") + ["", "", ""])[:4]
            if kind != "report":
                continue
            try:
                reports.append({"name": node_text.decode(base64.b64decode(name, validate=True)), "mtime": int(mtime),
                                "text": node_text.decode(base64.b64decode(text, validate=True))})
            except (binascii.Error, ValueError) as error:
                raise FactProcessError(f"could not read a report's line: {error}") from None
        return reports
