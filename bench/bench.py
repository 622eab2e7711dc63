"""
Fleet benchmark over SSH (not a test: it asserts nothing; its figures go in docs/benchmark.md).

    .venv/bin/python bench/bench.py [--nodes 1,4,16,64] [--repeat 3] [--ansible-repeat N] [--json FILE]
                                    [--markdown FILE] [--chart FILE] [--verbose]
    .venv/bin/python bench/bench.py --from-json bench/results.json --chart docs/benchmark-scaling.svg

For each fleet size N it starts N node containers, each with sshd on its own 127.0.0.1 port
(bench/sshfleet.py), writes a pyinfra inventory of them (SSH connector, throwaway keys, a
known_hosts file of its own) and measures, with `pyinfra -y` as a cron job would run it:

  - first provisioning: stages kernel, toolkit (from the local toolkit repository), runtimes,
    verify; no driver;
  - the no-op re-run of deploy/gpu_node.py (the same data), --repeat times, median;
  - deploy/verify.py alone; the drift check (deploy/fleet/drift.py);
  - the same no-op checks as an Ansible playbook (bench/ansible/noop.yml), on the same nodes.

Per run: wall seconds, controller CPU (user+sys of the whole process tree, from wait4), controller
peak RSS (the largest process of the tree), remote commands per node (logged on each node by
sshd's ForceCommand wrapper, not counted by the controller), the CPU the node containers used
meanwhile (their cgroups: sshd and the remote commands share this machine's cores with the
controller), and the 1-minute load average when the run started (other jobs share this machine).
Per fleet: each node container's memory.

Where the machine cannot boot as many systemd containers as hosts (inotify instances), e.g.
`--nodes 64 --hosts-per-node 64:4` runs 16 containers with 4 sshd ports each: 64 inventory hosts
for the read-only runs, provisioning once per container. Figures and their reading: docs/benchmark.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "tests")]

import toolkit_repo  # noqa: E402
from chart import scaling_svg  # noqa: E402
from harness import SAFE_DATA, ensure_docker, node_image  # noqa: E402
from sshfleet import (  # noqa: E402
    Keys,
    SshNode,
    ansible_environment,
    cpu_seconds,
    free_ports,
    memory_mb,
    remove_all,
    ssh_node_image,
    ssh_ok,
    write_ansible_inventory,
    write_inventory,
)

from deploy.tasks.kernel import (  # noqa: E402  # noqa: E402
    BLACKLIST_PATH,
    MODULES_LOAD_PATH,
    SYSCTL_PATH,
    blacklist_text,
    modules_load_text,
    sysctl_text,
)
from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES  # noqa: E402

STAGES = "kernel,toolkit,runtimes,verify"
PLAYBOOK = REPO / "bench" / "ansible" / "noop.yml"


def measure(command: list[str], env: dict | None = None) -> dict:
    """Run a command: wall time, CPU of its process tree and its largest RSS (wait4), its output."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "wall_s": time.monotonic() - started,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "load_1m": load,
        "output": output,
    }


def data_args(data: dict) -> list[str]:
    args = []
    for key, value in {**SAFE_DATA, **data}.items():
        args += ["--data", f"{key}={value}"]
    return args


def pyinfra(inventory: Path, deploy_file: str, data: dict) -> list[str]:
    return [sys.executable, "-m", "pyinfra", "-y", str(inventory), deploy_file, *data_args(data)]


def drift(inventory: Path, data: dict) -> list[str]:
    return [sys.executable, "-m", "deploy.fleet.drift", str(inventory), "deploy/gpu_node.py", *data_args(data)]


def ansible(inventory: Path, expected: dict) -> list[str]:
    return [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory),
        str(PLAYBOOK),
        "-e",
        json.dumps(expected),
    ]


