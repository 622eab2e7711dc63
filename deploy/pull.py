"""
Pull mode: the node converges itself, with no controller (docs/without-controller.md). The
``gpu-node-pull.service`` unit runs, on the node, from the installed package:

    pyinfra -y @local <package>/pull.py

with the settings of /etc/gpu-node/settings.toml, read and validated by deploy/node/pull_settings.py
only: no file, one root alone cannot change, or an invalid setting stops the run in one line
before any change.
"""

import importlib
import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: its package (deploy/ in a checkout,
# gpu_node once installed) is imported by its folder's name, whatever the working directory, and its
# modules through its load(), which keeps their bytecode (deploy/__init__.py).
package = Path(__file__).resolve().parent
sys.path.insert(0, str(package.parent))
settings = importlib.import_module(package.name).load(".node.pull_settings").settings_from_file()
importlib.import_module(package.name).load(".entry").provision_gpu_node._inner(**settings)
