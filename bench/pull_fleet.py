"""
Pull-mode nodes booting at once, with no controller (docs/benchmark.md, docs/without-controller.md).

The image: the node image with Debian's containerd, python3-venv and cloud-init (tests/nocloud.py's
configuration for a container) and the STAND-IN nvidia.ko listed in the running kernel's modules.dep;
every node has the PCI fixture of two H100 PCIe, as tests/e2e/test_without_controller_e2e.py's nodes.
Each wave (``--nodes 16 64``: one after the other) starts its node containers at once, each with a
NoCloud seed of its own: docs/examples/cloud-init-pull.yaml with the site's values (the wheels served
on 127.0.0.1 by a web server the bench starts; the example's apt lines left out: the image has
python3-venv, and N nodes do not each ask Debian's mirror) and its own hostname. Each node installs
gpu-node from the hashed wheels and its pull run converges it: nothing off the nodes runs gpu-node.
Then the nodes boot again, all at once (``docker restart``): the first-boot unit the pull run
installed writes each node's boot report and runs its health check. The nodes' boot reports and
health.json are copied into one folder (standing in for the site's upload) and one fleet view reads
them: ``gpu-node-fleet-report FOLDER FLEET.json`` (deploy/fleet/from_reports.py).

Figures, per wave: the wall time from the first start to the last node converged; each node's time
to converge (its pull run's fleet report written) and its CPU (its container's cgroup: systemd,
cloud-init, pip, the pull run, containerd), its peak memory (less inactive file cache), the machine's
available memory at its lowest; the second boot's the same; the fleet view's wall time, CPU and
peak memory. The bench's own CPU (its docker calls, reading the nodes' files) and the wheel server's
are printed apart: neither is a controller. A wave whose nodes leave the machine less than
``--min-available`` GiB is stopped and said so. Asserts nothing.

    .venv/bin/python bench/pull_fleet.py --nodes 16 64
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import nocloud  # noqa: E402
import pci_tree  # noqa: E402
import standin_kmod  # noqa: E402
from harness import NODE_RUN_FLAGS, Node, ensure_docker, node_image, run  # noqa: E402

INSTALL = ("DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
           "apt-get install -y -qq containerd python3-venv cloud-init >/dev/null")
# As tests/e2e/test_without_controller_e2e.py's cloud-init node: no driver build, nothing loaded into
# the machine's kernel, no reboot.
SETTINGS = 'stages = ["kernel", "runtimes"]\nkernel_modules_load = false\nreboot_allowed = false\n'
REPORTS = "var/lib/gpu-node"
PULL_UNIT = "etc/systemd/system/gpu-node-pull.service"  # written by pull_install, before the pull run
STARTERS = 8  # docker run / restart calls at once


@dataclass
class PullNode:
    name: str
    node: Node
    merged: Path = Path()  # the container's root as docker's overlay shows it
    started: float = 0.0  # wall clock (time.time) when its container started
    done: float | None = None  # seconds from the start to the figure's file
    cpu: float = 0.0
    peak_mb: float = 0.0
    failure: str = ""
    installed_cpu: float | None = None  # its CPU when pull_install had written the pull units


@dataclass
class Wave:
    nodes: list[PullNode]
    lowest_available_gib: float = float("inf")
    stopped: str = ""
    wall: float = 0.0
    load: str = ""
    others: int = 0  # containers other runs had on the machine
    own_cpu: float = 0.0
    figures: dict[str, str] = field(default_factory=dict)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def available_gib() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(fields["MemAvailable"].split()[0]) / 2**20


def own_cpu() -> float:
    """This process's CPU and its children's (the docker CLI calls), user + system."""
    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def cgroup_cpu(container: str) -> float:
    """CPU seconds the container has used since it (re)started: its cgroup's accounting."""
    v1 = Path("/sys/fs/cgroup/cpuacct/docker") / container / "cpuacct.usage"
    if v1.exists():
        return int(v1.read_text()) / 1e9
    stat = Path(f"/sys/fs/cgroup/system.slice/docker-{container}.scope/cpu.stat").read_text()
    return int(dict(line.split() for line in stat.splitlines())["usage_usec"]) / 1e6