def ansible_expected() -> dict:
    """What the playbook compares against: the files and packages the no-op checks."""
    import hashlib

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    return {
        "managed_files": {
            MODULES_LOAD_PATH: sha(modules_load_text()),
            SYSCTL_PATH: sha(sysctl_text()),
            BLACKLIST_PATH: sha(blacklist_text()),
        },
        "apt_files": [APT_SOURCE, APT_KEYRING],
        "packages": [*TOOLKIT_PACKAGES, "containerd"],
    }


def start_fleet(image: str, count: int, keys: Keys, hosts_per_node: int = 1) -> list[SshNode]:
    ports = free_ports(count * hosts_per_node)
    nodes = [
        SshNode(
            image=image,
            port=ports[index * hosts_per_node],
            name=f"node-{index:02d}",
            extra_ports=ports[index * hosts_per_node + 1 : (index + 1) * hosts_per_node],
        )
        for index in range(count)
    ]
    for port in ports:
        keys.trust(port)

    def boot(node: SshNode) -> None:
        # Boots slow down with the machine's load (other jobs' e2e tests): one more try.
        try:
            node.start_ssh(keys)
        except Exception as error:  # noqa: BLE001 - a boot that fails on a loaded machine gets one more try
            print(f"{node.name} did not boot ({str(error)[:200]}): trying again", file=sys.stderr)
            node.id = ""
            node.start_ssh(keys)

    try:
        with ThreadPoolExecutor(max_workers=min(count, 4)) as pool:
            list(pool.map(boot, nodes))
        for node in nodes:
            if not ssh_ok(node, keys):
                raise RuntimeError(f"ssh to {node.name} (port {node.port}) failed")
    except BaseException:
        remove_all(nodes)
        raise
    return nodes


def commands_per_node(nodes: list[SshNode]) -> dict[str, list[str]]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip((node.name for node in nodes), pool.map(SshNode.take_commands, nodes)))


def timed(nodes: list[SshNode], command: list[str], env: dict | None = None, ok=(0,), hosts_per_node: int = 1) -> dict:
    """One measured run and the commands each node logged for it (per inventory host)."""
    commands_per_node(nodes)  # empties the logs
    nodes_cpu = cpu_seconds(nodes)
    run = measure(command, env)
    run["nodes_cpu_s"] = cpu_seconds(nodes) - nodes_cpu
    logged = commands_per_node(nodes)
    counts = [len(lines) / hosts_per_node for lines in logged.values()]
    run["commands_per_node"] = statistics.median(counts)
    run["commands_max"] = max(counts)
    run["sample_commands"] = logged[nodes[0].name]
    run["ok"] = run["returncode"] in ok
    if not run["ok"]:
        print(f"\n{command[:4]} exited {run['returncode']}:\n{run['output'][-3000:]}", file=sys.stderr)
    return run


def summary(runs: list[dict]) -> dict:
    return {
        "wall_s": statistics.median(run["wall_s"] for run in runs),
        "wall_s_runs": [round(run["wall_s"], 3) for run in runs],
        "cpu_s": statistics.median(run["cpu_s"] for run in runs),
        "nodes_cpu_s": statistics.median(run["nodes_cpu_s"] for run in runs),
        "peak_mb": max(run["peak_mb"] for run in runs),
        "commands_per_node": statistics.median(run["commands_per_node"] for run in runs),
        "commands_max": max(run["commands_max"] for run in runs),
        "load_1m": [round(run["load_1m"], 2) for run in runs],
        "ok": all(run["ok"] for run in runs),
    }


def profile_noop(inventory: Path, data: dict, workdir: Path, count: int) -> dict:
    """One more no-op (not timed) under cProfile: where the controller's time goes, by own time."""
    import pstats

    output = workdir / f"noop-{count}.prof"
    command = pyinfra(inventory, "deploy/gpu_node.py", data)
    measure([command[0], "-m", "cProfile", "-o", str(output), *command[1:]])
    stats = pstats.Stats(str(output))
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:25]
    return {
        "total_s": stats.total_tt,
        "own_time": [
            {
                "function": f"{Path(file).name}:{line}({name})",
                "calls": calls,
                "own_s": round(own, 3),
                "cumulative_s": round(cumulative, 3),
            }
            for (file, line, name), (_, calls, own, cumulative, _) in rows
        ],
    }


