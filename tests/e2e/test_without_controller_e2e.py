"""
Nodes without a controller (docs/without-controller.md), on one image and one node: an image root
built as an image build makes one (the node image with Debian's containerd, python3-venv and
systemd-journal-remote installed by apt in a container whose PID 1 is not systemd, so the packages
enable their units and nothing starts; gpu-node installed into /opt/gpu-node for pull mode from its
wheel and its dependencies', each pinned by its SHA-256 as docs/without-controller.md builds them, no
index), exported to a folder (``docker export``) and baked by pyinfra's real @chroot connector (no
running systemd) with the stages kernel and runtimes, as for an image whose own pipeline installs the
driver (Debian's DKMS build takes minutes and is not part of this test): kernel, the device links'
files and containerd's config, merged and checked by the image's own containerd offline (Docker's
daemon.json in an image root: tests/unit/test_bake.py; bookworm's dockerd 20.10 has no
``--validate`` to run offline), and the first-boot unit and the health check, which every run that
makes a GPU node brings. That root, imported as an image, boots as a node container with real
systemd; its health check runs (STAND-IN nvidia-smi and Xid lines, below); then pull mode runs there,
and the undo.

A container cannot be given PCI devices nor load a module: the GPUs are our sysfs fixture of two
H100 PCIe (tests/fixtures/fabric/pcie-only.json) bind-mounted over ``/sys/bus/pci/devices``, and the
driver's module is a STAND-IN nvidia.ko (tests/standin_kmod.py: an ELF whose .modinfo the real
modinfo reads) listed in the running kernel's modules.dep; kernel_modules_load=false, so the boot
says it skips the load. The health check's Xid lines are STAND-IN kernel entries written into the
node's own journal by systemd-journal-remote (never the machine's kernel log), its NVML answers a
STAND-IN nvidia-smi's (tests/standin_nvidia_smi.py). The tests share the node, in this order.

The image build also installs Debian's cloud-init and is committed as an image before gpu-node's
install: a second node boots it with a NoCloud seed made of docs/examples/cloud-init-pull.yaml
(tests/nocloud.py), and installs, converges and watches itself with no controller. The baked image
does not run cloud-init (/etc/cloud/cloud-init.disabled): its boot is gpu-node's alone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import apt_repo
import jsonschema
import nocloud
import pci_tree
import pytest
import standin_kmod
import standin_nvidia_smi
from harness import REPO, SAFE_DATA, DeployResult, Node, assert_no_change, run, wait_for
from packaging.utils import canonicalize_name
from wheels import REQUIREMENTS_RECIPE, dependency_wheels, gpu_node_wheel

DATA = {**SAFE_DATA, "stages": "kernel,runtimes,verify", "container_runtimes": "containerd"}
# what the bake ran (verify needs the booted node: a normal run after boot does it)
BAKED = {**DATA, "stages": "kernel,runtimes"}
CONFIG = "/etc/containerd/config.toml"
REJECTED = b'oom_score = "high"\n'  # TOML gpu-node reads; containerd does not
BOOT_REPORT = "/var/lib/gpu-node/boot-report.json"
HEALTH_REPORT = "/var/lib/gpu-node/health.json"
HEALTH_ARCHIVE = "/usr/lib/gpu-node/gpu-node-health.pyz"
HEALTH_SCHEMA = json.loads((REPO / "deploy" / "schemas" / "health-report.schema.json").read_text())
PYTHON = "/opt/gpu-node/bin/python"
SETTINGS = "/etc/gpu-node/settings.toml"
GOOD = """\
stages = ["kernel", "runtimes"]
container_runtimes = ["containerd"]
kernel_modules_load = false
reboot_allowed = false
"""


@dataclass
class Baked:
    node: Node
    kernel: str
    bakes: dict[str, DeployResult]
    pci: Path = Path()  # the PCI fixture's devices folder
    cloud_image: str = ""  # the image before gpu-node's install, with cloud-init
    # containerd's config as the image shipped it, and after the bake its containerd rejected
    shipped: bytes = b""
    after_rejected: bytes = b""
    merged: str = ""
    wants: list[str] = field(default_factory=list)  # multi-user.target's and timers.target's
    times: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)


def bake(root: Path, tmp_path: Path) -> DeployResult:
    args = [sys.executable, "-m", "pyinfra", "-y", "--json", f"@chroot/{root}", "deploy/gpu_node.py"]
    for key, value in DATA.items():
        args += ["--data", f"{key}={value}"]
    # the fleet report goes to the test's folder, not the checkout
    args += ["--data", f"fleet_report_path={tmp_path / 'fleet.json'}"]
    result = run(args, check=False, cwd=REPO, timeout=900)
    return DeployResult(result.returncode, result.stdout, result.stderr, args)


def build_image_root(image: str, root: Path, cloud_image: str) -> None:
    """The node image with the runtimes and gpu-node installed as an image build installs them,
    exported to ``root``; before gpu-node's install, committed as ``cloud_image`` (cloud-init with it)."""
    wheel, dependencies = gpu_node_wheel(), dependency_wheels()
    builder = Node(
        image=image,
        init=("sleep", "infinity"),
        extra_run_args=["-v", f"{wheel.parent}:/wheels:ro", "-v", f"{dependencies}:/dependencies:ro"],
    ).start()
    try:
        builder.sh(
            "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
            "apt-get install -y -qq containerd python3-venv systemd-journal-remote cloud-init >/dev/null",
            timeout=900,
        )
        nocloud.configure_image(builder)
        nocloud.commit(builder, cloud_image)
        # As docs/examples/cloud-init-pull.yaml installs it: requirements.txt written by the docs' recipe,
        # every wheel pinned by its SHA-256, no index. --no-compile: the node compiles what it imports.
        builder.sh(
            f"set -e\npython3 -m venv /opt/gpu-node && cd /tmp && set -- /wheels/*.whl /dependencies/*.whl\n"
            f"{REQUIREMENTS_RECIPE}\n"
            "/opt/gpu-node/bin/pip install -q --no-compile --require-hashes --no-index --find-links /wheels "
            "--find-links /dependencies -r requirements.txt && rm requirements.txt",
            timeout=900,
        )
        run(["sh", "-c", f"docker export {builder.id} | tar -C {root} -x"], timeout=300)
    finally:
        builder.remove()
    (root / "etc" / "cloud" / "cloud-init.disabled").touch()


