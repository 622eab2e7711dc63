"""What gpu-node recorded on a node as it changed it (deploy/node/records.py), for the undo run."""

from __future__ import annotations

import base64
import binascii
import posixpath
from collections.abc import Iterable
from typing import Any

from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text, shell_scripts
from ..node import records as node_records
from .base import NodeFact


def _text(encoded: str) -> str:
    try:
        return node_text.decode(base64.b64decode(encoded, validate=True))
    except binascii.Error as error:
        raise FactProcessError(f"could not decode a record: {error}") from None


class NodeRecords(NodeFact[dict[str, Any]]):
    """
    gpu-node's records on the node (deploy/node/records.py) and, for each recorded file, what it
    holds now; ``own``: the first bytes of those of ``own_files`` that exist (gpu-node's own files,
    known by their first line where no record names them).

    .. code:: python

        {
            "records": True,   # the records folder exists, and holds more than the signing key
            "folder": "0 700", # its owner's uid and mode; "link": a symbolic link (its records not read
                               # unless it is node_records.ROOT_ALONE)
            "files": [{
                "id": "5e8f...", "path": "/etc/containerd/config.toml", "unit": "containerd",
                "format": "toml", "absent": False, "earlier": False,
                "original_stat": "644 0:0", "original_sha256": "...", "written_sha256": "...",
                "live": "file",              # file, link, other, or None: not there
                "live_sha256": "...", "live_stat": "644 0:0",
                "original_text": "...", "written_text": "...", "live_text": "...",  # with a format
                "leftovers": ["/etc/containerd/config.toml.gpu-node-backup-20251128T101500"],
            }],
            "units": {"nvidia-cdi-refresh.path": {"recorded": "disabled inactive",
                                                  "enabled": "enabled", "active": "active"}},
            "installed": ["nvidia-container-toolkit"], "held": ["nvidia-container-toolkit"],
            "rpm_keys": ["gpg-pubkey-f796ecb0-6412f5e3"], "unfinished_install": False,
            "own": {"/etc/sysctl.d/99-gpu-node-kubernetes.conf": "# Managed by gpu-node ..."},
            "signing_keys": True,  # the module signing key gpu-node generated is there (no record)
            # each folder gpu-node made (and still a folder): the names in it, "more": more than 16
            "created_folders": {"/etc/dkms/framework.conf.d": {"entries": ["gpu-node-module-signing.conf"],
                                                              "more": False}},
        }
    """

    def command(self, own_files: Iterable[str] = (), records_dir: str = node_records.RECORDS_DIR) -> str:
        script = node_text.base64_reader() + shell_scripts.script(
            "node_records",
            records=records_dir,
            root_alone=node_records.ROOT_ALONE,
            signing_keys=node_records.SIGNING_KEYS,
        )
        return (shell_scripts.script("own_files", own_files) + script if own_files else script).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "records": False,
            "folder": None,
            "files": [],
            "units": {},
            "installed": [],
            "held": [],
            "rpm_keys": [],
            "unfinished_install": False,
            "own": {},
            "signing_keys": False,
            "created_folders": {},
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        found = self.default()
        record: dict[str, Any] | None = None
        folder: dict[str, Any] | None = None
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "records":
                found["records"] = True
                found["folder"] = rest
            elif kind == "file":
                record = {
                    "id": rest,
                    "path": None,
                    "unit": "",
                    "format": "",
                    "absent": False,
                    "earlier": False,
                    "original_stat": None,
                    "original_sha256": None,
                    "written_sha256": None,
                    "live": None,
                    "live_sha256": None,
                    "live_stat": None,
                    "original_text": None,
                    "written_text": None,
                    "live_text": None,
                    "leftovers": [],
                }
                found["files"].append(record)
            elif kind in ("absent", "earlier") and record is not None:
                record[kind] = True
            elif kind in ("path", "unit") and record is not None:
                record[kind] = _text(rest)
            elif (
                kind in ("format", "original_stat", "original_sha256", "written_sha256", "live_sha256", "live_stat")
                and record is not None
            ):
                record[kind] = rest or ("" if kind == "format" else None)
            elif kind in ("original_text", "written_text", "live_text") and record is not None:
                record[kind] = _text(rest)
            elif kind in ("live_link", "live_other") and record is not None:
                record["live"] = kind[len("live_") :]
            elif kind == "leftover" and record is not None:
                record["leftovers"].append(_text(rest))
            elif kind == "unit_record":
                name, _, recorded = rest.partition(" ")
                found["units"].setdefault(name, {})["recorded"] = recorded
            elif kind == "unit_now":
                name, enabled, active = (rest.split(" ") + ["", ""])[:3]
                found["units"].setdefault(name, {}).update(enabled=enabled, active=active)
            elif kind in ("installed", "held", "rpm_key"):
                found["installed" if kind == "installed" else "held" if kind == "held" else "rpm_keys"].append(rest)
            elif kind == "unfinished_install":
                found["unfinished_install"] = True
            elif kind == "signing_keys":
                found["signing_keys"] = True
            elif kind == "created_folder":
                path = _text(rest)
                if not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
                    raise FactProcessError(f"the record of the folders gpu-node made names {path!r}, no folder's path")
                folder = found["created_folders"][path] = {"entries": [], "more": False}
            elif kind == "folder_entry" and folder is not None:
                if rest:
                    folder["entries"].append(_text(rest))
                else:
                    folder["more"] = True
            elif kind == "own":
                path, _, head = rest.partition(" ")
                found["own"][_text(path)] = _text(head)
        for record in found["files"]:
            if record["live_sha256"] is not None:
                record["live"] = "file"
            if record["path"] is None:
                raise FactProcessError(f"the record {record['id']} names no file")
        return found
