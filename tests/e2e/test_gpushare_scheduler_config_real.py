"""
The KubeSchedulerConfiguration the gpushare stage writes, read by the REAL kube-scheduler v1.28.7
(from the Kubernetes server tarball in the opt-in lab, docs/lab.md): ``--write-config-to`` makes
it load and default the config, write what it understood and exit, without a cluster
(``--secure-port=0``: nothing listens).

1.28 is the release that removed ``kubescheduler.config.k8s.io/v1beta2``, the version the gpushare
guides still show: the real scheduler refuses it with the guides' error, and accepts exactly the
versions the Kubernetes changelog says 1.28 serves.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from lab import assets
from lab_assets import lab_asset, needs_lab

from deploy.k8s.gpushare import (
    EXTENDER_URL_PREFIX,
    MANAGED_RESOURCE,
    SCHEDULER_CONFIG_GROUP,
    scheduler_config_api_version,
    scheduler_config_yaml,
)

pytestmark = needs_lab

VERSION = "v1.28.7"
# The Kubernetes changelog: 1.28 removed v1beta2 (kubernetes/kubernetes#117649; v1beta1 went in 1.23,
# #104782); v1beta3 stays until 1.29 (#119994); v1 since 1.25.
SERVED_BY_1_28 = {f"{SCHEDULER_CONFIG_GROUP}/v1beta3", f"{SCHEDULER_CONFIG_GROUP}/v1"}
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: unused
  cluster: {server: "https://127.0.0.1:9"}
contexts:
- name: unused
  context: {cluster: unused, user: unused}
current-context: unused
users:
- name: unused
  user: {}
"""


def load_with_the_real_scheduler(tmp_path, config_text: str) -> subprocess.CompletedProcess:
    binary = lab_asset(assets.kubernetes_binary, "kube-scheduler")
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    written = tmp_path / "written.yaml"
    written.unlink(missing_ok=True)
    return subprocess.run(
        [str(binary), f"--config={config}", f"--write-config-to={written}", "--secure-port=0"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def config_for(tmp_path, api_version: str) -> str:
    """The stage's own config, under ``api_version``, its kubeconfig a file that exists."""
    kubeconfig = tmp_path / "scheduler.conf"
    kubeconfig.write_text(KUBECONFIG)
    config = yaml.safe_load(scheduler_config_yaml(VERSION, kubeconfig=str(kubeconfig)))
    config["apiVersion"] = api_version
    return yaml.safe_dump(config, sort_keys=False)


def test_the_generated_v1_config_is_loaded_by_the_real_scheduler_with_the_extender(tmp_path):
    assert scheduler_config_api_version(VERSION) == f"{SCHEDULER_CONFIG_GROUP}/v1"
    result = load_with_the_real_scheduler(tmp_path, config_for(tmp_path, scheduler_config_api_version(VERSION)))
    assert result.returncode == 0, result.stderr
    assert '"Wrote configuration"' in result.stderr
    written = yaml.safe_load((tmp_path / "written.yaml").read_text())
    assert written["apiVersion"] == f"{SCHEDULER_CONFIG_GROUP}/v1"
    (extender,) = written["extenders"]
    assert extender["urlPrefix"] == EXTENDER_URL_PREFIX
    assert (extender["filterVerb"], extender["bindVerb"]) == ("filter", "bind")
    assert extender["nodeCacheCapable"] is True
    assert extender["managedResources"] == [{"name": MANAGED_RESOURCE}]


def test_a_v1beta2_config_is_refused_with_the_error_the_gpushare_guides_show(tmp_path):
    result = load_with_the_real_scheduler(tmp_path, config_for(tmp_path, f"{SCHEDULER_CONFIG_GROUP}/v1beta2"))
    assert result.returncode == 1
    assert (
        'no kind \\"KubeSchedulerConfiguration\\" is registered for version \\"kubescheduler.config.k8s.io/v1beta2\\"'
    ) in result.stderr, result.stderr
    assert not (tmp_path / "written.yaml").exists()


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2", "v1beta3", "v1"])
def test_the_versions_the_changelog_says_1_28_serves_are_the_ones_the_real_scheduler_accepts(tmp_path, version):
    api_version = f"{SCHEDULER_CONFIG_GROUP}/{version}"
    result = load_with_the_real_scheduler(tmp_path, config_for(tmp_path, api_version))
    accepted = result.returncode == 0
    assert accepted == (api_version in SERVED_BY_1_28), result.stderr
