"""
Write what deploy/k8s_gpu.py would apply as files, for GitOps (Argo CD, Flux) or kubectl apply;
on the controller, reaching no cluster and no GPU node (docs/cluster.md, GitOps):

    pyinfra @local deploy/render_cluster.py --data manifests_dir=gitops
    pyinfra @local deploy/render_cluster.py --data manifests_dir=gitops --data manifests_inventory=inventory.py
"""

import importlib
import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: its package (deploy/ in a checkout,
# gpu_node once installed) is imported by its folder's name, whatever the working directory, and its
# modules through its load(), which keeps their bytecode (deploy/__init__.py).
package = Path(__file__).resolve().parent
sys.path.insert(0, str(package.parent))
# The deploy's own body (_inner): the operations named as a run of this file names them, without the
# "{deploy name} | " a site's call of the function puts in front.
importlib.import_module(package.name).load(".cluster").render_cluster_files._inner()
