"""
Interrupted runs and a busy package manager, on real bookworm node containers.

A run is interrupted the way a lost SSH connection or a killed controller does it: the pyinfra
process is killed, and so is the remote shell it was driving. To stop at an exact point, a test
INTERRUPTION DEVICE (``/usr/local/sbin/systemctl``, first on PATH) holds ``systemctl start`` /
``restart`` while ``/run/gpu-node-test/hold`` exists and passes everything else to the real
systemctl; for "during a restart" a systemd drop-in holds containerd's start instead. The
daemons (containerd, systemd, apt, dpkg) are real; only the moment of the kill is arranged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import tomlkit
from harness import REPO, DeployResult, assert_no_change, wait_for

from deploy.facts.recovery import PENDING_RESTART_DIR

CONFIG = "/etc/containerd/config.toml"
PENDING_MARK = f"{PENDING_RESTART_DIR}/containerd"
HOLD = "/run/gpu-node-test/hold"
HELD = "/run/gpu-node-test/held"
INTERRUPTION_DEVICE = f"""#!/bin/sh
# TEST INTERRUPTION DEVICE (tests/e2e/test_interruptions.py): hold start/restart while {HOLD} exists.
for arg in "$@"; do
    case $arg in
    start | restart)
        if [ -e {HOLD} ]; then
            echo "$$ $PPID" >{HELD}
            while [ -e {HOLD} ]; do sleep 0.2; done
        fi
        ;;
    esac
done
exec /usr/bin/systemctl "$@"
"""
HOLD_START_DROPIN = "/etc/systemd/system/containerd.service.d/gpu-node-test-hold.conf"
RUNTIMES = {"stages": "runtimes"}


# apt runs dpkg with its own PATH (DPkg::Path), which leaves /usr/local out: put it first there too.
APT_PATH_FOR_THE_DEVICE = "/etc/apt/apt.conf.d/00gpu-node-test-interruption-device"


def install_interruption_device(node) -> None:
    node.sh(f"mkdir -p /run/gpu-node-test && touch {HOLD}")
    node.write("/usr/local/sbin/systemctl", INTERRUPTION_DEVICE, mode="755")
    node.write(APT_PATH_FOR_THE_DEVICE, 'DPkg::Path "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin";\n')


def remove_interruption_device(node) -> None:
    node.sh(f"rm -f /usr/local/sbin/systemctl {HOLD} {APT_PATH_FOR_THE_DEVICE}")


class BackgroundDeploy:
    """pyinfra's CLI started in its own process group, so that it can be killed mid-run."""

    def __init__(self, node, data: dict) -> None:
        args, env = node.deploy_command(data=data)
        self.args = args
        self.process = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )

    def kill(self) -> str:
        """Kill the controller first: a remote side killed first would let pyinfra end by itself."""
        assert self.process.poll() is None, "the deploy ended before it could be interrupted"
        os.killpg(self.process.pid, signal.SIGKILL)
        output, _ = self.process.communicate(timeout=60)
        return output

    def finish(self, timeout: float = 900) -> DeployResult:
        output, _ = self.process.communicate(timeout=timeout)
        return DeployResult(self.process.returncode, output, "", self.args)


def kill_held_remote_shell(node) -> None:
    """What a dropped connection does to the remote side: the shell running our script dies, and
    what it was running with it (the safe install's script names its candidate file)."""
    wrapper, parent = node.read(HELD).split()
    node.sh(f"kill -9 {parent} {wrapper}; pkill -9 -f gpu-node-candidate", check=False)


def assert_whole_config(node) -> dict:
    """A config file is never half-written: what is on disk parses, whichever version it is."""
    return tomlkit.parse(node.read(CONFIG)).unwrap()


def wires_nvidia(config: dict) -> bool:
    cri = config.get("plugins", {}).get("io.containerd.grpc.v1.cri", {})
    return "nvidia" in cri.get("containerd", {}).get("runtimes", {})