def cgroup_memory_mb(container: str) -> float:
    """The container's memory less its inactive file cache, as docker's own stats count it."""
    v1 = Path("/sys/fs/cgroup/memory/docker") / container
    if v1.exists():
        used, stat, inactive = v1 / "memory.usage_in_bytes", v1 / "memory.stat", "total_inactive_file"
    else:
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{container}.scope")
        used, stat, inactive = v2 / "memory.current", v2 / "memory.stat", "inactive_file"
    try:
        fields = dict(line.split() for line in stat.read_text().splitlines())
        return (int(used.read_text()) - int(fields.get(inactive, 0))) / 2**20
    except OSError:  # the container is restarting: its cgroup is gone for a moment
        return 0.0


def build_image(base: str, tag: str) -> None:
    builder = Node(image=base, init=("sleep", "infinity")).start()
    try:
        builder.sh(INSTALL, timeout=900)
        nocloud.configure_image(builder)
        modules = f"/lib/modules/{os.uname().release}"
        builder.sh(f"mkdir -p {modules}/updates/dkms && printf 'updates/dkms/nvidia.ko:\\n' >> {modules}/modules.dep")
        run(["docker", "exec", "-i", builder.id, "sh", "-c", f"cat > {modules}/updates/dkms/nvidia.ko"],
            input=standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, "535.261.03"), text=False)
        nocloud.commit(builder, tag)
    finally:
        builder.remove()


class WheelServer:
    """The site's wheels on 127.0.0.1, served by a process of its own so its CPU is counted apart."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                         "--directory", str(folder), str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}/"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise

    def stop(self) -> float:
        """Stops it; the CPU seconds it used."""
        self.process.terminate()
        _, _, usage = os.wait4(self.process.pid, 0)
        return usage.ru_utime + usage.ru_stime


def start(pull_node: PullNode, image: str, seed: Path, pci: Path) -> None:
    # --hostname: docker sets a container's hostname at each start, where a VM keeps its /etc/hostname
    pull_node.node.id = run(["docker", "run", "-d", "--name", f"gpu-node-bench-{pull_node.name}-{uuid.uuid4().hex[:6]}",
                             "--hostname", pull_node.name, "--stop-signal", "SIGRTMIN+3", *NODE_RUN_FLAGS, "-v", f"{seed}:{nocloud.SEED}:ro",
                             "-v", f"{pci}:/sys/bus/pci/devices:ro", image, "/sbin/init"]).stdout.strip()
    pull_node.started = time.time()
    pull_node.merged = Path(run(["docker", "inspect", "-f", "{{.GraphDriver.Data.MergedDir}}",
                                 pull_node.node.id]).stdout.strip())


def restart(pull_node: PullNode) -> None:
    pull_node.done, pull_node.cpu, pull_node.peak_mb, pull_node.failure = None, 0.0, 0.0, ""
    pull_node.installed_cpu = 0.0  # the units are there already
    run(["docker", "restart", "-t", "10", pull_node.node.id], timeout=300)
    pull_node.started = time.time()


def finished(pull_node: PullNode, report: str) -> bool:
    """Whether the node wrote ``report`` (under /var/lib/gpu-node) since it started; a failed
    cloud-init counts as finished, with its failure."""
    path = pull_node.merged / REPORTS / report
    try:
        written = path.stat().st_mtime
    except OSError:
        written = 0.0
    if written >= pull_node.started:
        pull_node.done = written - pull_node.started
        return True
    result = pull_node.merged / "var/lib/cloud/data/result.json"
    try:
        errors = json.loads(result.read_text())["v1"]["errors"]
    except (OSError, ValueError, KeyError):
        return False
    if errors and result.stat().st_mtime >= pull_node.started:
        pull_node.failure = f"cloud-init: {errors[0]}"
        return True
    return False


def watch(wave: Wave, report: str, timeout: float, min_available: float) -> None:
    """Until every node wrote ``report``: each node's CPU when it did, its peak memory, the machine's
    lowest available memory."""
    pending = list(wave.nodes)
    deadline = time.monotonic() + timeout
    while pending:
        for pull_node in list(pending):
            pull_node.peak_mb = max(pull_node.peak_mb, cgroup_memory_mb(pull_node.node.id))
            if pull_node.installed_cpu is None and (pull_node.merged / PULL_UNIT).exists():
                pull_node.installed_cpu = cgroup_cpu(pull_node.node.id)
            if finished(pull_node, report):
                pull_node.cpu = cgroup_cpu(pull_node.node.id)
                pending.remove(pull_node)
        wave.lowest_available_gib = min(wave.lowest_available_gib, available_gib())
        if wave.lowest_available_gib < min_available:
            wave.stopped = (f"stopped: the machine had {wave.lowest_available_gib:.1f} GiB available, under "
                            f"--min-available {min_available}")
            return
        if time.monotonic() > deadline:
            wave.stopped = f"stopped: {len(pending)} node(s) had not written {report} after {timeout:.0f} s"
            return
        time.sleep(1)


def timed(args: list[str]) -> tuple[float, float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the process tree, peak resident MiB, the result)."""
    began = time.monotonic()
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    result = subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), output, "")
    return time.monotonic() - began, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, result


