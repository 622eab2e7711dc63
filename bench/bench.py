"""
Fleet speed benchmark (not a test: it asserts nothing; its figures go in the README).

    .venv/bin/python bench/bench.py [--nodes 1,4,16] [--repeat 3] [--verbose] [--json FILE]

For each fleet size N it starts N bookworm node containers, provisions them once
(kernel, toolkit from the STAND-IN repository, runtimes; the driver with --with-driver),
then measures, each --repeat times with the median reported:
  - the no-op re-run of deploy/gpu_node.py: wall seconds, controller CPU seconds, controller
    peak memory (the pyinfra process's max RSS), remote commands per node (counted from
    pyinfra's own -vv output, one ">>>" line per command it runs on a host);
  - deploy/verify.py alone.
Once, on fresh single nodes: the first provisioning run of the runtime stages against the bare
`apt-get update && apt-get install` of the same packages (overhead ratio), with the apt
download cache warm for both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import toolkit_repo  # noqa: E402
from harness import SAFE_DATA, Node, ensure_docker, node_image  # noqa: E402

from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES  # noqa: E402

STAGES = os.environ.get("BENCH_STAGES", "kernel,toolkit,runtimes")
COMMAND_LINE = re.compile(r"^\[(@docker/[0-9a-f]+)\] >>> ")


def measure(command: list[str]) -> dict:
    """Run a command; wall time, its CPU time and peak RSS (from wait4), and its output."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return {
        "returncode": process.returncode,
        "wall_s": time.monotonic() - started,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "output": output,
    }


def pyinfra(targets: list[Node], deploy_file: str, data: dict, verbose: bool = False) -> list[str]:
    command = [sys.executable, "-m", "pyinfra", "-y"]
    if verbose:
        command.append("-vv")
    command += [",".join(node.target for node in targets), deploy_file]
    for key, value in {**SAFE_DATA, **data}.items():
        command += ["--data", f"{key}={value}"]
    return command


def remote_commands(output: str) -> dict[str, list[str]]:
    per_host: dict[str, list[str]] = {}
    for line in output.splitlines():
        match = COMMAND_LINE.match(line)
        if match:
            per_host.setdefault(match.group(1), []).append(line[match.end():])
    return per_host


def start_nodes(image: str, count: int) -> list[Node]:
    nodes = [Node(image=image) for _ in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=min(count, 8)) as pool:
            list(pool.map(Node.start, nodes))
    except BaseException:
        for node in nodes:
            node.remove()
        raise
    return nodes


def median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def bench_fleet(image: str, count: int, data: dict, repeat: int, verbose: bool) -> dict:
    nodes = start_nodes(image, count)
    try:
        first = measure(pyinfra(nodes, "deploy/gpu_node.py", data))
        if first["returncode"] != 0:
            raise SystemExit(f"provisioning {count} node(s) failed:\n{first['output'][-4000:]}")
        noop_runs = [measure(pyinfra(nodes, "deploy/gpu_node.py", data, verbose=True)) for _ in range(repeat)]
        verify_runs = [measure(pyinfra(nodes, "deploy/verify.py", data)) for _ in range(repeat)]
        counts = remote_commands(noop_runs[0]["output"])
        per_node = statistics.median(len(commands) for commands in counts.values()) if counts else 0
        if verbose and counts:
            host, commands = sorted(counts.items())[0]
            print(f"\nremote commands of a no-op run on {host} ({len(commands)}):")
            for command in commands:
                print(f"  {command[:220]}")
        return {
            "nodes": count,
            "first_run_wall_s": first["wall_s"],
            "noop_wall_s": median(noop_runs, "wall_s"),
            "noop_cpu_s": median(noop_runs, "cpu_s"),
            "noop_peak_mb": max(run["peak_mb"] for run in noop_runs),
            "noop_remote_commands_per_node": per_node,
            "noop_failed": any(run["returncode"] != 0 for run in noop_runs),
            "verify_wall_s": median(verify_runs, "wall_s"),
            "verify_failed": any(run["returncode"] != 0 for run in verify_runs),
        }
    finally:
        for node in nodes:
            node.remove()


