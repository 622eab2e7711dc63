"""
Pull-mode nodes booting at once, with no controller (docs/benchmark.md, docs/without-controller.md).

The image: the node image with Debian's containerd, python3-venv and cloud-init (tests/nocloud.py's
configuration for a container) and the STAND-IN nvidia.ko listed in the running kernel's modules.dep;
every node has the PCI fixture of two H100 PCIe, as tests/e2e/test_without_controller_e2e.py's nodes.
``--nodes`` nodes boot in waves of ``--at-once`` node containers started together: 64 started
together did not boot on the 2-core machine of docs/benchmark.md (systemd exited at once in 22 of
them, and 22 more stopped with their inotify path units failed: root's fs.inotify.max_user_instances,
128, is shared by every container of the machine, and that kernel setting is not the bench's to
raise). Each node has a NoCloud seed of its own:
docs/examples/cloud-init-pull.yaml with the site's values (the wheels served on 127.0.0.1 by a web
server the bench starts; the example's apt lines left out: the image has python3-venv, and the nodes
do not each ask Debian's mirror) and its hostname. Each node installs gpu-node from the hashed wheels
and its pull run converges it: nothing off the nodes runs gpu-node. Then the wave's nodes boot again
together (``docker restart``): the first-boot unit the pull run installed writes each node's boot
report and runs its health check. Each node's boot report and health.json are copied into one folder
(standing in for the site's upload) and the wave's nodes removed; after the last wave one fleet view
reads the folder: ``gpu-node-fleet-report --silent-after 1h FOLDER FLEET.json``
(deploy/fleet/from_reports.py; the first wave's reports are older than the default 10 minutes by then).

Figures, per wave and for all nodes: each node's time from its container's start to converged (its
pull run's fleet report written) and its CPU then (its container's cgroup: systemd, cloud-init, pip,
the pull run, containerd; split where pull_install has written the pull units), its peak memory
(less inactive file cache), the machine's available memory at its lowest; the next boot's the same;
the fleet view's wall time, CPU and peak memory. The bench's own CPU (its docker calls, reading the
nodes' files) and the wheel server's are printed apart: neither is a controller. A wave is stopped,
and says why, when the machine has less than ``--min-available`` GiB left or no node wrote its file
for ``--stall`` seconds. Asserts nothing.

    .venv/bin/python bench/pull_fleet.py --nodes 64 --at-once 16
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
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

from deploy.foundations.command_line import ArgumentParser  # noqa: E402

INSTALL = (
    "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
    "apt-get install -y -qq containerd python3-venv cloud-init >/dev/null"
)
# As tests/e2e/test_without_controller_e2e.py's cloud-init node: no driver build, nothing loaded into
# the machine's kernel, no reboot.
SETTINGS = 'stages = ["kernel", "runtimes"]\nkernel_modules_load = false\nreboot_allowed = false\n'
REPORTS = "var/lib/gpu-node"
PULL_UNIT = "etc/systemd/system/gpu-node-pull.service"  # written by pull_install, before the pull run
CONVERGE, NEXT_BOOT = "boot, install, converge", "the next boot"
STARTERS = 8  # docker run / restart calls at once
# On every container this run starts: a docker run cut short by Ctrl-C may have made one whose id it
# never printed, and the sweep at the end finds it by this label (then removes it by its id).
RUN_LABEL = f"gpu-node-bench-pull-fleet={uuid.uuid4().hex[:12]}"


@dataclass
class PullNode:
    name: str
    node: Node
    merged: Path = Path()  # the container's root as docker's overlay shows it
    started: float = 0.0  # wall clock (time.time) when its container (re)started
    peak_mb: float = 0.0
    installed_cpu: float | None = None  # its CPU when pull_install had written the pull units
    failure: str = ""
    # phase -> (seconds from its start to the phase's file, its CPU then, its peak memory MiB)
    results: dict[str, tuple[float, float, float]] = field(default_factory=dict)


@dataclass
class Phase:
    name: str
    nodes: list[PullNode]
    wall: float = 0.0
    own_cpu: float = 0.0
    load: str = ""
    lowest_available_gib: float = float("inf")
    stopped: str = ""


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def available_gib() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(fields["MemAvailable"].split()[0]) / 2**20


def own_cpu() -> float:
    """This process's CPU and its children's (the docker CLI calls), user + system."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def cgroup(container: str) -> tuple[Path, Path]:
    """(the container's cpuacct or cpu folder, its memory folder): cgroup v1's, else v2's."""
    v1 = Path("/sys/fs/cgroup/cpuacct/docker") / container
    if v1.parent.exists():
        return v1, Path("/sys/fs/cgroup/memory/docker") / container
    v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{container}.scope")
    return v2, v2


