"""
Nodes without a controller, two figures (docs/benchmark.md, docs/without-controller.md):

1. the first-boot unit on a converged node: a node container with the PCI fixture of two H100 PCIe
   and the STAND-IN nvidia.ko (as tests/e2e/test_without_controller_e2e.py has them), provisioned
   with the kernel and driver stages (no driver installed); then ``gpu-node-boot.service`` started
   again ``--runs`` times, each run's wall time from systemd's own ExecMainStart to ExecMainExit
   stamps;
2. a bake against the same steps on a live node: the node image with Debian's containerd installed
   (apt, no systemd running), exported to a folder and baked with ``pyinfra -y @chroot/<root>``;
   a fresh node container with the same containerd provisioned with ``pyinfra -y @docker/<id>``;
   the stages kernel, driver (no driver installed) and runtimes, then each again (the no-op). The
   CPU is pyinfra's process tree: for a bake that includes the commands it runs (chroot's children),
   for a live node not (they run in the container).

Asserts nothing; prints the figures and the load average at each start.

    .venv/bin/python bench/without_controller.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import pci_tree  # noqa: E402
import standin_kmod  # noqa: E402
from harness import SAFE_DATA, Node, ensure_docker, node_image, run  # noqa: E402

DATA = {
    **SAFE_DATA,
    "stages": "kernel,driver,runtimes",
    "nvidia_driver_install": "false",
    "container_runtimes": "containerd",
}
INSTALL_CONTAINERD = (
    "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
    "apt-get install -y -qq containerd >/dev/null"
)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def timed_run(target: str, data: dict, report: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the pyinfra process tree, exit code) of one run."""
    args = [
        sys.executable,
        "-m",
        "pyinfra",
        "-y",
        target,
        "deploy/gpu_node.py",
        "--data",
        f"fleet_report_path={report}",
    ]
    for key, value in data.items():
        args += ["--data", f"{key}={value}"]
    start = time.monotonic()
    process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    return time.monotonic() - start, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def first_boot_unit(image: str, runs: int, folder: Path) -> None:
    tree = pci_tree.write(pci_tree.load("pcie-only"), folder / "pci" / "devices")
    for path in [folder / "pci", *(folder / "pci").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    node = Node(image=image, extra_run_args=["-v", f"{tree}:/sys/bus/pci/devices:ro"]).start()
    try:
        modules = f"/lib/modules/{os.uname().release}"
        node.sh(f"mkdir -p {modules}/updates/dkms && printf 'updates/dkms/nvidia.ko:\\n' >> {modules}/modules.dep")
        run(
            ["docker", "exec", "-i", node.id, "sh", "-c", f"cat > {modules}/updates/dkms/nvidia.ko"],
            input=standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, "535.261.03"),
            text=False,
        )
        wall, _, code = timed_run(node.target, {**DATA, "stages": "kernel,driver"}, folder / "fleet.json")
        print(f"provisioned (kernel, driver: the first-boot unit) in {wall:.1f} s, exit {code}")
        walls, loads = [], []
        for _ in range(runs):
            loads.append(load())
            # reset-failed: systemd refuses a sixth start within 10 s (its start limit)
            node.sh("systemctl reset-failed gpu-node-boot.service; systemctl restart gpu-node-boot.service")
            shown = dict(
                line.split("=", 1)
                for line in node.sh(
                    "systemctl show gpu-node-boot.service -p ExecMainStartTimestampMonotonic "
                    "-p ExecMainExitTimestampMonotonic -p Result"
                ).stdout.splitlines()
            )
            walls.append(
                (int(shown["ExecMainExitTimestampMonotonic"]) - int(shown["ExecMainStartTimestampMonotonic"])) / 1e6
            )
        print(
            f"first-boot unit on a converged node, {runs} runs: wall s median {statistics.median(walls):.2f}, "
            f"min {min(walls):.2f}, max {max(walls):.2f}; "
            f"result {shown['Result']}; load (1 min) at the starts {min(loads)} to {max(loads)}"
        )
    finally:
        node.remove()


def bake_against_live(image: str, folder: Path) -> None:
    builder = Node(image=image, init=("sleep", "infinity")).start()
    root = folder / "root"
    root.mkdir()
    try:
        builder.sh(INSTALL_CONTAINERD, timeout=900)
        run(["sh", "-c", f"docker export {builder.id} | tar -C {root} -x"], timeout=600)
    finally:
        builder.remove()
    live = Node(image=image).start()
    try:
        live.sh(INSTALL_CONTAINERD, timeout=900)
        rows = []
        for name, target in (("bake (@chroot, image root)", f"@chroot/{root}"), ("live node (@docker)", live.target)):
            for run_name in ("first run", "no-op re-run"):
                at = load()
                wall, cpu, code = timed_run(target, DATA, folder / "fleet.json")
                rows.append((name, run_name, wall, cpu, code, at))
        print("| run | | wall s | controller CPU s | exit | load (1 min) at start |")
        print("|---|---|---:|---:|---:|---:|")
        for name, run_name, wall, cpu, code, at in rows:
            print(f"| {name} | {run_name} | {wall:.2f} | {cpu:.2f} | {code} | {at} |")
    finally:
        live.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of the first-boot unit")
    args = parser.parse_args()
    ensure_docker()
    image = node_image()
    with tempfile.TemporaryDirectory(prefix="gpu-node-bench-") as folder:
        first_boot_unit(image, args.runs, Path(folder))
        bake_against_live(image, Path(folder))


if __name__ == "__main__":
    main()
