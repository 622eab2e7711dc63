"""
A bake (deploy/bake.py): the deploy run by pyinfra's real @chroot connector against an image root,
no running systemd, then that root imported as an image and booted as a node container with real
systemd. The root is the node image's filesystem with Debian's containerd and docker.io installed
as an image build installs them (apt in a container whose PID 1 is not systemd: enabled, never
started), exported to a folder (``docker export``). The stages a bake runs here: kernel, the
first-boot unit (the driver stage without installing a driver: Debian's DKMS build takes minutes
and is not part of this test), the device links' script and udev rule, and both runtimes' configs, merged and checked by the image's own
containerd offline (bookworm's dockerd 20.10 has no ``--validate``: daemon.json is checked by the
engine's schema, as on a live node with that dockerd).
"""

from __future__ import annotations

import sys
import time
import uuid

from harness import REPO, SAFE_DATA, DeployResult, Node, assert_no_change, run

DATA = {**SAFE_DATA, "stages": "kernel,driver,runtimes,verify", "nvidia_driver_install": "false",
        "container_runtimes": "containerd,docker"}
# what the bake ran (verify needs the booted node: a normal run after boot does it)
BAKED = {**DATA, "stages": "kernel,driver,runtimes"}
CONFIG = "etc/containerd/config.toml"


def bake(root, tmp_path) -> DeployResult:
    args = [sys.executable, "-m", "pyinfra", "-y", "--json", f"@chroot/{root}", "deploy/gpu_node.py"]
    for key, value in DATA.items():
        args += ["--data", f"{key}={value}"]
    # the fleet report goes to the test's folder, not the checkout
    args += ["--data", f"fleet_report_path={tmp_path / 'fleet.json'}"]
    result = run(args, check=False, cwd=REPO, timeout=900)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def image_root_with_runtimes(image: str, root) -> None:
    """The node image with containerd and docker.io installed by apt as an image build does (no
    systemd running: the packages enable their units, nothing starts), exported to ``root``."""
    builder = Node(image=image, init=("sleep", "infinity")).start()
    try:
        builder.sh("DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                   "apt-get install -y -qq containerd docker.io >/dev/null", timeout=600)
        run(["sh", "-c", f"docker export {builder.id} | tar -C {root} -x"], timeout=300)
    finally:
        builder.remove()


def test_a_baked_root_boots_to_the_ready_target_and_a_normal_run_then_changes_nothing(image, tmp_path):
    """Bake: a containerd config the image's own containerd rejects, offline, fails the bake naming
    containerd's error and is left byte for byte; once fixed, the runtime configs are merged with no
    daemon restarted, the skipped stages each said in one line, the units enabled (not started); a
    second bake changes nothing; the root booted reaches gpu-node-ready.target with both runtimes
    running the nvidia runtime by default, and a normal @docker run of the stages the bake ran
    changes nothing."""
    started = time.monotonic()
    root = tmp_path / "root"
    root.mkdir()
    image_root_with_runtimes(image, root)
    times = {"root": time.monotonic() - started}

    config = root / CONFIG
    shipped = config.read_bytes()
    config.write_bytes(b'oom_score = "high"\n' + shipped)  # TOML gpu-node reads; containerd does not
    rejected = bake(root, tmp_path)
    assert rejected.returncode != 0
    assert rejected.run_lines("/etc/containerd/config.toml was not changed: /usr/bin/containerd config dump "
                              "rejected the new version: containerd: failed to unmarshal TOML"), rejected.explain()
    assert config.read_bytes() == b'oom_score = "high"\n' + shipped
    config.write_bytes(shipped)
    times["rejected bake"] = time.monotonic() - started

    first = bake(root, tmp_path)
    assert first.returncode == 0, first.explain()
    for stage in ("cdi", "verify"):
        assert len(first.run_lines(f"bake: {stage} skipped in an image root: ")) == 1, first.explain()
    for unit in ("containerd", "docker"):
        assert len(first.run_lines(f"{unit} not restarted: an image root")) == 1, first.explain()
    assert 'default_runtime_name = "nvidia"' in config.read_text()
    assert '"default-runtime": "nvidia"' in (root / "etc" / "docker" / "daemon.json").read_text()
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants"
    assert (wants / "gpu-node-boot.service").is_symlink() and (wants / "gpu-node-ready.target").is_symlink()
    times["bake"] = time.monotonic() - started
    assert_no_change(bake(root, tmp_path))
    times["second bake"] = time.monotonic() - started

    tag = f"gpu-node-test/baked:{uuid.uuid4().hex[:12]}"
    run(["sh", "-c", f"tar -C {root} -c . | docker import -c 'CMD [\"/sbin/init\"]' - {tag}"], timeout=300)
    node = Node(image=tag)
    try:
        node.start()
        assert node.is_active("gpu-node-ready.target")
        assert '"ok": true' in node.read("/var/lib/gpu-node/boot-report.json")
        assert node.is_active("containerd") and node.is_active("docker")
        assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 1
        assert node.sh("docker info --format '{{.DefaultRuntime}}'").stdout.strip() == "nvidia"
        times["booted"] = time.monotonic() - started
        assert_no_change(node.deploy(data=BAKED))
    finally:
        node.remove()
        run(["docker", "rmi", tag], check=False)
    times["normal run"] = time.monotonic() - started
    print("bake e2e, seconds since the start:", ", ".join(f"{name} {at:.0f}" for name, at in times.items()))
