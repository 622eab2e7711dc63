"""
The DRA lab (tests/lab/dra.py) up to the lab's boundary, without the lab: the e2e skipping in one
line naming GPU_NODE_LAB; the release check of its own server tarball (small tarballs in the
release's layout); the lab changes to containerd 2.x's config, read back by sid's REAL containerd
2.1 (``config default``, ``config dump``); the kubelet's cgroup v1 setting; and the readings of a
ResourceClaim's allocation and a container's devices. What needs the lab itself (binaries that run,
a node that joins, the driver's plugin) is tests/e2e/test_dra_lab_e2e.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lab
import pytest
import tomlkit
from containerd_releases import config_dump, release
from lab import assets
from lab import dra as dra_lab
from lab.kubelet import kubelet_config
from test_lab import lab_dir, server_tarball  # noqa: F401 (lab_dir: the fixture)

from deploy.settings import parse_settings
from deploy.tasks.dra_cluster import image

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / "tests" / "e2e" / "test_dra_lab_e2e.py"
PAUSE = assets.IMAGES["pause"]


def test_without_gpu_node_lab_the_e2e_skips_in_one_line_naming_the_setting():
    env = {key: value for key, value in os.environ.items() if key != lab.LAB_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", str(E2E)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "1 test needs the lab: set GPU_NODE_LAB, see docs/lab.md" in lines, result.stdout
    assert any(line.startswith("SKIPPED [1]") and line.endswith(lab.UNSET) for line in lines), result.stdout


def dra_tarball(lab_dir: Path, version: str | None) -> Path:  # noqa: F811 - the fixture's value
    folder = lab_dir / dra_lab.SERVER_FOLDER
    folder.mkdir(exist_ok=True)
    return server_tarball(folder, version)


@pytest.mark.parametrize("version", ["v1.34.0", "v1.37.2"])
def test_the_dra_release_is_unpacked_from_its_own_folder(lab_dir, version):  # noqa: F811 - the fixture
    dra_tarball(lab_dir, version)
    kubelet = dra_lab.kubernetes_binary("kubelet")
    assert kubelet.read_bytes().startswith(b"#!/bin/sh\necho kubelet") and os.access(kubelet, os.X_OK)
    assert kubelet.parent == assets.CACHE / dra_lab.SERVER_CACHE  # apart from the 1.28 release's


@pytest.mark.parametrize(
    "version, named",
    [
        (
            "v1.33.5",
            "kubernetes-dra/kubernetes-server-linux-amd64.tar.gz is Kubernetes v1.33.5; the DRA lab needs 1.34",
        ),
        (None, "kubernetes-server-linux-amd64.tar.gz holds no kubernetes/server/bin/kube-apiserver.docker_tag"),
        ("nightly", "records the release 'nightly', which is no version"),
    ],
)
def test_a_release_that_cannot_serve_dra_is_named_in_one_line(lab_dir, version, named):  # noqa: F811 - the fixture
    dra_tarball(lab_dir, version)
    with pytest.raises(lab.LabMissing) as missing:
        dra_lab.kubernetes_binary("kube-apiserver")
    assert named in str(missing.value) and "\n" not in str(missing.value)


def test_a_lab_without_the_dra_release_names_its_place_and_the_setting(lab_dir):  # noqa: F811 - the fixture
    server_tarball(lab_dir)  # the 1.28 release alone
    with pytest.raises(
        lab.LabFileMissing,
        match=r"kubernetes-dra/kubernetes-server-linux-amd64\.tar\.gz is missing "
        r"from the lab \(GPU_NODE_LAB=",
    ):
        dra_lab.start("unused-image", {})


@pytest.fixture(scope="module")
def containerd_2():
    found = release("sid")
    assert found.major == 2, found.version
    return found


def test_the_cni_folders_are_read_from_containerd_2s_own_config(containerd_2):
    default = subprocess.run(
        [str(containerd_2.binary), "config", "default"], capture_output=True, text=True, check=True
    ).stdout
    assert dra_lab.cni_paths(default) == {
        "cni_bin": "/usr/lib/cni",
        "cni_conf": "/etc/cni/net.d",
        "config": "/etc/containerd/config.toml",
    }


def test_the_lab_changes_to_containerd_2_are_what_containerd_runs_and_made_once(containerd_2, tmp_path):
    default = subprocess.run(
        [str(containerd_2.binary), "config", "default"], capture_output=True, text=True, check=True
    ).stdout
    changed = dra_lab.lab_config(default, PAUSE)
    config = tmp_path / "config.toml"
    config.write_text(changed)
    dumped = config_dump(containerd_2.binary, config)
    assert dumped.returncode == 0, dumped.stderr
    plugins = tomlkit.parse(dumped.stdout)["plugins"]
    assert plugins[dra_lab.CRI_IMAGES]["pinned_images"]["sandbox"] == PAUSE
    assert plugins[dra_lab.CRI_RUNTIME]["restrict_oom_score_adj"] is True
    assert plugins[dra_lab.CRI_RUNTIME]["enable_cdi"] is True  # what DRA's devices reach containers by
    assert dra_lab.lab_config(changed, PAUSE) is None


def test_the_dra_kubelet_is_told_to_run_on_cgroup_v1_and_the_others_are_not():
    assert json.loads(kubelet_config(1, 2, dra_lab.KUBELET_SETTINGS))["failCgroupV1"] is False
    assert "failCgroupV1" not in json.loads(kubelet_config(1, 2))


def test_the_labs_driver_image_is_the_one_the_deploy_runs_by_default():
    assert assets.IMAGES["dra-driver"] == image(parse_settings({}))


CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "gpu-node-dra-smoke-test-gpu-x7k2p", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu-node.nvidia.com"}}]}},
    "status": {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "lab-dra-gpu-1", "device": "gpu-1"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "gpu-node-dra-smoke-test", "uid": "1"}],
    },
}


def test_a_claims_allocation_is_read_per_device():
    assert dra_lab.claim_allocation(CLAIM) == [("gpu.nvidia.com", "lab-dra-gpu-1", "gpu-1")]
    assert dra_lab.claim_allocation({**CLAIM, "status": {}}) == []  # not allocated yet


def test_a_containers_device_nodes_are_read_from_its_runtime_spec():
    inspected = {
        "info": {
            "runtimeSpec": {
                "linux": {
                    "devices": [
                        {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
                        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
                    ]
                }
            }
        }
    }
    assert dra_lab.container_devices(inspected) == ["/dev/nvidia1", "/dev/nvidiactl"]
    assert dra_lab.container_devices({"info": {"runtimeSpec": {"linux": {}}}}) == []
