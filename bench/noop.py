"""
The no-op re-run on one node against pyinfra's own floor, paired.

A node container (the e2e tests' image and flags) is provisioned with the stages kernel, toolkit,
runtimes and verify; then, alternating A B A B, (A) the same `pyinfra -y @docker/<id>
deploy/gpu_node.py` run that now changes nothing, and (B) `pyinfra -y @docker/<id> exec -- true`,
the least a pyinfra run against that node costs. Each run's wall time and its process tree's CPU
(user + system, from wait4) are taken, and the ratio A/B per pair. Also the import time of the
deploy's modules (`python -X importtime`). Asserts nothing; prints figures (docs/benchmark.md).
With ``--package``, (A) is a site's own deploy file calling the package's ``provision_gpu_node()``
(the checkout's package on PYTHONPATH, as an installed gpu_node is imported) instead of the entry file.

    .venv/bin/python bench/noop.py --runs 7 [--package]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import toolkit_repo  # noqa: E402
from harness import SAFE_DATA, Node, ensure_docker, node_image  # noqa: E402

STAGES = "kernel,toolkit,runtimes,verify"


# As a user's runs go: Python writes the deploy's bytecode on the first and loads it after (an
# environment that says not to write it would make every run compile the whole deploy again).
RUN_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
# --package: a site's own deploy file, the package imported as an installed one would be
SITE_DEPLOY = "import deploy\n\ndeploy.provision_gpu_node()\n"


def timed(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the process tree, exit code)."""
    start = time.monotonic()
    process = subprocess.Popen(args, cwd=REPO, env=RUN_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def import_times() -> list[tuple[str, float]]:
    """Cumulative import time (ms) of each deploy module the no-op loads before it reads the node (the
    entry file's module and the reads of the bench's stages), largest first."""
    code = (
        "import sys; sys.path.insert(0, '.'); import pyinfra.api; from deploy import load; load('.entry'); "
        "from deploy.settings import parse_settings; from deploy.stages import steps_for; "
        "from deploy.tasks.preflight import step_reads; "
        f"step_reads(settings := parse_settings({{'stages': {STAGES!r}}}), steps_for(settings))"
    )
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the import-time read failed: {result.stderr.strip().splitlines()[-1:]}")
    times = []
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s+(\S.*)$", line)
        if match and match[2].strip().startswith("deploy."):
            times.append((match[2].strip(), int(match[1]) / 1000))
    return sorted(times, key=lambda item: -item[1])


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="pairs to time (default 7)")
    parser.add_argument(
        "--package",
        action="store_true",
        help="time a site's deploy file calling provision_gpu_node() instead of deploy/gpu_node.py",
    )
    args = parser.parse_args()

    ensure_docker()
    node = Node(image=node_image()).start()
    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-noop-"))
    try:
        with toolkit_repo.served(workdir / "stable") as repo:
            data = {
                **SAFE_DATA,
                **repo.data(),
                "stages": STAGES,
                "fleet_report_path": str(workdir / "fleet.json"),
                "verify_report_path": str(workdir / "verify.json"),
            }
            entry = "deploy/gpu_node.py"
            if args.package:
                entry = str(workdir / "site_deploy.py")
                Path(entry).write_text(SITE_DEPLOY)
                RUN_ENV["PYTHONPATH"] = str(REPO)
            deploy = [sys.executable, "-m", "pyinfra", "-y", node.target, entry]
            for key, value in data.items():
                deploy += ["--data", f"{key}={value}"]
            floor = [sys.executable, "-m", "pyinfra", "-y", node.target, "exec", "--", "true"]
            # provisioning is not timed: its output is kept, to name what failed
            first = subprocess.run(deploy, cwd=REPO, env=RUN_ENV, capture_output=True, text=True)
            if first.returncode != 0:
                lines = [
                    line.strip()
                    for line in (first.stdout + first.stderr).splitlines()
                    if "gpu-node:" in line or "rror" in line
                ]
                print(
                    f"provisioning failed (exit {first.returncode}): {' '.join(deploy)}\n" + "\n".join(lines[-10:]),
                    file=sys.stderr,
                )
                return 1
            timed(deploy)  # warm-up: the no-op itself, once
            pairs = []
            for _ in range(args.runs):
                noop, base = timed(deploy), timed(floor)
                if noop[2] != 0 or base[2] != 0:
                    print(f"a run failed: no-op exit {noop[2]}, floor exit {base[2]}", file=sys.stderr)
                    return 1
                pairs.append((noop, base))
    finally:
        node.remove()

    called = "a site's deploy file calling provision_gpu_node()" if args.package else "deploy/gpu_node.py"
    print(
        f"machine: {os.cpu_count()} cores; {args.runs} pairs, alternating; stages {STAGES}; {called}; "
        f"toolkit: {repo.why}"
    )
    print(f"no-op   wall  {summary([a[0] for a, _ in pairs])}")
    print(f"no-op   cpu   {summary([a[1] for a, _ in pairs])}")
    print(f"floor   wall  {summary([b[0] for _, b in pairs])}")
    print(f"floor   cpu   {summary([b[1] for _, b in pairs])}")
    print(f"ratio   wall  {summary([a[0] / b[0] for a, b in pairs])}")
    print(f"ratio   cpu   {summary([a[1] / b[1] for a, b in pairs])}")
    print("import time of the deploy's modules (cumulative ms, top 8):")
    for name, ms in import_times()[:8]:
        print(f"  {ms:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
