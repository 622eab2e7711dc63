"""
Write what deploy/k8s_gpu.py would apply as files, for GitOps (Argo CD, Flux) or kubectl apply;
on the controller, reaching no cluster and no GPU node (docs/cluster.md, GitOps):

    pyinfra @local deploy/render_cluster.py --data manifests_dir=gitops
    pyinfra @local deploy/render_cluster.py --data manifests_dir=gitops --data manifests_inventory=inventory.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host  # noqa: E402

from .entry import freeze_imported_objects  # noqa: E402
from .settings import host_settings  # noqa: E402
from .tasks.gitops import write_cluster_files  # noqa: E402

freeze_imported_objects()
write_cluster_files(host_settings(host))
