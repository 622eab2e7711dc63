"""
The embedded default target: provision a throwaway bookworm node container end to end.

NVIDIA's toolkit repository is unreachable from machines without internet access, so the
demo serves the tests' local signed repository on 127.0.0.1 and points the deploy at it: the
REAL NVIDIA Container Toolkit 1.20.0 debs from the test lab (env GPU_NODE_LAB, default
../shared/lab), with libnvidia-container1/-tools as STAND-INS (not built in the lab; say so
loudly). Everything else is the real deploy, run by pyinfra's CLI.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import toolkit_repo  # noqa: E402
from harness import Node, node_image  # noqa: E402
from lab import LabMissing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the node container(s) running")
    parser.add_argument(
        "--cluster", action="store_true",
        help="the cluster demo: a lab Kubernetes cluster with two mock GPU nodes, gpu_node.py then k8s_gpu.py",
    )
    parser.add_argument(
        "--data", action="append", default=[], metavar="KEY=VALUE",
        help="extra settings for the deploy, as pyinfra's --data (repeatable)",
    )
    args = parser.parse_args()
    if args.cluster:
        import cluster_demo

        return cluster_demo.main(keep=args.keep, extra_data=args.data)

    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-demo-"))
    try:
        repo = toolkit_repo.build_repo(workdir / "stable")
    except LabMissing as missing:
        print(f"demo: {missing}", file=sys.stderr)
        return 2

    print("==> Building (or reusing) the bookworm systemd node image", flush=True)
    node = Node(image=node_image(), share_apt_cache=False)
    print("==> Starting a throwaway node container", flush=True)
    node.start()
    print(f"    node: {node.target}", flush=True)
    try:
        with toolkit_repo.serve(workdir / "stable") as url:
            print(f"==> Serving NVIDIA Container Toolkit {repo.version} (the real debs from the test lab) at {url}",
                  flush=True)
            print("    (NVIDIA's repository is not reachable here; libnvidia-container1 and libnvidia-container-tools")
            print("     are STAND-INS in it: libnvidia-container was not built in the lab)")
            data = {
                **toolkit_repo.deploy_data(url),
                "kernel_modules_load": "false",  # a container shares this machine's kernel
                "reboot_allowed": "false",
            }
            for item in args.data:
                key, _, value = item.partition("=")
                data[key] = value
            command = [sys.executable, "-m", "pyinfra", "-y", node.target, "deploy/gpu_node.py"]
            for key, value in data.items():
                command += ["--data", f"{key}={value}"]
            print("==> " + " ".join(command), flush=True)
            returncode = subprocess.run(command, cwd=REPO).returncode
        print("==> What the node looks like now", flush=True)
        node_summary = node.sh(
            "for f in /etc/modules-load.d/gpu-node-kubernetes.conf /etc/sysctl.d/99-gpu-node-kubernetes.conf; do "
            "echo \"--- $f\"; cat \"$f\" 2>/dev/null; done; "
            "echo '--- packages'; dpkg-query -W -f '${Package} ${Version} ${Status}\\n' "
            "nvidia-driver nvidia-container-toolkit containerd docker.io 2>/dev/null | grep ' installed$' || true; "
            "echo '--- held'; apt-mark showhold; "
            "echo '--- containerd'; systemctl is-active containerd 2>/dev/null || true",
            check=False,
        ).stdout
        print(node_summary)
        return returncode
    finally:
        if args.keep:
            print(f"==> Node left running: docker rm -f -v {node.id}")
        else:
            node.remove()
            print("==> Node removed")


if __name__ == "__main__":
    sys.exit(main())
