"""
A bake (deploy/bake.py): the deploy run by pyinfra's real @chroot connector against an image root,
the node image's own filesystem exported to a folder (``docker create`` + ``docker export``), no
running systemd, then that root imported as an image and booted as a node container with real
systemd. The stages a bake runs here: kernel and the first-boot unit (the driver stage without
installing a driver: Debian's DKMS build takes minutes and is not part of this test).
"""

from __future__ import annotations

import sys
import time
import uuid

from harness import REPO, SAFE_DATA, DeployResult, Node, assert_no_change, run

DATA = {**SAFE_DATA, "stages": "kernel,driver,runtimes,verify", "nvidia_driver_install": "false"}
# what the bake ran (the runtimes and verify need the booted node: a normal run after boot does them)
BAKED = {**DATA, "stages": "kernel,driver"}


def bake(root, tmp_path) -> DeployResult:
    args = [sys.executable, "-m", "pyinfra", "-y", "--json", f"@chroot/{root}", "deploy/gpu_node.py"]
    for key, value in DATA.items():
        args += ["--data", f"{key}={value}"]
    # the fleet report goes to the test's folder, not the checkout
    args += ["--data", f"fleet_report_path={tmp_path / 'fleet.json'}"]
    result = run(args, check=False, cwd=REPO, timeout=900)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def test_a_baked_root_boots_to_the_ready_target_and_a_normal_run_then_changes_nothing(image, tmp_path):
    """Bake: the skipped stages each said in one line, the units enabled (not started: nothing runs);
    a second bake changes nothing; the root booted reaches gpu-node-ready.target, and a normal @docker
    run of the stages the bake ran changes nothing."""
    started = time.monotonic()
    root = tmp_path / "root"
    root.mkdir()
    container = run(["docker", "create", image]).stdout.strip()
    try:
        run(["sh", "-c", f"docker export {container} | tar -C {root} -x"], timeout=300)
    finally:
        run(["docker", "rm", container])

    first = bake(root, tmp_path)
    assert first.returncode == 0, first.explain()
    for stage in ("containerd", "cdi", "device links", "verify"):
        assert len(first.run_lines(f"bake: {stage} skipped in an image root: ")) == 1, first.explain()
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants"
    assert (wants / "gpu-node-boot.service").is_symlink() and (wants / "gpu-node-ready.target").is_symlink()
    assert_no_change(bake(root, tmp_path))

    tag = f"gpu-node-test/baked:{uuid.uuid4().hex[:12]}"
    run(["sh", "-c", f"tar -C {root} -c . | docker import -c 'CMD [\"/sbin/init\"]' - {tag}"], timeout=300)
    node = Node(image=tag)
    try:
        node.start()
        assert node.is_active("gpu-node-ready.target")
        assert '"ok": true' in node.read("/var/lib/gpu-node/boot-report.json")
        assert_no_change(node.deploy(data=BAKED))
    finally:
        node.remove()
        run(["docker", "rmi", tag], check=False)
    print(f"bake e2e: {time.monotonic() - started:.1f} s")