def bench_first_provisioning(image: str, data: dict, url: str, gpgkey: str) -> dict:
    """The tool's first run of the runtime stages vs the bare package installs it makes."""
    packages = ["containerd", "curl", "ca-certificates", *TOOLKIT_PACKAGES]
    warm = Node(image=image).start()  # fills the shared apt download cache for both
    try:
        assert pyinfra_ok(measure(pyinfra([warm], "deploy/gpu_node.py", data)))
    finally:
        warm.remove()

    bare = Node(image=image).start()
    try:
        # Not timed: the repository and its key, put in place by hand.
        bare.write(APT_KEYRING, gpgkey)
        bare.write(APT_SOURCE, f"deb [signed-by={APT_KEYRING}] {url}/deb/$(ARCH) /\n")
        started = time.monotonic()
        bare.sh("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                + " ".join(packages) + " >/dev/null")
        bare_s = time.monotonic() - started
    finally:
        bare.remove()

    tool = Node(image=image).start()
    try:
        run = measure(pyinfra([tool], "deploy/gpu_node.py", data))
        assert pyinfra_ok(run)
    finally:
        tool.remove()
    return {"bare_install_s": bare_s, "tool_first_run_s": run["wall_s"], "overhead_ratio": run["wall_s"] / bare_s}


def pyinfra_ok(run: dict) -> bool:
    if run["returncode"] != 0:
        print(run["output"][-4000:], file=sys.stderr)
    return run["returncode"] == 0


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory_gb:.0f} GiB, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description="gpu-node fleet benchmark (prints figures, asserts nothing)")
    parser.add_argument("--nodes", default="1,4,16", help="fleet sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="list the remote commands of a no-op run")
    parser.add_argument("--with-driver", action="store_true", help="also install Debian's NVIDIA driver (slow)")
    parser.add_argument("--skip-first-run", action="store_true", help="skip the bare-install comparison")
    parser.add_argument("--json", default=str(REPO / "bench" / "results.json"))
    args = parser.parse_args()

    ensure_docker()
    image = node_image()
    stages = STAGES + (",driver" if args.with_driver else "")
    results: dict = {"machine": machine(), "stages": stages, "fleets": []}
    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-bench-"))
    toolkit_repo.build_repo(workdir / "stable")
    with toolkit_repo.serve(workdir / "stable") as url:
        data = {**toolkit_repo.deploy_data(url), "stages": stages + ",verify"}
        if not args.skip_first_run:
            first_data = {**data, "stages": stages}
            gpgkey = (workdir / "stable" / "gpgkey").read_text()
            results["first_provisioning"] = bench_first_provisioning(image, first_data, url, gpgkey)
        for count in (int(n) for n in args.nodes.split(",")):
            results["fleets"].append(bench_fleet(image, count, data, args.repeat, args.verbose))

    print(f"\nmachine: {results['machine']}\nstages: {stages} (+verify)\n")
    header = ("nodes", "no-op wall s", "no-op CPU s", "peak MB", "cmds/node", "verify wall s", "first run s")
    print("  ".join(f"{name:>13}" for name in header))
    for fleet in results["fleets"]:
        row = (fleet["nodes"], f"{fleet['noop_wall_s']:.2f}", f"{fleet['noop_cpu_s']:.2f}",
               f"{fleet['noop_peak_mb']:.0f}", f"{fleet['noop_remote_commands_per_node']:.0f}",
               f"{fleet['verify_wall_s']:.2f}", f"{fleet['first_run_wall_s']:.1f}")
        print("  ".join(f"{value:>13}" for value in row))
    if "first_provisioning" in results:
        first = results["first_provisioning"]
        print(f"\nfirst provisioning of {stages}: {first['tool_first_run_s']:.1f} s vs bare package installs "
              f"{first['bare_install_s']:.1f} s: ratio {first['overhead_ratio']:.2f}")
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
