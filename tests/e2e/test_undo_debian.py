"""
The undo run (deploy/undo.py) on a real bookworm node with Debian's containerd and docker.io
installed before gpu-node: snapshot, deploy (kernel, the first-boot unit, toolkit, runtimes: both
wired), undo with
undo_remove_packages, the same snapshot. apt, dpkg, systemd, containerd and Docker are real; the
toolkit is tests/toolkit_repo.py's (the STAND-IN packages, test id ``standin-toolkit``, unless the
opt-in lab serves NVIDIA's debs). No GPU.

The snapshot: the dpkg package set with versions and states (holds among them) and apt-mark
showhold; every file and symbolic link under /etc with its hash (or target), mode and owner; the
enabled unit files. Left out: /etc/ld.so.cache, which ldconfig rewrites on every package install
and removal (a cache of the libraries present, not configuration: what it lists is in the package
set).
"""

from __future__ import annotations

import time

from harness import assert_no_change

from deploy.node.records import RECORDS_DIR

# Batched (find's own printf, one sha256sum for many files): a process per file would cost seconds per snapshot.
SNAPSHOT = r"""
dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\n'
echo '--- holds'
apt-mark showhold | sed 's/^/held /'
echo '--- /etc'
find /etc -xdev -type l -printf '%p -> %l\n'
find /etc -xdev -type f ! -path /etc/ld.so.cache -printf '%p %m %u:%g\n'
find /etc -xdev -type f ! -path /etc/ld.so.cache -print0 | xargs -0 sha256sum
echo '--- enabled units'
systemctl list-unit-files --state=enabled --no-legend --no-pager | awk '{ print "unit", $1, $2 }'
"""

UNDO = "deploy/undo.py"


def snapshot(node) -> list[str]:
    return sorted(node.sh(SNAPSHOT).stdout.splitlines())


def differences(before: list[str], after: list[str]) -> list[str]:
    return [f"- {line}" for line in before if line not in after] + [f"+ {line}" for line in after if line not in before]


def test_undo_returns_a_debian_node_with_containerd_and_docker_to_its_snapshot_and_twice_changes_nothing(
    node, toolkit_repo
):
    """Never deployed: the undo changes nothing. Deployed (toolkit held, both runtimes wired, the
    kernel stage's files), then undone with undo_remove_packages: the snapshot is the one before.
    A second undo changes nothing. The toolkit is tests/toolkit_repo.py's (STAND-IN unless the lab)."""
    started = time.monotonic()
    node.sh(
        "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
        "apt-get install -y -qq containerd docker.io >/dev/null",
        timeout=600,
    )
    node.sh("systemctl is-active containerd docker")
    times = {"runtimes installed": time.monotonic() - started}
    before = snapshot(node)
    assert any(line.startswith("docker.io ") for line in before) and any(
        line.startswith("containerd ") for line in before
    )

    never = node.deploy(deploy_file=UNDO)
    assert_no_change(never)
    assert "no records of gpu-node on this node" in never.output, never.explain()
    assert snapshot(node) == before
    times["undo on a node never deployed"] = time.monotonic() - started

    # the driver stage without a driver: the first-boot unit and its target, gpu-node's own units
    data = {
        "stages": "kernel,driver,toolkit,runtimes",
        "nvidia_driver_install": "false",
        "container_runtimes": "containerd,docker",
        **toolkit_repo.data(version=toolkit_repo.version),
    }
    deployed = node.deploy(data=data)
    assert deployed.returncode == 0, deployed.explain()
    times["deploy"] = time.monotonic() - started
    wired = snapshot(node)
    assert wired != before
    assert "nvidia" in node.read("/etc/docker/daemon.json") and "nvidia" in node.read("/etc/containerd/config.toml")
    assert "nvidia-container-toolkit" in node.sh("apt-mark showhold").stdout
    assert node.sh("systemctl is-enabled gpu-node-boot.service gpu-node-ready.target").stdout.split() == [
        "enabled",
        "enabled",
    ]
    assert not node.is_active("gpu-node-boot.service")  # enabled, not started: the next boot runs it

    undone = node.deploy(deploy_file=UNDO, data={"undo_remove_packages": "true"})
    assert undone.returncode == 0, undone.explain()
    # one line per runtime config, saying which way it went back: Debian's containerd ships its config,
    # Docker's daemon.json was gpu-node's
    assert len(undone.run_lines("undo: /etc/containerd/config.toml: restored byte for byte")) == 1, undone.explain()
    assert len(undone.run_lines("undo: /etc/docker/daemon.json: removed: gpu-node created it")) == 1, undone.explain()
    times["undo"] = time.monotonic() - started
    after = snapshot(node)
    assert differences(before, after) == [], "\n".join(differences(before, after)) + "\n" + undone.explain()
    assert not node.exists(RECORDS_DIR)
    assert node.is_active("containerd") and node.is_active("docker")
    # gpu-node's own units: gone, not only their files (the snapshot holds the enablement links)
    assert node.sh("systemctl is-enabled gpu-node-boot.service gpu-node-ready.target", check=False).returncode != 0

    again = node.deploy(deploy_file=UNDO, data={"undo_remove_packages": "true"})
    assert_no_change(again)
    assert snapshot(node) == before
    times["second undo"] = time.monotonic() - started
    print("undo e2e, seconds since the node started:", ", ".join(f"{name} {at:.0f}" for name, at in times.items()))