def bench_fleet(
    image: str,
    count: int,
    data: dict,
    repeat: int,
    workdir: Path,
    ansible_repeat: int,
    verbose: bool,
    profile: bool = False,
    hosts_per_node: int = 1,
) -> dict:
    """``count`` inventory hosts: ``count / hosts_per_node`` node containers, each with that many
    sshd ports. Provisioning runs once per container; the read-only runs on every host."""
    containers = count // hosts_per_node
    keys = Keys(workdir / f"keys-{count}")
    nodes = start_fleet(image, containers, keys, hosts_per_node)
    try:
        one_each = write_inventory(
            workdir / f"inventory-{count}-containers.py", [node.endpoints()[0] for node in nodes], keys
        )
        inventory = write_inventory(
            workdir / f"inventory-{count}.py", [endpoint for node in nodes for endpoint in node.endpoints()], keys
        )
        idle = memory_mb(nodes)
        first = timed(nodes, pyinfra(one_each, "deploy/gpu_node.py", data))
        result = {
            "nodes": count,
            "containers": containers,
            "hosts_per_container": hosts_per_node,
            "first": summary([first]),
        }
        if hosts_per_node > 1:
            result["first"]["nodes_provisioned"] = containers
        if not first["ok"]:
            # A mirror timing out on some of many nodes: a second run finishes them (recorded).
            second = timed(nodes, pyinfra(one_each, "deploy/gpu_node.py", data))
            result["first_second_run"] = summary([second])
            if not second["ok"]:
                raise SystemExit(f"provisioning {containers} node(s) failed twice")
        provisioned = memory_mb(nodes)

        def runs(command, times, env=None):
            return [timed(nodes, command, env, hosts_per_node=hosts_per_node) for _ in range(times)]

        noop = runs(pyinfra(inventory, "deploy/gpu_node.py", data), repeat)
        result["noop"] = summary(noop)
        result["verify"] = summary(runs(pyinfra(inventory, "deploy/verify.py", data), repeat))
        result["drift"] = summary(runs(drift(inventory, data), repeat))
        if ansible_repeat:
            ansible_inventory = write_ansible_inventory(
                workdir / f"ansible-{count}.ini", [endpoint for node in nodes for endpoint in node.endpoints()], keys
            )
            env = ansible_environment(keys, workdir)
            ansible_runs = runs(ansible(ansible_inventory, ansible_expected()), ansible_repeat, env)
            result["ansible_noop"] = summary(ansible_runs)
            result["ansible_sample_commands"] = ansible_runs[0]["sample_commands"]
        result["noop_sample_commands"] = noop[0]["sample_commands"]
        if profile:
            result["noop_profile"] = profile_noop(inventory, data, workdir, count)
        result["node_memory_mb"] = {
            "booted_median": statistics.median(idle.values()),
            "provisioned_median": statistics.median(provisioned.values()),
            "provisioned_max": max(provisioned.values()),
        }
        if verbose:
            print(f"\nremote commands of a no-op run on {nodes[0].name} ({len(noop[0]['sample_commands'])}):")
            for line in noop[0]["sample_commands"]:
                print(f"  {line[:200]}")
        return result
    finally:
        remove_all(nodes)


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory_gb:.0f} GiB, Python {platform.python_version()}"


