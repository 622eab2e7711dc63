"""
The node's health check: what one run costs the node (docs/benchmark.md, docs/health.md). A node
container with the PCI fixture of two H100 PCIe and the STAND-IN nvidia.ko (as
tests/e2e/test_without_controller_e2e.py has them), a STAND-IN nvidia-smi answering for both GPUs
(tests/standin_nvidia_smi.py: a shell script, far cheaper than the real one, whose own cost on a
GPU node is NVML's and not measured here), and the health archive as the deploy writes it. Inside
the node, the check is run ``--runs`` times as its timer runs it, each run's CPU (user + system, its
whole process tree: python3, journalctl, nvidia-smi, modinfo, systemctl) and wall time read by the
parent from the kernel's accounting of its children; first with a quiet kernel log, then with
5000 STAND-IN kernel entries (a run's bound) written since the last run by systemd-journal-remote
into the node's own journal. ``python3 -I -c pass`` is the floor.

Asserts nothing; prints the figures and the load average.

    .venv/bin/python bench/health_check.py --runs 20
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import pci_tree  # noqa: E402
import standin_kmod  # noqa: E402
import standin_nvidia_smi  # noqa: E402
from harness import Node, ensure_docker, node_image, run  # noqa: E402

from deploy.tasks import archives  # noqa: E402

# Run inside the node: each command ``runs`` times, its CPU and wall time from wait4's accounting.
MEASURE = """
import json, os, statistics, subprocess, sys, time
args, runs = json.loads(sys.argv[1]), int(sys.argv[2])
cpu, wall = [], []
for _ in range(runs):
    start = time.monotonic()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall.append(time.monotonic() - start)
    cpu.append(usage.ru_utime + usage.ru_stime)
print(json.dumps({"cpu": statistics.median(cpu), "cpu_max": max(cpu), "wall": statistics.median(wall),
                  "exit": os.waitstatus_to_exitcode(status)}))
"""
# 5000 kernel entries of this boot, one an Xid, into the node's own journal (never the machine's log)
ENTRIES = r"""
machine=$(cat /etc/machine-id); boot=$(tr -d - < /proc/sys/kernel/random/boot_id)
since_boot=$(cut -d ' ' -f 1 /proc/uptime | tr -d .)0000; now=$(date +%s%6N)
i=0
while [ $i -lt 5000 ]; do
  printf '__REALTIME_TIMESTAMP=%s\n__MONOTONIC_TIMESTAMP=%s\n_BOOT_ID=%s\n_MACHINE_ID=%s\n_TRANSPORT=kernel\nMESSAGE=stand-in kernel line %s\n\n' \
    $((now + i)) $((since_boot + i)) "$boot" "$machine" $i
  i=$((i + 1))
done | /lib/systemd/systemd-journal-remote -o "/var/log/journal/$machine/bench-$1.journal" - 2>/dev/null
"""


def measure(node: Node, args: list[str], runs: int) -> dict:
    out = run(["docker", "exec", node.id, "python3", "-c", MEASURE, json.dumps(args), str(runs)]).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each measurement")
    args = parser.parse_args()
    ensure_docker()
    with tempfile.TemporaryDirectory(prefix="gpu-node-bench-") as folder:
        tree = pci_tree.write(pci_tree.load("pcie-only"), Path(folder) / "pci" / "devices")
        for path in [Path(folder) / "pci", *(Path(folder) / "pci").rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        node = Node(image=node_image(), extra_run_args=["-v", f"{tree}:/sys/bus/pci/devices:ro"]).start()
        try:
            node.sh(
                "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                "apt-get install -y -qq systemd-journal-remote >/dev/null",
                timeout=900,
            )
            modules = f"/lib/modules/{os.uname().release}"
            node.sh(f"mkdir -p {modules}/updates/dkms && printf 'updates/dkms/nvidia.ko:\\n' >> {modules}/modules.dep")
            run(
                ["docker", "exec", "-i", node.id, "sh", "-c", f"cat > {modules}/updates/dkms/nvidia.ko"],
                input=standin_kmod.nvidia_module(standin_kmod.PROPRIETARY_LICENSE, "535.261.03"),
                text=False,
            )
            smi = standin_nvidia_smi.script(
                Path("/run"), gpus=[standin_nvidia_smi.StandInGpu(pci) for pci in ("0000:17:00.0", "0000:ca:00.0")]
            )
            node.write("/usr/local/bin/nvidia-smi", smi, mode="755")
            run(
                [
                    "docker",
                    "exec",
                    "-i",
                    node.id,
                    "sh",
                    "-c",
                    f"mkdir -p /usr/lib/gpu-node && cat > {archives.HEALTH.path}",
                ],
                input=archives.HEALTH.content(),
                text=False,
            )
            check = ["python3", "-I", archives.HEALTH.path]
            measure(node, check, 1)  # the first run reads this boot's kernel log from its start
            load = Path("/proc/loadavg").read_text().split()[0]
            floor = measure(node, ["python3", "-I", "-c", "pass"], args.runs)
            quiet = measure(node, check, args.runs)
            busy = []
            for index in range(3):
                node.sh(f"sh -c {shlex.quote(ENTRIES)} bench {index}")
                busy.append(measure(node, check, 1))
            report = json.loads(node.read("/var/lib/gpu-node/health.json"))
            print(
                f"health check on a node container (load {load}), {args.runs} runs; status {report['status']}, "
                f"{len(report['gpus'])} GPUs"
            )
            print("| run | CPU s (median) | CPU s (max) | wall s (median) |")
            print("|---|---:|---:|---:|")
            print(
                f"| python3 -I -c pass (the floor) | {floor['cpu']:.3f} | {floor['cpu_max']:.3f} | {floor['wall']:.3f} |"
            )
            print(
                f"| the check, quiet kernel log | {quiet['cpu']:.3f} | {quiet['cpu_max']:.3f} | {quiet['wall']:.3f} |"
            )
            print(
                f"| the check after 5000 new kernel entries (3 runs) | {sorted(r['cpu'] for r in busy)[1]:.3f} | "
                f"{max(r['cpu'] for r in busy):.3f} | {sorted(r['wall'] for r in busy)[1]:.3f} |"
            )
        finally:
            node.remove()


if __name__ == "__main__":
    main()