def put_standin_module(root: Path, kernel: str) -> None:
    """The STAND-IN nvidia.ko listed in modules.dep of the kernel the booted container will run (the
    machine's own: a container has no kernel of its own)."""
    modules = root / "lib" / "modules" / kernel
    (modules / "updates" / "dkms").mkdir(parents=True, exist_ok=True)
    (modules / "updates" / "dkms" / "nvidia.ko").write_bytes(
        standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, "535.261.03")
    )
    with open(modules / "modules.dep", "a") as dep:
        dep.write("updates/dkms/nvidia.ko:\n")


@pytest.fixture(scope="module")
def baked(image, tmp_path_factory):
    started = time.monotonic()
    tmp_path = tmp_path_factory.mktemp("bake")
    root = tmp_path / "root"
    root.mkdir()
    cloud_image = f"gpu-node-test/cloud-init:{uuid.uuid4().hex[:12]}"
    tag = f"gpu-node-test/baked:{uuid.uuid4().hex[:12]}"
    result = Baked(node=Node(image=""), kernel=os.uname().release, bakes={}, started=started, cloud_image=cloud_image)
    # from the first image committed: a failure anywhere after leaves none of them
    try:
        build_image_root(image, root, cloud_image)
        put_standin_module(root, result.kernel)
        result.times["image root"] = time.monotonic() - started

        config = root / CONFIG.lstrip("/")
        result.shipped = config.read_bytes()
        config.write_bytes(REJECTED + result.shipped)
        result.bakes["rejected"] = bake(root, tmp_path)
        result.after_rejected = config.read_bytes()
        config.write_bytes(result.shipped)
        result.bakes["first"] = bake(root, tmp_path)
        result.merged = (root / CONFIG.lstrip("/")).read_text()
        result.wants = sorted(
            link.name
            for target in ("multi-user.target.wants", "timers.target.wants")
            for link in (root / "etc" / "systemd" / "system" / target).iterdir()
            if link.is_symlink()
        )
        result.bakes["second"] = bake(root, tmp_path)
        result.times["three bakes"] = time.monotonic() - started

        run(["sh", "-c", f"tar -C {root} -c . | docker import -c 'CMD [\"/sbin/init\"]' - {tag}"], timeout=300)
        tree = pci_tree.write(pci_tree.load("pcie-only"), tmp_path / "pci" / "devices")
        for path in [tmp_path / "pci", *(tmp_path / "pci").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        result.pci = tree
        result.node = Node(image=tag, extra_run_args=["-v", f"{tree}:/sys/bus/pci/devices:ro"])
        result.node.start()
        result.times["booted"] = time.monotonic() - started
        yield result
    finally:
        result.node.remove()
        run(["docker", "rmi", tag, cloud_image], check=False)
        print(
            "without-controller e2e, seconds since the start:",
            ", ".join(f"{name} {at:.0f}" for name, at in result.times.items()),
        )


def reboot(node: Node) -> None:
    run(["docker", "restart", "-t", "5", node.id])
    state = wait_for(node._booted_state, timeout=120, what=f"systemd in node {node.id[:12]} after a restart")
    assert state in ("running", "degraded"), state


def test_a_bake_merges_the_runtime_configs_offline_and_the_booted_image_is_ready_with_no_change_left(baked):
    """A containerd config the image's own containerd rejects, offline, fails the bake naming
    containerd's error and is left byte for byte; once fixed, the runtime configs are merged with no
    daemon restarted, the skipped stages each said in one line, the units enabled (not started): the
    first-boot unit and the health check's timer too, though the bake ran no driver stage; a second
    bake changes nothing. The image booted (STAND-IN module, PCI fixture) reaches
    gpu-node-ready.target with a passing boot report, the first-boot unit ran the health check (no
    driver loaded: unhealthy, without failing the boot), its timer runs, containerd runs the nvidia
    runtime by default, and a normal @docker run of the stages the bake ran changes nothing."""
    rejected = baked.bakes["rejected"]
    assert rejected.returncode != 0
    assert rejected.run_lines(
        f"{CONFIG} was not changed: /usr/bin/containerd config dump rejected the new "
        "version: containerd: failed to unmarshal TOML"
    ), rejected.explain()
    assert baked.after_rejected == REJECTED + baked.shipped

    first = baked.bakes["first"]
    assert first.returncode == 0, first.explain()
    for stage in ("cdi", "verify"):
        assert len(first.run_lines(f"bake: {stage} skipped in an image root: ")) == 1, first.explain()
    assert len(first.run_lines("containerd not restarted: an image root")) == 1, first.explain()
    assert 'default_runtime_name = "nvidia"' in baked.merged
    assert {"gpu-node-boot.service", "gpu-node-ready.target", "gpu-node-health.timer", "containerd.service"} <= set(
        baked.wants
    )
    assert_no_change(baked.bakes["second"])

    node = baked.node
    assert node.is_active("gpu-node-ready.target")
    run_times = dict(
        line.split("=", 1)
        for line in node.sh(
            "systemctl show gpu-node-boot.service -p ExecMainStartTimestampMonotonic -p ExecMainExitTimestampMonotonic"
        ).stdout.splitlines()
    )
    seconds = (
        int(run_times["ExecMainExitTimestampMonotonic"]) - int(run_times["ExecMainStartTimestampMonotonic"])
    ) / 1e6
    print(f"first-boot unit at boot: {seconds:.2f} s wall")
    report = json.loads(node.read(BOOT_REPORT))
    assert report["ok"] is True, report
    steps = {step["name"]: step for step in report["nodes"][0]["steps"]}
    assert (
        steps["kernel module"]["status"] == "pass"
        and "proprietary module 535.261.03" in steps["kernel module"]["reason"]
    )
    assert steps["module load"] == {
        "name": "module load",
        "status": "skip",
        "reason": "kernel_modules_load=false: modules not loaded by this boot",
    }
    health = json.loads(node.read(HEALTH_REPORT))
    assert not list(jsonschema.Draft202012Validator(HEALTH_SCHEMA).iter_errors(health))
    assert health["status"] == "unhealthy" and health["problems"][0]["line"] == (
        "the nvidia module is not loaded: 2 GPU(s) on the PCI bus unused"
    )
    boot_journal = node.sh("journalctl -b -u gpu-node-boot.service --no-pager -o cat").stdout
    assert "gpu-node health: unhealthy: the nvidia module is not loaded: 2 GPU(s) on the PCI bus unused" in boot_journal
    assert node.is_active("gpu-node-health.timer")
    assert node.is_active("containerd")
    assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 1
    assert_no_change(node.deploy(data=BAKED))
    baked.times["normal run"] = time.monotonic() - baked.started


def standin_xid(node: Node, message: str, name: str) -> None:
    """A STAND-IN kernel entry of this boot in the node's own journal: journal export format piped
    to systemd-journal-remote, which keeps its trusted fields (_TRANSPORT=kernel: what journalctl -k
    shows), into a file of the node's journal folder. The machine's kernel log is not written."""
    node.sh(f"""set -e
machine=$(cat /etc/machine-id); boot=$(tr -d - < /proc/sys/kernel/random/boot_id)
since_boot=$(cut -d ' ' -f 1 /proc/uptime | tr -d .)0000
printf '__REALTIME_TIMESTAMP=%s\n__MONOTONIC_TIMESTAMP=%s\n_BOOT_ID=%s\n_MACHINE_ID=%s\n_TRANSPORT=kernel\nPRIORITY=3\nSYSLOG_IDENTIFIER=kernel\nMESSAGE=%s\n\n' \
  "$(date +%s%6N)" "$since_boot" "$boot" "$machine" {shlex.quote(message)} |
  /lib/systemd/systemd-journal-remote -o "/var/log/journal/$machine/{name}.journal" - 2>/dev/null""")


def health_run(node: Node) -> tuple[dict, list[str]]:
    """The health service run once, as its timer runs it: (health.json, the check's lines of this run)."""
    cursor = node.sh("journalctl -n 0 --show-cursor -q | tail -n 1").stdout.strip().removeprefix("-- cursor: ")
    node.sh("systemctl start gpu-node-health.service")
    said = node.sh(f"journalctl -u gpu-node-health.service --no-pager -o cat --after-cursor='{cursor}'").stdout
    return json.loads(node.read(HEALTH_REPORT)), [
        line for line in said.splitlines() if line.startswith("gpu-node health")
    ]


def test_the_health_check_finds_a_lost_gpu_an_xid_and_a_moved_library_and_the_fleet_view_shows_it_standins(
    baked, tmp_path
):
    """STAND-IN nvidia-smi answers for one of the PCI fixture's two GPUs, a STAND-IN Xid 48 for that
    one: the health service (what its timer starts) says the node is unhealthy in one journal line
    naming the GPU the driver lost, health.json has both problems, node-problem-detector's call
    exits 1 with that line; an update that put NVML 550.54.15 in place (the stand-in now refusing as
    NVML does) is a mismatch, and the running kernel's module (535.261.03) is named. The fleet view
    (deploy/fleet_view.py over @docker) shows the node's health per node and per GPU."""
    node = baked.node
    smi = standin_nvidia_smi.script(Path("/run"), gpus=[standin_nvidia_smi.StandInGpu("0000:17:00.0")])
    node.write("/usr/local/bin/nvidia-smi", smi, mode="755")
    standin_xid(
        node, "NVRM: Xid (PCI:0000:17:00): 48, pid=1234, name=python3, An uncorrectable double bit error", "xid-48"
    )
    assert "NVRM: Xid (PCI:0000:17:00): 48" in node.sh("journalctl -k --no-pager -o cat").stdout
    health, said = health_run(node)
    assert said == [
        f"gpu-node health: unhealthy: GPU 0000:ca:00.0 is on the PCI bus but not seen by the driver (and 1 "
        f"more) ({HEALTH_REPORT})"
    ], said
    assert [(problem["severity"], problem["line"]) for problem in health["problems"]] == [
        ("fatal", "GPU 0000:ca:00.0 is on the PCI bus but not seen by the driver"),
        ("needs reset", "Xid 48 on 0000:17:00.0: uncorrectable (double-bit) ECC error"),
    ]
    npd = node.sh(f"python3 -I {HEALTH_ARCHIVE} --npd", check=False)
    assert (npd.returncode, npd.stdout) == (
        1,
        "GPU 0000:ca:00.0 is on the PCI bus but not seen by the driver (and 1 more)\n",
    )
    cpu = node.sh(
        f'python3 -c \'import resource, subprocess; subprocess.run(["python3", "-I", "{HEALTH_ARCHIVE}"]); '
        "usage = resource.getrusage(resource.RUSAGE_CHILDREN); print(usage.ru_utime + usage.ru_stime)'"
    ).stdout
    print(f"health check on the node container: {float(cpu.split()[-1]):.3f} s CPU")

    view = tmp_path / "fleet.json"
    result = node.deploy(deploy_file="deploy/fleet_view.py", data={"fleet_report_path": str(view)})
    assert result.returncode == 0, result.explain()
    (row,) = json.loads(view.read_text())["nodes"]
    assert row["status"] == "converged" and row["health"]["status"] == "unhealthy"
    assert [(gpu["pci"], gpu["seen_by_driver"]) for gpu in row["health"]["gpus"]] == [
        ("0000:17:00.0", True),
        ("0000:ca:00.0", False),
    ]
    assert "--> Health (the nodes' own checks): 1 unhealthy" in result.stdout + result.stderr

    # an unattended update: NVML 550.54.15 in place of 535.261.03's, the module not rebuilt
    node.sh(
        "touch /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15 && "
        "ln -sf libnvidia-ml.so.550.54.15 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    )
    node.write(
        "/usr/local/bin/nvidia-smi",
        standin_nvidia_smi.script(
            Path("/run"), failure=(standin_nvidia_smi.MISMATCH_EXIT, standin_nvidia_smi.MISMATCH)
        ),
        mode="755",
    )
    health, _ = health_run(node)
    lines = [problem["line"] for problem in health["problems"]]
    assert "NVML refuses the loaded module: driver/library version mismatch" in lines
    assert f"the running kernel {baked.kernel}'s nvidia module is 535.261.03, the driver 550.54.15" in lines
    node.sh(
        "rm -f /usr/local/bin/nvidia-smi /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 "
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"
    )
    baked.times["health"] = time.monotonic() - baked.started


def test_a_boot_without_the_module_fails_at_that_step_and_leaves_the_target_unreached_standin_module(baked):
    """STAND-IN module gone from modules.dep: the next boot fails at "kernel module", named in the
    journal and the report, and gpu-node-ready.target is not reached."""
    node, kernel = baked.node, baked.kernel
    node.sh(f"sed -i '/nvidia.ko/d' {shlex.quote(f'/lib/modules/{kernel}/modules.dep')}")
    reboot(node)
    assert not node.is_active("gpu-node-ready.target")
    assert node.sh("systemctl is-failed gpu-node-boot.service", check=False).stdout.strip() == "failed"
    journal = node.sh("journalctl -b -u gpu-node-boot.service --no-pager -o cat").stdout
    assert f"gpu-node boot: kernel module: fail: no nvidia module for the running kernel {kernel}" in journal, journal
    assert "failed at step 'kernel module': gpu-node-ready.target not reached" in journal
    report = json.loads(node.read(BOOT_REPORT))
    assert report["ok"] is False and report["nodes"][0]["steps"][-1]["name"] == "kernel module"
    baked.times["failed boot"] = time.monotonic() - baked.started


def pull(node: Node) -> tuple[int, str]:
    """Run the pull service once, as its timer does; (exit code, the service's journal of this run)."""
    cursor = node.sh("journalctl -n 0 --show-cursor -q | tail -n 1").stdout.strip().removeprefix("-- cursor: ")
    result = node.sh("systemctl start gpu-node-pull.service", check=False, timeout=1200)
    journal = node.sh(f"journalctl -u gpu-node-pull.service --no-pager -o cat --after-cursor='{cursor}'").stdout
    return result.returncode, journal


def test_pull_mode_from_the_image_converges_restores_drift_refuses_a_broken_setting_and_the_undo_takes_it_off(baked):
    """gpu-node as the image installed it: its units installed (python -m gpu_node.node.pull_install), a run
    of the pull service (what the timer starts) converges with no controller; a runtime config changed
    by hand is restored by the next run, the report rewritten; a broken setting fails the run in one
    line naming the file's line, and a settings file its group may write in one line naming its mode,
    and nothing changes. Before the settings file is there, pull_install refuses in one line and
    enables nothing. Then the undo, run @local by the same package,
    takes gpu-node's own units off: the pull timer and the first-boot unit disabled, their files gone."""
    started = time.monotonic()
    node = baked.node
    refused = node.sh(f"{PYTHON} -m gpu_node.node.pull_install", check=False)
    assert refused.returncode == 1 and refused.stderr.splitlines() == [
        f"gpu-node pull_install: {SETTINGS} does not exist: pull mode converges a node only with the settings "
        f"written in {SETTINGS} (docs/without-controller.md), never with defaults; nothing changed"
    ], refused.stderr
    assert node.sh("systemctl is-enabled gpu-node-pull.timer", check=False).returncode != 0
    node.write(SETTINGS, GOOD)
    out = node.sh(f"{PYTHON} -m gpu_node.node.pull_install").stdout
    assert "gpu-node-pull.timer enabled" in out
    assert node.is_active("gpu-node-pull.timer")

    code, journal = pull(node)
    assert code == 0, journal
    assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 1
    report = node.stat("/var/lib/gpu-node/fleet-report.json")

    node.sh(f'sed -i \'s/default_runtime_name = "nvidia"/default_runtime_name = "runc"/\' {CONFIG}')
    assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 0
    code, journal = pull(node)
    assert code == 0, journal
    assert node.sh(f"grep -c 'default_runtime_name = \"nvidia\"' {CONFIG}").stdout.strip() == "1"
    assert node.stat("/var/lib/gpu-node/fleet-report.json") != report  # the report rewritten

    before = node.stat(CONFIG)
    node.write(SETTINGS, GOOD.replace('["containerd"]', '["podman"]'))
    code, journal = pull(node)
    assert code != 0
    lines = [line for line in journal.splitlines() if "invalid setting container_runtimes" in line]
    assert len(lines) == 1 and f"({SETTINGS} line 2)" in lines[0], journal
    assert "Traceback" not in journal, journal
    assert node.stat(CONFIG) == before

    node.write(SETTINGS, GOOD, mode="664")  # valid, but its group may change it
    code, journal = pull(node)
    assert code != 0
    lines = [line for line in journal.splitlines() if "writable by its group or others" in line]
    assert len(lines) == 1 and f"{SETTINGS} is writable by its group or others (mode 0664)" in lines[0], journal
    assert "Traceback" not in journal, journal
    assert node.stat(CONFIG) == before
    print(f"pull: {time.monotonic() - started:.1f} s")

    package = node.sh(f"{PYTHON} -c 'import gpu_node, os; print(os.path.dirname(gpu_node.__file__))'").stdout.strip()
    undone = node.sh(f"cd /tmp && {PYTHON} -m pyinfra -y @local {package}/undo.py", check=False, timeout=900)
    assert undone.returncode == 0, undone.stdout + undone.stderr
    for unit in ("gpu-node-pull.timer", "gpu-node-boot.service", "gpu-node-ready.target", "gpu-node-health.timer"):
        assert node.sh(f"systemctl is-enabled {unit}", check=False).returncode != 0, unit
    assert (
        node.sh("ls /etc/systemd/system/gpu-node-* /etc/systemd/system/*/gpu-node-* 2>/dev/null", check=False).stdout
        == ""
    )
    assert not node.is_active("gpu-node-pull.timer") and not node.is_active("gpu-node-health.timer")
    assert node.sh(f"cat {CONFIG}").stdout.encode() == baked.shipped  # put back as the image shipped it
    print(f"pull and undo: {time.monotonic() - started:.1f} s")
    baked.times["pull and undo"] = time.monotonic() - baked.started


# The site's settings for a node container, added to the example's own: the stages that need no driver
# build nor GPU, nothing loaded into the machine's kernel, no reboot; the health check every 10 s (its
# shortest), so its timer's first run comes 10 s after boot rather than a minute.
CLOUD_INIT_SETTINGS = (
    'stages = ["kernel", "runtimes"]\nkernel_modules_load = false\nreboot_allowed = false\n'
    'health_check_interval = "10s"\n'
)
CLOUD_INIT_HOSTNAME = "gpu-node-cloud-init"


def happened(node: Node, unit: str, stamp: str) -> bool:
    """Whether a unit's monotonic timestamp is set (systemd shows 0 for what has not happened this boot)."""
    return node.sh(f"systemctl show {unit} -p {stamp} --value").stdout.strip() not in ("", "0")


def test_debians_cloud_init_boots_the_example_which_installs_gpu_node_that_converges_keeps_itself_and_reports_health(
    baked, tmp_path
):
    """A node container booted with Debian's cloud-init (bookworm's package) and a NoCloud seed whose
    user-data is docs/examples/cloud-init-pull.yaml with a site's values (its wheels' address: served
    on 127.0.0.1; its requirements.txt: the docs' recipe over the wheels built from this checkout; its
    settings: the example's with the stages kernel and runtimes, kernel_modules_load=false,
    reboot_allowed=false): cloud-init finds the seed, writes the settings (root's, 0644), installs
    exactly the pinned wheels with no index, and the example's runcmd enables the pull timer and starts
    the pull service, which converges the node with no controller. A runtime config changed by hand is
    put back by the next run the timer starts (a drop-in shortens its interval), and the health timer
    the pull run installed writes health.json, under the seed's hostname, naming the PCI fixture's two
    GPUs the driver does not see (no module in this image). The seed is the one thing that differs from
    a VM booted by the same user data: no cloud's metadata service is involved."""
    started = time.monotonic()
    wheels = tmp_path / "wheels"
    requirements = nocloud.wheelhouse(wheels)
    node = Node(image=baked.cloud_image, boot_timeout=900)
    machine = nocloud.machine_identity()
    with apt_repo.serve(wheels) as url:
        user_data = nocloud.site_user_data(
            wheels_url=f"{url}/", requirements=requirements, settings=CLOUD_INIT_SETTINGS
        )
        seed = nocloud.write_seed(
            tmp_path / "seed", user_data, instance_id=f"e2e-{uuid.uuid4().hex[:12]}", hostname=CLOUD_INIT_HOSTNAME
        )
        node.extra_run_args = ["-v", f"{seed}:{nocloud.SEED}:ro", "-v", f"{baked.pci}:/sys/bus/pci/devices:ro"]
        node.start()  # systemd's boot: cloud-init's stages, the example's runcmd and the pull run it starts
    try:
        booted = time.monotonic() - started
        status = node.sh("cloud-init status --long", check=False).stdout
        assert "status: done" in status and f"DataSourceNoCloud [seed={nocloud.SEED}]" in status, (
            status + node.read("/var/log/cloud-init-output.log")[-6000:]
        )
        assert node.sh("hostname").stdout.strip() == CLOUD_INIT_HOSTNAME
        # the hostname is the node's own (its UTS namespace), the network the machine's, left alone
        pid = run(["docker", "inspect", "-f", "{{.State.Pid}}", node.id]).stdout.strip()
        assert os.readlink(f"/proc/{pid}/ns/uts") != os.readlink("/proc/self/ns/uts")
        assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
        cloud_init_log = node.read("/var/log/cloud-init.log")
        assert re.search(r"network config (is )?disabled by system_cfg", cloud_init_log), cloud_init_log[-6000:]
        assert node.sh("grep ' /proc/sys ' /proc/mounts").stdout.split()[3].startswith("ro")
        assert node.stat(nocloud.SETTINGS_PATH).startswith("644 root:root ")

        # exactly the pinned wheels, and nothing from an index
        pinned = {
            canonicalize_name(line.split("==")[0]): line.split("==")[1].split()[0] for line in requirements.splitlines()
        }
        frozen = dict(line.split("==") for line in node.sh("/opt/gpu-node/bin/pip freeze").stdout.splitlines())
        assert {canonicalize_name(name): version for name, version in frozen.items()} == pinned
        assert f"Downloading {url}/{gpu_node_wheel().name}" in node.read("/var/log/cloud-init-output.log")

        # the pull run the example's runcmd started converged the node
        assert node.is_active("gpu-node-pull.timer")
        shown = node.sh("systemctl show gpu-node-pull.service -p Result -p ExecMainStatus").stdout.split()
        journal = node.sh("journalctl -u gpu-node-pull.service --no-pager -o cat").stdout
        assert shown == ["Result=success", "ExecMainStatus=0"], journal[-6000:]
        assert "--> Fleet report: 1 node: 0 converged, 1 changed, 0 failed" in journal, journal[-6000:]
        assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 1
        print(f"cloud-init node: booted, installed and converged in {booted:.0f} s")

        # drift, put back by the next run the timer starts
        assert not happened(node, "gpu-node-pull.timer", "LastTriggerUSecMonotonic")
        node.sh(f'sed -i \'s/default_runtime_name = "nvidia"/default_runtime_name = "runc"/\' {CONFIG}')
        assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 0
        node.write(
            "/etc/systemd/system/gpu-node-pull.timer.d/soon.conf",
            "[Timer]\nOnUnitInactiveSec=\nOnUnitInactiveSec=5s\nRandomizedDelaySec=0\nAccuracySec=1s\n",
        )
        node.sh("systemctl daemon-reload")
        wait_for(
            lambda: node.sh(f"grep -c 'default_runtime_name = \"nvidia\"' {CONFIG}", check=False).stdout.strip() == "1",
            timeout=600,
            interval=2,
            what="the pull timer's run to put containerd's config back",
        )
        assert happened(node, "gpu-node-pull.timer", "LastTriggerUSecMonotonic")
        node.sh("rm -r /etc/systemd/system/gpu-node-pull.timer.d && systemctl daemon-reload")
        print(f"cloud-init node: drift put back by the timer's run at {time.monotonic() - started:.0f} s")

        # the health timer the pull run installed reports
        wait_for(lambda: node.exists(HEALTH_REPORT), timeout=300, interval=2, what="the health timer's first run")
        assert happened(node, "gpu-node-health.timer", "LastTriggerUSecMonotonic")
        assert not happened(node, "gpu-node-boot.service", "ExecMainStartTimestampMonotonic")  # the next boot's
        health = json.loads(node.read(HEALTH_REPORT))
        assert not list(jsonschema.Draft202012Validator(HEALTH_SCHEMA).iter_errors(health))
        assert health["host"] == CLOUD_INIT_HOSTNAME and health["status"] == "unhealthy"
        assert [problem["line"] for problem in health["problems"]] == [
            "the nvidia module is not loaded: 2 GPU(s) on the PCI bus unused"
        ]
        assert [gpu["pci"] for gpu in health["gpus"]] == ["0000:17:00.0", "0000:ca:00.0"]
        said = node.sh("journalctl -u gpu-node-health.service --no-pager -o cat").stdout
        assert (
            "gpu-node health: unhealthy: the nvidia module is not loaded: 2 GPU(s) on the PCI bus unused "
            f"({HEALTH_REPORT})"
        ) in said, said
        assert nocloud.machine_identity() == machine
        print(f"cloud-init node: {time.monotonic() - started:.0f} s in all")
        baked.times["cloud-init node"] = time.monotonic() - baked.started
    finally:
        node.remove()