def phase(wave: Wave, name: str, action, report: str, timeout: float, min_available: float) -> None:
    began, cpu_before = time.monotonic(), own_cpu()
    wave.load = load()
    with ThreadPoolExecutor(STARTERS) as starters:
        list(starters.map(action, wave.nodes))
    watch(wave, report, timeout, min_available)
    wave.wall = time.monotonic() - began
    wave.own_cpu = own_cpu() - cpu_before
    done = [pull_node for pull_node in wave.nodes if pull_node.done is not None and not pull_node.failure]
    failed = [pull_node for pull_node in wave.nodes if pull_node.failure]
    print(f"{name}: {len(done)} of {len(wave.nodes)} wrote {report} in {wave.wall:.0f} s (load {wave.load} at the "
          f"start, {wave.others} other container(s) on the machine); {wave.stopped}")
    for pull_node in failed[:3]:
        print(f"  {pull_node.name}: {pull_node.failure}")
    if done:
        seconds, cpus = [n.done for n in done], [n.cpu for n in done]
        wave.figures[name] = (
            f"| {name} | {len(done)} of {len(wave.nodes)} | {wave.wall:.0f} | {statistics.median(seconds):.0f} / "
            f"{max(seconds):.0f} | {statistics.median(cpus):.1f} / {max(cpus):.1f} | {sum(cpus):.0f} | "
            f"{max(n.peak_mb for n in wave.nodes):.0f} | {wave.lowest_available_gib:.1f} | {wave.own_cpu:.1f} | "
            f"{wave.load} |")


def gather(wave: Wave, folder: Path) -> None:
    """Each node's boot report and health report, copied into ``folder`` under its name."""
    folder.mkdir()
    for pull_node in wave.nodes:
        for report in ("boot-report.json", "health.json"):
            source = pull_node.merged / REPORTS / report
            if source.is_file():
                shutil.copyfile(source, folder / f"{pull_node.name}-{report}")


