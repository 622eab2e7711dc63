"""
Pull mode (deploy/pull.py, deploy/pull_settings.py, deploy/pull_install.py) on a bookworm node
container with real systemd, no controller: the wheel built from this checkout with its dependencies
(as tests/e2e/test_package.py builds it) installed on the node into a virtualenv, the units installed
by ``python -m gpu_node.pull_install``, and ``gpu-node-pull.service`` (what the timer starts) run by
systemd. Everything is real: pyinfra's @local connector, apt, Debian's containerd.
"""

from __future__ import annotations

import sys
import time

import pytest
from harness import REPO, run

SETTINGS = "/etc/gpu-node/settings.toml"
GOOD = """\
stages = ["kernel", "runtimes"]
container_runtimes = ["containerd"]
kernel_modules_load = false
reboot_allowed = false
"""
CONFIG = "/etc/containerd/config.toml"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """gpu-node's wheel and its dependencies' wheels, for a node to install with no index."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(folder), str(REPO)], timeout=900)
    for path in [folder, *folder.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def pull(node):
    """Run the pull service once, as its timer does; (exit code, the service's journal of this run)."""
    cursor = node.sh("journalctl -n 0 --show-cursor -q | tail -n 1").stdout.strip().removeprefix("-- cursor: ")
    result = node.sh("systemctl start gpu-node-pull.service", check=False, timeout=1200)
    journal = node.sh(f"journalctl -u gpu-node-pull.service --no-pager -o cat --after-cursor='{cursor}'").stdout
    return result.returncode, journal


def test_a_node_installs_the_wheel_converges_by_pull_restores_drift_and_refuses_a_broken_setting(
    start_node, wheelhouse
):
    """The node converges with no controller; a runtime config changed by hand is restored by the
    next run of the pull service; a broken setting fails the run in one line naming the file's line,
    and nothing changes."""
    started = time.monotonic()
    node = start_node(["-v", f"{wheelhouse}:/wheels:ro"])
    node.sh("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null",
            timeout=900)
    node.sh("python3 -m venv /opt/gpu-node && /opt/gpu-node/bin/pip install -q --no-index --find-links /wheels gpu-node",
            timeout=900)
    out = node.sh("/opt/gpu-node/bin/python -m gpu_node.pull_install").stdout
    assert "gpu-node-pull.timer enabled" in out
    assert node.is_active("gpu-node-pull.timer")
    node.write(SETTINGS, GOOD)

    code, journal = pull(node)
    assert code == 0, journal
    assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 1
    report = node.stat("/var/lib/gpu-node/fleet-report.json")

    # drift: the runtime's config changed by hand; the next pull run puts the wiring back
    node.sh(f"sed -i 's/default_runtime_name = \"nvidia\"/default_runtime_name = \"runc\"/' {CONFIG}")
    assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 0
    code, journal = pull(node)
    assert code == 0, journal
    assert node.sh(f"grep -c 'default_runtime_name = \"nvidia\"' {CONFIG}").stdout.strip() == "1"
    assert node.stat("/var/lib/gpu-node/fleet-report.json") != report  # the report rewritten

    # a broken setting: one line naming the file's line, nothing changed
    before = node.stat(CONFIG)
    node.write(SETTINGS, GOOD.replace('["containerd"]', '["podman"]'))
    code, journal = pull(node)
    assert code != 0
    lines = [line for line in journal.splitlines() if "invalid setting container_runtimes" in line]
    assert len(lines) == 1 and f"({SETTINGS} line 2)" in lines[0], journal
    assert "Traceback" not in journal, journal
    assert node.stat(CONFIG) == before
    print(f"pull e2e: {time.monotonic() - started:.1f} s")