def table(results: dict) -> str:
    header = ("nodes", "run", "wall s", "x 1 node", "CPU s", "nodes CPU s", "peak MB", "cmds/node", "load 1m")
    lines = ["  ".join(f"{name:>10}" for name in header)]
    single = {
        name: fleet[name]["wall_s"]
        for fleet in results["fleets"]
        if fleet["nodes"] == 1
        for name in fleet
        if isinstance(fleet[name], dict) and "wall_s" in fleet[name]
    }
    for fleet in results["fleets"]:
        for name in ("first", "noop", "verify", "drift", "ansible_noop"):
            if name not in fleet:
                continue
            run = fleet[name]
            ratio = f"{run['wall_s'] / single[name]:.2f}" if single.get(name) else "-"
            row = (
                fleet["nodes"],
                name,
                f"{run['wall_s']:.2f}",
                ratio,
                f"{run['cpu_s']:.2f}",
                f"{run['nodes_cpu_s']:.2f}",
                f"{run['peak_mb']:.0f}",
                f"{run['commands_per_node']:g}",
                "/".join(f"{load:.1f}" for load in run["load_1m"]),
            )
            lines.append("  ".join(f"{value:>10}" for value in row) + ("" if run["ok"] else "  FAILED"))
        memory = fleet["node_memory_mb"]
        lines.append(
            f"{'':>10}  node memory: {memory['booted_median']:.0f} MB booted, "
            f"{memory['provisioned_median']:.0f} MB provisioned (median), max {memory['provisioned_max']:.0f}"
        )
        if "ansible_noop" in fleet:
            lines.append(
                f"{'':>10}  Ansible / pyinfra no-op: {fleet['ansible_noop']['wall_s'] / fleet['noop']['wall_s']:.2f}x"
            )
    return "\n".join(lines)


RUN_NAMES = {
    "first": "first provisioning",
    "noop": "no-op re-run",
    "verify": "verify.py alone",
    "drift": "drift check",
    "ansible_noop": "Ansible no-op playbook",
}


