"""
The kube-scheduler static pod edit's rollback, through pyinfra's real CLI on a real node container,
with a kubectl STAND-IN.

The edit itself and the restarted scheduler are proven on the lab cluster's real kubelet and
kube-scheduler v1.28.7 (tests/e2e/test_gpushare_cluster.py). A scheduler that never becomes Ready
on the tool's own, valid output is a fault the real one cannot be made to show, so here the node
holds kubeadm v1.28's kube-scheduler.yaml and a kubectl STAND-IN that reports the scheduler's
mirror pod as a kubelet would (Ready, or never Ready). Files, uploads, checksums, moves, the
bounded wait and the rollback are all real.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness import assert_no_change

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpushare"
KUBEADM_128 = (FIXTURES / "kubeadm-v1.28-kube-scheduler.yaml").read_text()
# Golden texts: the config for a 1.28 cluster, and kubeadm's manifest with the flag, mount, volume
# and checksum annotation (its digest a placeholder, filled in with the config's SHA-256).
CONFIG_128 = (FIXTURES / "scheduler-config-v1.28.yaml").read_text()
EDITED_128 = (FIXTURES / "kubeadm-v1.28-kube-scheduler.edited.yaml").read_text()
PLACEHOLDER_DIGEST = "0123456789abcdef" * 4
DEPLOY = "tests/fixtures/gpushare/scheduler_manifest_deploy.py"
MANIFEST = "/etc/kubernetes/manifests/kube-scheduler.yaml"
CONFIG = "/etc/kubernetes/gpushare/scheduler-config.yaml"
STAGING = "/etc/kubernetes/gpushare/staging"

KUBECTL_STAND_IN = """#!/bin/bash
# kubectl STAND-IN (no cluster here): the kube-scheduler mirror pod for the manifest in place.
echo "$*" >> /var/log/kubectl-stand-in.log
digest=$(grep -o 'scheduler-config-sha256: [0-9a-f]*' /etc/kubernetes/manifests/kube-scheduler.yaml | cut -d' ' -f2)
ready=$(cat /etc/kubectl-stand-in-ready 2>/dev/null || echo True)
if [ -n "$digest" ]; then echo "hash-$digest $digest $ready"; else echo "hash-kubeadm <no value> True"; fi
"""


def test_scheduler_manifest_edit_applied_once_kept_and_rolled_back_kubectl_standin_never_ready(node):
    node.write(MANIFEST, KUBEADM_128, mode="600")
    node.write("/usr/local/bin/kubectl", KUBECTL_STAND_IN, mode="755")

    first = node.deploy(deploy_file=DEPLOY)
    assert first.returncode == 0, first.explain()
    digest = hashlib.sha256(CONFIG_128.encode()).hexdigest()
    assert node.read(CONFIG) == CONFIG_128
    assert node.read(MANIFEST) == EDITED_128.replace(PLACEHOLDER_DIGEST, digest)
    assert node.read(f"{STAGING}/kube-scheduler.yaml.before-gpushare") == KUBEADM_128
    assert node.sh(f"ls -A {MANIFEST.rsplit('/', 1)[0]}").stdout.split() == ["kube-scheduler.yaml"]
    assert node.sh(f"stat -c %a {MANIFEST}").stdout.strip() == "600"
    assert "get pod kube-scheduler-" in node.read("/var/log/kubectl-stand-in.log")

    before = node.stat(MANIFEST)
    assert_no_change(node.deploy(deploy_file=DEPLOY))
    assert node.stat(MANIFEST) == before

    # A new config (v1beta3, as for a 1.24 cluster) whose scheduler never comes back: rolled back.
    node.write("/etc/kubectl-stand-in-ready", "False\n")
    edited = node.read(MANIFEST)
    failed = node.deploy(deploy_file=DEPLOY, data={"test_cluster_version": "1.24",
                                                   "gpushare_scheduler_ready_timeout": "10"})
    assert failed.returncode != 0
    assert "was not Ready with the new manifest within 10s: restored" in failed.output
    assert node.read(MANIFEST) == edited