def test_killed_between_config_write_and_restart_the_next_run_restarts_and_the_one_after_changes_nothing(
    containerd_node,
):
    node = containerd_node
    before = node.service("containerd")
    install_interruption_device(node)

    run = BackgroundDeploy(node, RUNTIMES)
    wait_for(lambda: node.exists(HELD), timeout=300, what="the deploy to reach containerd's restart")
    output = run.kill()
    kill_held_remote_shell(node)
    remove_interruption_device(node)

    # The new config is whole and in place, the daemon still runs the old one, the mark says so.
    assert wires_nvidia(assert_whole_config(node)), output
    assert node.service("containerd")["ActiveEnterTimestampMonotonic"] == before["ActiveEnterTimestampMonotonic"]
    assert node.read(PENDING_MARK).strip() == CONFIG
    installed = node.stat(CONFIG)

    converge = node.deploy(data=RUNTIMES, json_output=False)
    assert converge.returncode == 0, converge.explain()
    assert "interrupted before containerd restarted: restarting it" in converge.output, converge.explain()
    restarted = node.service("containerd")
    assert restarted["ActiveEnterTimestampMonotonic"] != before["ActiveEnterTimestampMonotonic"]
    assert restarted["ActiveState"] == "active"
    assert node.stat(CONFIG) == installed  # the restart did not rewrite the file
    assert not node.exists(PENDING_MARK)

    again = node.deploy(data=RUNTIMES)
    assert_no_change(again)
    assert node.service("containerd") == restarted


def test_killed_during_the_restart_the_next_run_restarts_and_the_one_after_changes_nothing(containerd_node):
    node = containerd_node
    node.write(
        HOLD_START_DROPIN,
        "[Service]\nExecStartPre=/bin/sh -c 'while [ -e /run/gpu-node-test/hold-start ]; do sleep 0.2; done'\n",
    )
    node.sh("mkdir -p /run/gpu-node-test && touch /run/gpu-node-test/hold-start && systemctl daemon-reload")

    run = BackgroundDeploy(node, RUNTIMES)
    wait_for(
        lambda: node.sh("systemctl is-active containerd", check=False).stdout.strip() == "activating",
        timeout=300,
        what="containerd's restart to be under way",
    )
    # The connection drops: the controller, then the script and its `systemctl restart` die.
    output = run.kill()
    node.sh("pkill -9 -f gpu-node-candidate; pkill -9 -f 'systemctl restart containerd'", check=False)
    assert wires_nvidia(assert_whole_config(node)), output
    assert node.exists(PENDING_MARK)

    node.sh(f"rm -f /run/gpu-node-test/hold-start {HOLD_START_DROPIN} && systemctl daemon-reload")
    wait_for(
        lambda: node.sh("systemctl is-active containerd", check=False).stdout.strip() in ("active", "failed"),
        timeout=120,
        what="containerd's interrupted start to finish",
    )

    converge = node.deploy(data=RUNTIMES)
    assert converge.returncode == 0, converge.explain()
    assert node.is_active("containerd") and not node.exists(PENDING_MARK)
    settled = node.service("containerd")

    again = node.deploy(data=RUNTIMES)
    assert_no_change(again)
    assert node.service("containerd") == settled


def test_killed_during_a_package_install_the_next_run_finishes_dpkg_and_converges(node):
    # containerd's postinst starts the service through systemctl: the device holds it there, with
    # dpkg mid-configure, and the kill leaves containerd unpacked but not configured.
    install_interruption_device(node)
    run = BackgroundDeploy(node, RUNTIMES)
    wait_for(lambda: node.exists(HELD), timeout=600, what="dpkg to reach containerd's postinst")
    output = run.kill()
    node.sh("pkill -9 apt-get; pkill -9 dpkg", check=False)
    kill_held_remote_shell(node)
    remove_interruption_device(node)
    audit = node.sh("dpkg --audit", check=False).stdout
    assert "containerd" in audit, output + audit
    assert not node.exists(CONFIG) or assert_whole_config(node) is not None

    converge = node.deploy(data=RUNTIMES, json_output=False)
    assert converge.returncode == 0, converge.explain()
    assert "Wait for other package managers and finish interrupted dpkg runs" in converge.output, converge.explain()
    assert node.sh("dpkg --audit").stdout.strip() == ""
    assert wires_nvidia(assert_whole_config(node)) and node.is_active("containerd")

    again = node.deploy(data=RUNTIMES)
    assert_no_change(again)