def markdown(results: dict) -> str:
    """The figures as markdown tables (docs/benchmark.md): one per run kind, a row per fleet size,
    and the growth per added node between the smallest and the largest fleet."""
    fleets = results["fleets"]
    out = []
    for name, title in RUN_NAMES.items():
        measured = [fleet for fleet in fleets if name in fleet]
        if not measured:
            continue
        out += [
            f"**{title}**",
            "",
            "| nodes | wall s (median) | wall s (min) | x 1 node (min) | controller CPU s | nodes' CPU s "
            "| controller peak MB | remote commands / node | load (1 min) at start |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        base = min(measured[0][name]["wall_s_runs"])
        for fleet in measured:
            run = fleet[name]
            fastest = min(run["wall_s_runs"])
            hosts = str(fleet["nodes"])
            if fleet.get("hosts_per_container", 1) > 1:
                hosts += (
                    f" ({fleet['containers']} containers)"
                    if name == "first"
                    else f" ({fleet['containers']} x {fleet['hosts_per_container']})"
                )
            out.append(
                f"| {hosts} | {run['wall_s']:.2f} | {fastest:.2f} | {fastest / base:.2f} | {run['cpu_s']:.2f} "
                f"| {run['nodes_cpu_s']:.2f} | {run['peak_mb']:.0f} | {run['commands_per_node']:g} "
                f"| {', '.join(f'{load:.1f}' for load in run['load_1m'])} |" + ("" if run["ok"] else " FAILED")
            )
        if len(measured) > 1:
            small, large = measured[0], measured[-1]
            added = large["nodes"] - small["nodes"]

            def per_node(key):
                return (large[name][key] - small[name][key]) / added  # noqa: B023 - called in this iteration

            out += [
                "",
                f"Per added node ({small['nodes']} to {large['nodes']}): wall +{per_node('wall_s'):.3f} s, "
                f"controller CPU +{per_node('cpu_s'):.3f} s, nodes' CPU +{per_node('nodes_cpu_s'):.3f} s, "
                f"controller peak +{per_node('peak_mb'):.2f} MB.",
            ]
        out.append("")
    out += [
        "**node container memory** (cgroup usage less inactive file cache)",
        "",
        "| nodes | booted, median MB | provisioned, median MB | provisioned, max MB |",
        "|---:|---:|---:|---:|",
    ]
    for fleet in fleets:
        memory = fleet["node_memory_mb"]
        out.append(
            f"| {fleet['nodes']} | {memory['booted_median']:.0f} | {memory['provisioned_median']:.0f} "
            f"| {memory['provisioned_max']:.0f} |"
        )
    ratios = [
        (fleet["nodes"], fleet["ansible_noop"]["wall_s"] / fleet["noop"]["wall_s"])
        for fleet in fleets
        if "ansible_noop" in fleet
    ]
    if ratios:
        out += [
            "",
            "**Ansible / pyinfra (gpu-node) no-op wall time**: "
            + ", ".join(f"{nodes} node{'s' if nodes > 1 else ''}: {ratio:.2f}x" for nodes, ratio in ratios),
        ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="gpu-node fleet benchmark over SSH (prints figures, asserts nothing)")
    parser.add_argument("--nodes", default="1,4,16,64", help="fleet sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ansible-repeat", type=int, help="Ansible runs per fleet (default: --repeat; 0: none)")
    parser.add_argument("--verbose", action="store_true", help="list the remote commands of a no-op run")
    parser.add_argument(
        "--profile", action="store_true", help="profile one more no-op per fleet (cProfile, in the JSON)"
    )
    parser.add_argument(
        "--hosts-per-node",
        default="",
        help="fleet:hosts pairs, e.g. 64:4: that fleet's hosts are "
        "fleet/hosts containers with hosts sshd ports each (the read-only runs; provisioning once "
        "per container), where the machine cannot boot that many systemd containers",
    )
    parser.add_argument("--json", default=str(REPO / "bench" / "results.json"))
    parser.add_argument("--markdown", help="also write the figures as markdown tables to this file")
    parser.add_argument(
        "--chart",
        help="also draw the scaling figures as an SVG chart to this file "
        "(docs/benchmark-scaling.svg; with --from-json, from stored results)",
    )
    parser.add_argument(
        "--from-json",
        help="print (and --markdown, --chart) the figures of earlier runs (comma-separated "
        "JSON files, merged into --json when several), measure nothing",
    )
    args = parser.parse_args()
    if args.from_json:
        # Several runs (e.g. 1,4,16 then 64 on its own) merge into one set of figures.
        runs = [json.loads(Path(name).read_text()) for name in args.from_json.split(",")]
        results = {
            **runs[0],
            "fleets": sorted((fleet for run in runs for fleet in run["fleets"]), key=lambda fleet: fleet["nodes"]),
        }
        if len(runs) > 1:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(table(results))
        write_outputs(args, results)
        return 0

    ensure_docker()
    image = ssh_node_image(node_image())
    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-bench-"))
    with toolkit_repo.served(workdir / "stable") as repository:
        results: dict = {
            "machine": machine(),
            "stages": STAGES,
            "repository": repository.why,
            "connector": "ssh",
            "fleets": [],
        }
        data = {**repository.data(), "stages": STAGES}
        for count in (int(n) for n in args.nodes.split(",")):
            ansible_repeat = args.repeat if args.ansible_repeat is None else args.ansible_repeat
            per_node = dict(tuple(map(int, pair.split(":"))) for pair in args.hosts_per_node.split(",") if pair)
            results["fleets"].append(
                bench_fleet(
                    image,
                    count,
                    data,
                    args.repeat,
                    workdir,
                    ansible_repeat,
                    args.verbose,
                    args.profile,
                    per_node.get(count, 1),
                )
            )
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")

    print(f"\nmachine: {results['machine']}\nstages: {STAGES}; toolkit: {results['repository']}\n")
    print(table(results))
    print(f"\nJSON: {args.json}")
    write_outputs(args, results)
    return 0


def write_outputs(args: argparse.Namespace, results: dict) -> None:
    """The figures as markdown tables and as a chart, where asked for."""
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
    if args.chart:
        Path(args.chart).write_text(scaling_svg(results))
        print(f"chart: {args.chart}")


if __name__ == "__main__":
    sys.exit(main())