def fleet_view(wave: Wave, folder: Path) -> str:
    wall, cpu, peak, result = timed([sys.executable, "-m", "deploy.fleet.from_reports", str(folder),
                                     str(folder.parent / "fleet.json")])
    fleet = json.loads((folder.parent / "fleet.json").read_text()) if (folder.parent / "fleet.json").exists() else {}
    rows = fleet.get("nodes", [])
    results = {row["status"] for row in rows}
    healths = sorted({(row.get("health") or {}).get("status", "none") for row in rows})
    print(f"fleet view (exit {result.returncode}): {len(rows)} rows {sorted(results)}, health {healths}; "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU, {peak:.0f} MiB peak")
    print("\n".join(line for line in result.stdout.splitlines() if line.startswith("-->")))
    return (f"| fleet view of {len(wave.nodes)} nodes' reports | {len(list(folder.iterdir()))} files | {wall:.2f} | "
            f"{cpu:.2f} | {peak:.0f} | {load()} |")


def wave_of(count: int, image: str, wheels: WheelServer, requirements: str, pci: Path, workdir: Path,
            timeout: float, min_available: float) -> list[str]:
    folder = workdir / f"wave-{count}"
    user_data = nocloud.site_user_data(wheels_url=wheels.url, requirements=requirements, settings=SETTINGS,
                                       packages=False)
    nodes = []
    for index in range(1, count + 1):
        name = f"pull-{index:02d}"
        nodes.append(PullNode(name=name, node=Node(image=image, share_apt_cache=False)))
        nocloud.write_seed(folder / "seeds" / name, user_data, instance_id=f"{name}-{uuid.uuid4().hex[:8]}",
                           hostname=name)
    wave = Wave(nodes=nodes, others=len(run(["docker", "ps", "-q"]).stdout.split()))
    lines = []
    try:
        phase(wave, f"{count} nodes: boot, install, converge",
              lambda n: start(n, image, folder / "seeds" / n.name, pci), "fleet-report.json", timeout, min_available)
        lines += wave.figures.values()
        if wave.stopped:
            return lines
        installed = [n.installed_cpu for n in wave.nodes if n.installed_cpu is not None and n.done is not None]
        if installed:
            print(f"  of which up to pull_install (systemd's boot, cloud-init, pip): median "
                  f"{statistics.median(installed):.1f} s CPU; the pull run after it: median "
                  f"{statistics.median(n.cpu - n.installed_cpu for n in wave.nodes if n.installed_cpu is not None):.1f} s")
        wave.figures.clear()
        # the first-boot unit writes the boot report, then runs the health check (ExecStartPost)
        phase(wave, f"{count} nodes: the next boot", restart, "health.json", timeout, min_available)
        lines += wave.figures.values()
        if wave.stopped:
            return lines
        gather(wave, folder / "reports")
        lines.append(fleet_view(wave, folder / "reports"))
        return lines
    finally:
        with ThreadPoolExecutor(STARTERS) as removers:
            list(removers.map(lambda n: n.node.remove(), [n for n in nodes if n.node.id]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--nodes", type=int, nargs="+", default=[16], help="nodes per wave, one wave after another")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a wave's phase may take")
    parser.add_argument("--min-available", type=float, default=2.0,
                        help="stop a wave when the machine has less memory available than this (GiB)")
    args = parser.parse_args()
    ensure_docker()
    image = f"gpu-node-bench/pull-fleet:{uuid.uuid4().hex[:12]}"
    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-pull-fleet-"))
    lines = []
    try:
        build_image(node_image(), image)
        requirements = nocloud.wheelhouse(workdir / "wheels")
        pci = pci_tree.write(pci_tree.load("pcie-only"), workdir / "pci" / "devices")
        for path in [workdir, workdir / "pci", *(workdir / "pci").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        wheels = WheelServer(workdir / "wheels")
        try:
            for count in args.nodes:
                lines += wave_of(count, image, wheels, requirements, pci, workdir, args.timeout, args.min_available)
        finally:
            print(f"wheel server (the site's web server, not a controller): {wheels.stop():.1f} s CPU")
    finally:
        run(["docker", "rmi", image], check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB")
    print("| phase | nodes done | wall s | per node s to done (median / max) | per node CPU s (median / max) | "
          "all nodes' CPU s | node peak MiB (max) | machine's lowest available GiB | bench's own CPU s | load at start |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(line for line in lines if not line.startswith("| fleet view")))
    print("| fleet view | files | wall s | CPU s | peak MiB | load |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(line for line in lines if line.startswith("| fleet view")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