def cgroup_cpu(container: str) -> float:
    """CPU seconds the container has used since it (re)started: its cgroup's accounting."""
    folder, _ = cgroup(container)
    if (folder / "cpuacct.usage").exists():
        return int((folder / "cpuacct.usage").read_text()) / 1e9
    return int(dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())["usage_usec"]) / 1e6


def cgroup_memory_mb(container: str) -> float:
    """The container's memory less its inactive file cache, as docker's own stats count it; 0 while
    its cgroup is not there."""
    _, folder = cgroup(container)
    used, inactive = (
        ("memory.usage_in_bytes", "total_inactive_file")
        if folder.parent.name == "docker"
        else ("memory.current", "inactive_file")
    )
    try:
        fields = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
        return (int((folder / used).read_text()) - int(fields.get(inactive, 0))) / 2**20
    except OSError:
        return 0.0


def build_image(base: str, tag: str) -> None:
    builder = Node(image=base, init=("sleep", "infinity"), extra_run_args=["--label", RUN_LABEL]).start()
    try:
        builder.sh(INSTALL, timeout=900)
        nocloud.configure_image(builder)
        modules = f"/lib/modules/{os.uname().release}"
        builder.sh(f"mkdir -p {modules}/updates/dkms && printf 'updates/dkms/nvidia.ko:\\n' >> {modules}/modules.dep")
        run(
            ["docker", "exec", "-i", builder.id, "sh", "-c", f"cat > {modules}/updates/dkms/nvidia.ko"],
            input=standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, "535.261.03"),
            text=False,
        )
        nocloud.commit(builder, tag)
    finally:
        builder.remove()


class WheelServer:
    """The site's wheels on 127.0.0.1, served by a process of its own so its CPU is counted apart."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(folder), str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    urllib.request.urlopen(self.url, timeout=2).close()
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> float:
        """Stops it; the CPU seconds it used. Not Popen's terminate: it reaps a server that Ctrl-C ended,
        and its CPU with it."""
        os.kill(self.process.pid, signal.SIGTERM)
        _, status, usage = os.wait4(self.process.pid, 0)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        return usage.ru_utime + usage.ru_stime


def start(pull_node: PullNode, image: str, seed: Path, pci: Path) -> None:
    # --hostname: docker sets a container's hostname at each start, where a VM keeps its /etc/hostname;
    # SIGRTMIN+3 is how systemd is asked to shut down (docker restart)
    pull_node.node.id = run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            f"gpu-node-bench-{pull_node.name}-{uuid.uuid4().hex[:6]}",
            "--hostname",
            pull_node.name,
            "--stop-signal",
            "SIGRTMIN+3",
            "--label",
            RUN_LABEL,
            *NODE_RUN_FLAGS,
            "-v",
            f"{seed}:{nocloud.SEED}:ro",
            "-v",
            f"{pci}:/sys/bus/pci/devices:ro",
            image,
            "/sbin/init",
        ]
    ).stdout.strip()
    pull_node.started = time.time()
    pull_node.merged = Path(
        run(["docker", "inspect", "-f", "{{.GraphDriver.Data.MergedDir}}", pull_node.node.id]).stdout.strip()
    )


def restart(pull_node: PullNode) -> None:
    pull_node.peak_mb = 0.0
    run(["docker", "restart", "-t", "30", pull_node.node.id], timeout=300)
    pull_node.started = time.time()


def written_after_start(pull_node: PullNode, report: str) -> float | None:
    """Seconds from the node's start to its writing ``report`` (under /var/lib/gpu-node), if it has."""
    try:
        written = (pull_node.merged / REPORTS / report).stat().st_mtime
    except OSError:
        return None
    return written - pull_node.started if written >= pull_node.started else None


