"""
The lab cluster the e2e tests and the cluster demo use: a control plane on 127.0.0.1 and GPU node
containers provisioned by ``deploy/gpu_node.py`` itself (the REAL toolkit 1.20.0 from the local
signed repository of ``tests/toolkit_repo.py``), joined as kubelets, with NVIDIA's mock NVML on
them (``lab/nvml_mock.py``: its library as each node's driver root, a100 profile: 8 GPUs per node).

Usage::

    with toolkit_repo.served(root) as repo:
        cluster = LabCluster(image, toolkit_data=repo.data()).start()
        try:
            cluster.pyinfra("deploy/k8s_gpu.py", {"gpu_sharing": "time-slicing"})
        finally:
            cluster.stop()

Everything is removed by id (node containers) or PID (control plane), even when a step fails;
``stop()`` then checks that this machine's own kernel settings the kubelet writes are unchanged.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from harness import REPO, SAFE_DATA, DeployResult, Node, run

from lab import nvml_mock
from lab.control_plane import ControlPlane
from lab.kubelet import KubeletNode, machine_kernel_settings
from lab.nvml_mock import MOCK_DRIVER_ROOT

RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
RUNTIME_DEBUG_LOG = "/var/log/nvidia-container-runtime.log"
# The stages the brief of the lab runs: no driver (no GPU here), never the machine's kernel.
GPU_NODE_DATA = {**SAFE_DATA, "stages": "kernel,toolkit,runtimes,verify", "container_runtimes": "containerd"}


@dataclass
class LabCluster:
    image: str
    toolkit_data: dict
    names: tuple[str, ...] = ("lab-gpu-1", "lab-gpu-2")
    # Kubelet nodes outside the gpu_nodes group: Debian's containerd, no mock, no toolkit.
    plain_names: tuple[str, ...] = ()
    node_data: dict = field(default_factory=dict)
    profile: str = "a100"
    control_plane: ControlPlane | None = None
    nodes: list[KubeletNode] = field(default_factory=list)
    plain_nodes: list[KubeletNode] = field(default_factory=list)
    provisioning: DeployResult | None = None
    timings: dict[str, float] = field(default_factory=dict)
    kernel_before: dict[str, str] = field(default_factory=dict)
    gpu_count: int = 0  # per GPU node, once the mock is laid out

    def start(self) -> LabCluster:
        self.kernel_before = machine_kernel_settings()
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            if not os.environ.get("GPU_NODE_LAB_KEEP"):
                self.stop()
            raise
        self.timings["total_up"] = time.monotonic() - began
        return self

    def _start(self) -> None:
        began = time.monotonic()
        self.control_plane = ControlPlane().start()
        self.timings["control_plane"] = time.monotonic() - began
        containers = []
        for name in self.names:
            node = Node(image=self.image, extra_run_args=["--hostname", name])
            containers.append(node)
            # Tracked before start: a node that fails to boot is removed by id all the same.
            self.nodes.append(KubeletNode(node, name, len(self.nodes) + 1))
            node.start()

        plain = []
        for name in self.plain_names:
            node = Node(image=self.image, extra_run_args=["--hostname", name])
            plain.append(KubeletNode(node, name, len(self.names) + len(plain) + 1))
            self.plain_nodes.append(plain[-1])
            node.start()

        began = time.monotonic()
        self.provisioning = self.run_gpu_node()
        if self.provisioning.returncode != 0:
            raise AssertionError(f"deploy/gpu_node.py failed on the lab nodes:\n{self.provisioning.explain()}")
        self.timings["gpu_node_provisioning"] = time.monotonic() - began

        began = time.monotonic()
        for kubelet in self.nodes:
            self.gpu_count = nvml_mock.install(kubelet.node, self.profile)
        self.timings["nvml_mock"] = time.monotonic() - began

        began = time.monotonic()
        for kubelet in self.nodes:
            self.point_runtime_at_mock(kubelet.node)
            kubelet.join(self.control_plane, images=("pause", "device-plugin"))
        for kubelet in plain:
            kubelet.sh(
                "DEBIAN_FRONTEND=noninteractive apt-get install -y -q containerd >/dev/null 2>&1 || "
                "{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "
                "apt-get install -y -q containerd >/dev/null; }",
                timeout=600,
            )
            kubelet.join(self.control_plane, images=("pause",))
        self.timings["kubelet_join"] = time.monotonic() - began

    @staticmethod
    def point_runtime_at_mock(node: Node) -> None:
        """
        LAB CHANGE on each node, after the toolkit stage, with NVIDIA's own ``nvidia-ctk config``:
        the runtime's driver root is the mock's (``nvidia-container-cli.root``), so containers that
        ask for GPUs get the mock's devices and library; and its debug log records each call.
        """
        node.sh(
            f"nvidia-ctk config --config-file={RUNTIME_CONFIG} --in-place "
            f"--set nvidia-container-cli.root={MOCK_DRIVER_ROOT} "
            f"--set nvidia-container-runtime.debug={RUNTIME_DEBUG_LOG} "
            "--set nvidia-container-runtime.log-level=debug"
        )

    def inventory_env(self, control_plane: str = "@local") -> dict[str, str]:
        """The project's inventory.py, fed through its environment variables, and the lab's kubectl."""
        env = self.control_plane.env() if self.control_plane else dict(os.environ)
        env.update(
            {
                "GPU_NODES": ",".join(kubelet.node.target for kubelet in self.nodes),
                "CONTROL_PLANE": control_plane,
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def pyinfra(
        self,
        deploy_file: str,
        data: dict | None = None,
        *,
        yes: bool = True,
        json_output: bool = True,
        limit: str | None = None,
        timeout: float = 900,
    ) -> DeployResult:
        """
        ``pyinfra [-y] [--json] inventory.py DEPLOY --data ...`` as a user runs it, with this lab's hosts
        (GPU nodes ``@docker/<id>``, the control plane ``@local`` with the lab's kubectl on PATH and its
        admin kubeconfig). Without ``yes`` (pyinfra's default mode: it shows the detected changes and
        waits for Enter), Enter is pressed on stdin and the output is pyinfra's text (``--json`` there
        prints the plan only).
        """
        args = [sys.executable, "-m", "pyinfra"]
        if yes:
            args.append("-y")
        if json_output and yes:
            args.append("--json")
        if limit:
            args += ["--limit", limit]
        args += ["inventory.py", deploy_file]
        merged = {**SAFE_DATA, "kubeconfig": str(self.control_plane.kubeconfig), **(data or {})}
        for key, value in merged.items():
            args += ["--data", f"{key}={value}"]
        result = run(
            args, check=False, cwd=REPO, env=self.inventory_env(), timeout=timeout, input=None if yes else "\n"
        )
        return DeployResult(result.returncode, result.stdout, result.stderr, args)

    def run_gpu_node(self, data: dict | None = None, **kwargs) -> DeployResult:
        return self.pyinfra(
            "deploy/gpu_node.py",
            {**GPU_NODE_DATA, **self.toolkit_data, **self.node_data, **(data or {})},
            limit="gpu_nodes",
            **kwargs,
        )

    def node(self, name: str) -> KubeletNode:
        return next(kubelet for kubelet in self.nodes if kubelet.name == name)

    def stop(self) -> None:
        """Remove the node containers (by id) and stop the control plane (by PID); check the kernel."""
        for kubelet in [*self.nodes, *self.plain_nodes]:
            kubelet.node.remove()
        self.nodes, self.plain_nodes = [], []
        if self.control_plane:
            self.control_plane.remove()
            self.control_plane = None
        if self.kernel_before:
            after = machine_kernel_settings()
            if after != self.kernel_before:
                raise AssertionError(f"this machine's kernel settings changed: {self.kernel_before} -> {after}")
