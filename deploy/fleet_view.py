"""
The fleet view without a controller run: each node's own reports (/var/lib/gpu-node/*.json, as the
first-boot unit and pull runs write them) read over SSH, one remote command per node, into the
fleet table, and its JSON and HTML page at fleet_report_path (docs/without-controller.md). It
changes nothing on the nodes; a node whose report failed, or whose files are no reports, fails.

    pyinfra inventory.py deploy/fleet_view.py --data fleet_report_path=fleet.json
"""

import importlib
import sys
from pathlib import Path

from pyinfra import host

# pyinfra executes this file rather than importing it: its package (deploy/ in a checkout,
# gpu_node once installed) is imported by its folder's name, whatever the working directory, and its
# modules through its load(), which keeps their bytecode (deploy/__init__.py).
package = Path(__file__).resolve().parent
sys.path.insert(0, str(package.parent))
importlib.import_module(package.name).load(".fleet.from_reports").view_this_host(host)