SLOW_PACKAGE = "gpu-node-test-dpkg-holder"


def hold_dpkg_lock(node) -> None:
    """A real dpkg run that holds dpkg's locks until /run/gpu-node-test/hold-dpkg goes away."""
    node.sh(
        "mkdir -p /tmp/holder/DEBIAN /run/gpu-node-test && touch /run/gpu-node-test/hold-dpkg && "
        f"printf 'Package: {SLOW_PACKAGE}\\nVersion: 1\\nArchitecture: all\\nMaintainer: tests <t@localhost>\\n"
        "Description: TEST device: holds the dpkg lock\\n' >/tmp/holder/DEBIAN/control && "
        "printf '#!/bin/sh\\nwhile [ -e /run/gpu-node-test/hold-dpkg ]; do sleep 0.2; done\\n' "
        ">/tmp/holder/DEBIAN/preinst && chmod 755 /tmp/holder/DEBIAN/preinst && "
        "dpkg-deb -b /tmp/holder /tmp/holder.deb >/dev/null && "
        "(setsid dpkg -i /tmp/holder.deb >/tmp/holder.log 2>&1 &)"
    )
    wait_for(
        lambda: node.sh("grep -q . /proc/locks && pgrep -x dpkg", check=False).returncode == 0,
        timeout=30,
        what="dpkg to hold its lock",
    )


def test_a_held_dpkg_lock_is_waited_for_then_fails_naming_it_and_nothing_changes(node):
    hold_dpkg_lock(node)
    watched = ["/etc/modules-load.d", "/etc/sysctl.d", "/var/lib/dpkg/status"]
    before = {
        path: node.sh(f"ls -la --time-style=full-iso {path}; sha256sum {path} 2>/dev/null", check=False).stdout
        for path in watched
    }

    busy = node.deploy(data={"stages": "kernel,runtimes", "apt_lock_timeout": "3"})
    assert busy.returncode != 0
    assert "the package manager is busy: after waiting 3 s (apt_lock_timeout)" in busy.stderr, busy.explain()
    assert "/var/lib/dpkg/lock-frontend is held by process" in busy.stderr and "dpkg -i /tmp/holder.deb" in busy.stderr
    assert "nothing was changed" in busy.stderr
    after = {
        path: node.sh(f"ls -la --time-style=full-iso {path}; sha256sum {path} 2>/dev/null", check=False).stdout
        for path in watched
    }
    assert after == before
    assert not node.exists(CONFIG) and not node.exists("/usr/bin/containerd")


def test_a_dpkg_lock_released_within_the_bound_is_waited_for_and_the_run_converges(node):
    hold_dpkg_lock(node)

    def release_once_the_run_waits() -> None:
        # The lock goes once the run's bounded wait is running on the node (its script carries
        # lock_timeout=120; the bracket keeps pgrep's own shell from matching), not after a fixed delay a
        # loaded machine could outlast before preflight reads.
        wait_for(
            lambda: node.sh("pgrep -f 'lock_timeout=12[0]'", check=False).returncode == 0,
            timeout=600,
            what="the run to wait for dpkg's lock",
        )
        node.sh("rm -f /run/gpu-node-test/hold-dpkg")

    release = threading.Thread(target=release_once_the_run_waits, daemon=True)
    release.start()
    waited = node.deploy(data={"stages": "kernel,runtimes", "apt_lock_timeout": "120"}, json_output=False)
    release.join(timeout=5)
    assert waited.returncode == 0, waited.explain()
    assert "waiting up to 120 s (apt_lock_timeout)" in waited.stderr
    assert node.sh(f"dpkg-query -W -f '${{Status}}' {SLOW_PACKAGE}").stdout == "install ok installed"
    assert wires_nvidia(assert_whole_config(node)) and node.is_active("containerd")
    assert_no_change(node.deploy(data={"stages": "kernel,runtimes"}))
