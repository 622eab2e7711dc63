"""
Docker (Debian's docker.io, with containerd) wired to the NVIDIA runtime on a real bookworm node.

The toolkit is the REAL NVIDIA Container Toolkit 1.20.0 (tests/toolkit_repo.py, from the test
lab); `docker run` with the default runtime goes through its nvidia-container-runtime, and the
runtime's debug log (its `create` for the container's id) proves it.
"""

from __future__ import annotations

import json
import re

from harness import assert_no_change
from test_containerd_e2e import IMAGE, assert_wired, busybox_image_tar, copy_in
from toolkit_repo import RUNTIME_DEBUG_LOG, enable_runtime_debug_log, runtime_created

DAEMON_JSON = "/etc/docker/daemon.json"
# A node container needs no bridge and no iptables (DESIGN.md section 5); the rest is a site's file.
SEEDED = {
    "bridge": "none",
    "iptables": False,
    "log-driver": "json-file",
    "log-opts": {"max-size": "10m", "max-file": "3"},
    "registry-mirrors": ["https://mirror.example.internal"],
    "insecure-registries": ["registry.lab:5000"],
    "features": {"buildkit": True},
    "runtimes": {"runsc": {"path": "/usr/local/bin/runsc", "runtimeArgs": ["--platform=systrap"]}},
}


def docker_info(node) -> dict:
    return json.loads(node.sh("docker info --format '{{json .}}'").stdout)


def test_containerd_and_docker_wired_on_one_node_keep_site_keys_run_through_real_nvidia_runtime_and_rerun_unchanged(
    start_node, toolkit_repo
):
    node = start_node()
    node.write(DAEMON_JSON, json.dumps(SEEDED, indent=4) + "\n")
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd,docker", "docker_install": "true",
            **toolkit_repo.data()}

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    changed = first.changed_operations()
    for operation in ("Docker | Install Docker", f"Docker | Wire the nvidia runtime into {DAEMON_JSON}",
                      "containerd | Wire the nvidia runtime into /etc/containerd/config.toml"):
        assert operation in changed, changed

    written = json.loads(node.read(DAEMON_JSON))
    for key, value in SEEDED.items():
        if key == "runtimes":
            assert written["runtimes"]["runsc"] == value["runsc"]
        else:
            assert written[key] == value, key
    assert list(written)[: len(SEEDED)] == list(SEEDED)
    assert node.read(DAEMON_JSON).startswith('{\n  "bridge": "none",\n')
    info = docker_info(node)
    assert info["DefaultRuntime"] == "nvidia"
    assert info["Runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert "runsc" in info["Runtimes"]
    assert info["CgroupDriver"] == "systemd"
    assert node.is_active("docker")
    assert_wired(node, "io.containerd.grpc.v1.cri", [])

    copy_in(node, busybox_image_tar(), "/tmp/busybox-image.tar")
    node.sh("docker load -i /tmp/busybox-image.tar")
    enable_runtime_debug_log(node)
    out = node.sh(f"docker run --rm --network none --cidfile /tmp/nvidia-check.cid {IMAGE} echo through-docker",
                  timeout=120)
    assert out.stdout.strip() == "through-docker", out
    container_id = node.read("/tmp/nvidia-check.cid").strip()
    assert runtime_created(node, container_id), node.read(RUNTIME_DEBUG_LOG)

    before = {unit: node.service(unit) for unit in ("docker", "containerd")}
    files = {path: node.stat(path) for path in (DAEMON_JSON, "/etc/containerd/config.toml")}
    second = node.deploy(data=data)
    assert_no_change(second)
    assert {unit: node.service(unit) for unit in ("docker", "containerd")} == before
    assert {path: node.stat(path) for path in files} == files

    # A daemon.json that is not JSON: the host fails naming file and position; nothing moves.
    node.write(DAEMON_JSON, '{\n  "bridge": "none",\n  "iptables": false,\n}\n')
    untouched = {"file": node.stat(DAEMON_JSON), "docker": node.service("docker")}
    broken = node.deploy(data=data, json_output=False)
    assert broken.returncode != 0
    error = [line for line in broken.output.splitlines() if "is not valid JSON" in line]
    assert error and DAEMON_JSON in error[0] and re.search(r"line 4 column 1", error[0]), broken.explain()
    assert {"file": node.stat(DAEMON_JSON), "docker": node.service("docker")} == untouched
    assert node.is_active("docker")


def test_docker_wired_but_not_installed_stops_with_what_to_do(node):
    result = node.deploy(data={"stages": "runtimes", "container_runtimes": "docker"}, json_output=False)
    assert result.returncode != 0
    message = [line for line in result.output.splitlines() if "Docker is not installed" in line]
    assert message and "docker_install=true" in message[0] and "docker.io" in message[0], result.explain()
    assert not node.exists(DAEMON_JSON)
