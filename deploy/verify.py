"""
Verify every GPU node, read-only: the ladder and a report, changing nothing.

    pyinfra inventory.py deploy/verify.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host, logger  # noqa: E402

from deploy.fleet_report import fleet_report_for  # noqa: E402
from deploy.settings import host_settings  # noqa: E402
from deploy.tasks.verify import verify  # noqa: E402

# No preflight: its refusals (disk, headers) are about installing, and verification must
# still report on a node that would not pass them.
if "control_plane" in host.groups and "gpu_nodes" not in host.groups:
    logger.info(f"{host.print_prefix}in control_plane only: not a GPU node, skipped")
else:
    settings = host_settings(host)
    # One table and one JSON file for the whole run, after the last host disconnects.
    fleet_report_for(host.state, settings.fleet_report_path)
    verify(settings)
