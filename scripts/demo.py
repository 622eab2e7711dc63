"""
The embedded default target: provision a throwaway bookworm node container end to end, run the
deploy again to show it changes nothing, and print what the node looks like.

The NVIDIA driver is Debian's real package. NVIDIA's toolkit repository is not reachable without
internet access and no package registry ships the toolkit, so the demo serves a local signed
repository on 127.0.0.1 (tests/toolkit_repo.py) and points the deploy at it: NVIDIA's own debs
when env GPU_NODE_LAB holds them (docs/lab.md), else the project's STAND-IN packages. One line of
the output says which and why. Everything else is the real deploy, run by pyinfra's CLI.
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
from harness import DeployResult, Node, node_image  # noqa: E402


def rerun_changes_nothing(command: list[str]) -> int:
    """Run the same deploy again and say whether it changed anything (it must not)."""
    print("==> The same run again: a converged node changes nothing", flush=True)
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    print(again.stdout + again.stderr, end="", flush=True)
    changed = DeployResult(again.returncode, again.stdout, again.stderr, command).changed_operations()
    if again.returncode != 0:
        return again.returncode
    if changed:
        print(f"==> The second run changed {len(changed)} operation(s): {', '.join(changed)}", flush=True)
        return 1
    print("==> The second run changed nothing", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the node container(s) running")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the cluster demo: a lab Kubernetes cluster with two mock GPU nodes, gpu_node.py then k8s_gpu.py",
    )
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra settings for the deploy, as pyinfra's --data (repeatable)",
    )
    args = parser.parse_args()
    if args.cluster:
        import cluster_demo

        return cluster_demo.main(keep=args.keep, extra_data=args.data)

    workdir = Path(tempfile.mkdtemp(prefix="gpu-node-demo-"))
    print("==> Building (or reusing) the bookworm systemd node image", flush=True)
    node = Node(image=node_image(), share_apt_cache=False)
    print("==> Starting a throwaway node container", flush=True)
    node.start()
    print(f"    node: {node.target}", flush=True)
    try:
        with toolkit_repo.served(workdir / "stable") as repo:
            print(f"==> Toolkit: {repo.why}; served at {repo.url}", flush=True)
            data = {
                **repo.data(),
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
            if returncode == 0:
                returncode = rerun_changes_nothing(command)
        print("==> What the node looks like now", flush=True)
        node_summary = node.sh(
            "for f in /etc/modules-load.d/gpu-node-kubernetes.conf /etc/sysctl.d/99-gpu-node-kubernetes.conf; do "
            'echo "--- $f"; cat "$f" 2>/dev/null; done; '
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
