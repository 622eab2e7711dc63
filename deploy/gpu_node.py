"""
Turn every host into a Kubernetes GPU node:

    pyinfra inventory.py deploy/gpu_node.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host  # noqa: E402

from deploy.entry import gpu_node_settings  # noqa: E402
from deploy.facts.base import UnreadableOutput  # noqa: E402
from deploy.operations.failure import HostRefusal, fail  # noqa: E402
from deploy.stages import stages_for  # noqa: E402
from deploy.tasks.drain import checked_drain_target  # noqa: E402
from deploy.tasks.preflight import preflight  # noqa: E402

settings = gpu_node_settings(host)
if settings is not None:
    stages = stages_for(settings)
    try:
        found = preflight(settings, stages)
    except (HostRefusal, UnreadableOutput) as refusal:
        # This host alone fails, before any change on it; the rest of the fleet goes on.
        fail(name="Refuse this host (preflight)", message=str(refusal))
    else:
        # drain_before_restart: the node to drain before a restart; its control plane checked now.
        drain = checked_drain_target(settings)
        for stage in stages:
            stage.apply(settings, found, drain)
