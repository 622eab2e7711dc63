"""
Verify every GPU node, read-only: the ladder and a report, changing nothing.

    pyinfra inventory.py deploy/verify.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host  # noqa: E402

from deploy.entry import gpu_node_settings  # noqa: E402
from deploy.facts.base import UnreadableOutput  # noqa: E402
from deploy.operations.failure import fail  # noqa: E402
from deploy.stages import read_only_stages  # noqa: E402
from deploy.tasks.preflight import read_ahead  # noqa: E402

# No preflight: its refusals (disk, headers) are about installing, and verification must
# still report on a node that would not pass them.
settings = gpu_node_settings(host)
if settings is not None:
    stages = read_only_stages()
    try:
        read_ahead(settings, stages)
    except UnreadableOutput as unreadable:
        # This host alone fails; the rest of the fleet is verified.
        fail(name="Refuse this host (its read)", message=str(unreadable))
    else:
        for stage in stages:
            stage.apply(settings, None, None)