def failure(pull_node: PullNode) -> str:
    """A failed cloud-init run of this start, or the node's container gone; '' while neither."""
    result = pull_node.merged / "var/lib/cloud/data/result.json"
    try:
        if result.stat().st_mtime >= pull_node.started and json.loads(result.read_text())["v1"]["errors"]:
            return f"cloud-init: {json.loads(result.read_text())['v1']['errors'][0]}"
    except (OSError, ValueError, KeyError):
        pass
    if cgroup(pull_node.node.id)[0].exists():
        return ""
    state = run(
        ["docker", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", pull_node.node.id], check=False
    ).stdout.split()
    return "" if state[:1] == ["true"] else f"its container exited ({state[-1]})"


def stuck(pull_node: PullNode) -> str:
    """What systemd says of a node that wrote nothing: its state and its failed units."""
    said = pull_node.node.sh(
        "systemctl is-system-running; systemctl --failed --plain --no-legend | cut -d ' ' -f 1", check=False, timeout=60
    ).stdout.split()
    return f"{pull_node.name}: systemd {said[0] if said else '?'}, failed: {' '.join(said[1:4]) or 'none'}"


def watch(phase: Phase, report: str, stall: float, min_available: float) -> None:
    """Until each node wrote ``report`` or failed: its figures for the phase, the machine's lowest
    available memory; stopped early (``phase.stopped``) when no node wrote it for ``stall`` seconds,
    or too little memory is left."""
    pending = [pull_node for pull_node in phase.nodes if not pull_node.failure]
    progress = time.monotonic()
    while pending:
        for pull_node in list(pending):
            pull_node.peak_mb = max(pull_node.peak_mb, cgroup_memory_mb(pull_node.node.id))
            if pull_node.installed_cpu is None and (pull_node.merged / PULL_UNIT).exists():
                pull_node.installed_cpu = cgroup_cpu(pull_node.node.id)
            seconds = written_after_start(pull_node, report)
            if seconds is not None:
                pull_node.results[phase.name] = (seconds, cgroup_cpu(pull_node.node.id), pull_node.peak_mb)
            else:
                pull_node.failure = failure(pull_node)
            if seconds is not None or pull_node.failure:
                pending.remove(pull_node)
                progress = time.monotonic()
        phase.lowest_available_gib = min(phase.lowest_available_gib, available_gib())
        if phase.lowest_available_gib < min_available:
            phase.stopped = (
                f"stopped: the machine had {phase.lowest_available_gib:.1f} GiB available, under "
                f"--min-available {min_available}"
            )
            return
        if pending and time.monotonic() - progress > stall:
            phase.stopped = f"stopped: {len(pending)} node(s) wrote no {report} for {stall:.0f} s: " + "; ".join(
                stuck(pull_node) for pull_node in pending[:3]
            )
            return
        time.sleep(1)


def run_phase(phase: Phase, action, report: str, stall: float, min_available: float) -> None:
    began, cpu_before = time.monotonic(), own_cpu()
    phase.load = load()
    with ThreadPoolExecutor(STARTERS) as starters:
        list(starters.map(action, phase.nodes))
    watch(phase, report, stall, min_available)
    phase.wall = time.monotonic() - began
    phase.own_cpu = own_cpu() - cpu_before
    done = [pull_node for pull_node in phase.nodes if phase.name in pull_node.results]
    print(
        f"{len(phase.nodes)} nodes, {phase.name}: {len(done)} wrote {report} in {phase.wall:.0f} s (load {phase.load}"
        f" at the start) {phase.stopped}"
    )
    for pull_node in [pull_node for pull_node in phase.nodes if pull_node.failure][:3]:
        print(f"  {pull_node.name}: {pull_node.failure}")


def row(name: str, nodes: list[PullNode], phase_name: str, phases: list[Phase]) -> str:
    """A row of the table: the nodes' figures for the phase, and the phases' machine figures."""
    figures = [pull_node.results[phase_name] for pull_node in nodes if phase_name in pull_node.results]
    if not figures:
        return f"| {name} | 0 of {len(nodes)} | | | | | | | | |"
    seconds, cpus, peaks = zip(*figures)
    return (
        f"| {name} | {len(figures)} of {len(nodes)} | {sum(phase.wall for phase in phases):.0f} | "
        f"{statistics.median(seconds):.0f} / {max(seconds):.0f} | {statistics.median(cpus):.1f} / {max(cpus):.1f} | "
        f"{sum(cpus):.0f} | {max(peaks):.0f} | {min(phase.lowest_available_gib for phase in phases):.1f} | "
        f"{sum(phase.own_cpu for phase in phases):.1f} | {', '.join(phase.load for phase in phases)} |"
    )


def gather(nodes: list[PullNode], folder: Path) -> None:
    """Each node's boot report and health report, copied into ``folder`` under its name."""
    for pull_node in nodes:
        for report in ("boot-report.json", "health.json"):
            source = pull_node.merged / REPORTS / report
            if source.is_file():
                shutil.copyfile(source, folder / f"{pull_node.name}-{report}")


def fleet_view(folder: Path) -> str:
    fleet = folder.parent / "fleet.json"
    args = [sys.executable, "-m", "deploy.fleet.from_reports", "--silent-after", "1h", str(folder), str(fleet)]
    began = time.monotonic()
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall, cpu, peak = time.monotonic() - began, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    rows = json.loads(fleet.read_text())["nodes"] if fleet.exists() else []
    statuses = sorted({row["status"] for row in rows})
    healths = sorted({(row.get("health") or {}).get("status", "none") for row in rows})
    print(f"fleet view (exit {os.waitstatus_to_exitcode(status)}): {len(rows)} rows {statuses}, health {healths}")
    print("\n".join(line for line in output.splitlines() if line.startswith("-->")))
    return (
        f"| one fleet view (folder mode) | {len(rows)} nodes, {len(list(folder.iterdir()))} files | {wall:.2f} | "
        f"{cpu:.2f} | {peak:.0f} | {load()} |"
    )


def sweep() -> None:
    """Removes, by id, every container of this run still there."""
    for container in run(["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}"], check=False).stdout.split():
        run(["docker", "rm", "-f", "-v", container], check=False)


def stop_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # as Ctrl-C does: the finally blocks remove what the run started


def main() -> int:
    # the project's parser: a bad argument is one line, not argparse's usage before it
    parser = ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--nodes", type=int, default=64, help="pull-mode nodes in all (default 64)")
    parser.add_argument("--at-once", type=int, default=16, help="node containers started together (default 16)")
    parser.add_argument(
        "--stall", type=float, default=600, help="stop a wave when no node wrote its file for this long"
    )
    parser.add_argument(
        "--min-available",
        type=float,
        default=2.0,
        help="stop a wave when the machine has less memory available than this (GiB)",
    )
    args = parser.parse_args()
    if args.nodes < 1 or args.at_once < 1:
        parser.error("--nodes and --at-once must be 1 or more")
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    ensure_docker()
    machine = nocloud.machine_identity()  # the nodes share its network: left as it was?
    image = f"gpu-node-bench/pull-fleet:{uuid.uuid4().hex[:12]}"
    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-pull-fleet-"))
    all_nodes: list[PullNode] = []
    phases: dict[str, list[Phase]] = {CONVERGE: [], NEXT_BOOT: []}
    lines = []
    try:
        build_image(node_image(), image)
        requirements = nocloud.wheelhouse(workdir / "wheels")
        served = list((workdir / "wheels").iterdir())
        print(
            f"wheels served: {len(served)}, {sum(path.stat().st_size for path in served) / 1e6:.1f} MB (each node's pip fetches all)"
        )
        pci = pci_tree.write(pci_tree.load("pcie-only"), workdir / "pci" / "devices")
        for path in [workdir, workdir / "pci", *(workdir / "pci").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (workdir / "reports").mkdir()
        wheels = WheelServer(workdir / "wheels")
        try:
            user_data = nocloud.site_user_data(
                wheels_url=wheels.url, requirements=requirements, settings=SETTINGS, packages=False
            )
            for first in range(0, args.nodes, args.at_once):
                nodes = []
                for index in range(first + 1, min(first + args.at_once, args.nodes) + 1):
                    name = f"pull-{index:02d}"
                    nodes.append(PullNode(name=name, node=Node(image=image, share_apt_cache=False)))
                    nocloud.write_seed(
                        workdir / "seeds" / name, user_data, hostname=name, instance_id=f"{name}-{uuid.uuid4().hex[:8]}"
                    )
                all_nodes += nodes
                try:
                    converge = Phase(CONVERGE, nodes)
                    phases[CONVERGE].append(converge)
                    run_phase(
                        converge,
                        lambda n: start(n, image, workdir / "seeds" / n.name, pci),
                        "fleet-report.json",
                        args.stall,
                        args.min_available,
                    )
                    split = [
                        (n.installed_cpu, n.results[CONVERGE][1])
                        for n in nodes
                        if CONVERGE in n.results and n.installed_cpu is not None
                    ]
                    if split:
                        print(
                            f"  CPU per node up to pull_install (systemd's boot, cloud-init, pip): median "
                            f"{statistics.median(a for a, _ in split):.1f} s; the pull run after it: median "
                            f"{statistics.median(b - a for a, b in split):.1f} s"
                        )
                    if converge.stopped:
                        break
                    next_boot = Phase(NEXT_BOOT, [n for n in nodes if CONVERGE in n.results])
                    phases[NEXT_BOOT].append(next_boot)
                    # the first-boot unit writes the boot report, then runs the health check (ExecStartPost)
                    run_phase(next_boot, restart, "health.json", args.stall, args.min_available)
                    gather(next_boot.nodes, workdir / "reports")
                    if next_boot.stopped:
                        break
                finally:
                    with ThreadPoolExecutor(STARTERS) as removers:
                        list(removers.map(lambda n: n.node.remove(), [n for n in nodes if n.node.id]))
            lines.append(fleet_view(workdir / "reports"))
        finally:
            print(f"wheel server (the site's web server, not a controller): {wheels.stop():.1f} s CPU")
    finally:
        sweep()
        run(["docker", "rmi", image], check=False)
        shutil.rmtree(workdir, ignore_errors=True)

    waves = len(phases[CONVERGE])
    print(
        f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB;"
        f" {len(all_nodes)} nodes in {waves} wave(s) of up to {args.at_once}"
    )
    print(
        "| phase | nodes done | wall s (waves summed) | per node s from its start (median / max) | per node CPU s "
        "(median / max) | all nodes' CPU s | node peak MiB (max) | machine's lowest available GiB | bench's own CPU s "
        "| load at the waves' starts |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for phase_name in (CONVERGE, NEXT_BOOT):
        for number, phase in enumerate(phases[phase_name], 1):
            print(row(f"wave {number}: {phase_name}", phase.nodes, phase_name, [phase]))
        if waves > 1:
            print(row(f"all {len(all_nodes)}: {phase_name}", all_nodes, phase_name, phases[phase_name]))
    print("| fleet view | rows, files | wall s | CPU s | peak MiB | load |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
    changed = [name for name, value in nocloud.machine_identity().items() if machine.get(name) != value]
    if changed:
        print(f"the machine's {', '.join(changed)} changed during the run", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("interrupted: the run's containers, image and files are removed")
