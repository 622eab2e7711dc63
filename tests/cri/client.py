"""
A small CRI client for tests: the calls the kubelet makes to start a pod sandbox and a
container in it, over the node's containerd socket (grpc, stubs from tests/cri/proto.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc

from cri.proto import stubs


@dataclass
class Sandbox:
    id: str
    config: object


class CriClient:
    def __init__(self, socket_path: str, timeout: float = 60):
        self.pb, grpc_stubs = stubs()
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.runtime = grpc_stubs.RuntimeServiceStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def version(self) -> object:
        return self.runtime.Version(self.pb.VersionRequest(version="v1"), timeout=self.timeout)

    def run_host_network_sandbox(
        self, name: str, uid: str, handler: str, log_directory: str, cgroup_parent: str = "gpunodeverify.slice"
    ) -> Sandbox:
        """cgroup_parent: a slice, as the kubelet passes with the systemd cgroup driver."""
        pb = self.pb
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="kube-system", attempt=0),
            log_directory=log_directory,
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NamespaceMode.NODE)
                )
            ),
        )
        reply = self.runtime.RunPodSandbox(
            pb.RunPodSandboxRequest(config=config, runtime_handler=handler), timeout=self.timeout
        )
        return Sandbox(reply.pod_sandbox_id, config)

    def sandbox_status(self, sandbox: Sandbox) -> object:
        return self.runtime.PodSandboxStatus(
            self.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id), timeout=self.timeout
        ).status

    def run_container(self, sandbox: Sandbox, name: str, image: str, command: list[str]) -> str:
        pb = self.pb
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            image=pb.ImageSpec(image=image),
            command=command,
            log_path=f"{name}.log",
        )
        created = self.runtime.CreateContainer(
            pb.CreateContainerRequest(pod_sandbox_id=sandbox.id, config=config, sandbox_config=sandbox.config),
            timeout=self.timeout,
        )
        self.runtime.StartContainer(pb.StartContainerRequest(container_id=created.container_id), timeout=self.timeout)
        return created.container_id

    def wait_exited(self, container_id: str, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.runtime.ContainerStatus(
                self.pb.ContainerStatusRequest(container_id=container_id), timeout=self.timeout
            ).status
            if status.state == self.pb.ContainerState.CONTAINER_EXITED:
                return status.exit_code
            time.sleep(0.5)
        raise AssertionError(f"container {container_id} did not exit within {timeout} s")

    def remove_container(self, container_id: str) -> None:
        self.runtime.RemoveContainer(self.pb.RemoveContainerRequest(container_id=container_id), timeout=self.timeout)

    def remove_sandbox(self, sandbox: Sandbox) -> None:
        self.runtime.StopPodSandbox(self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=self.timeout)
        self.runtime.RemovePodSandbox(self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=self.timeout)

    def sandbox_ids(self) -> list[str]:
        return [item.id for item in self.runtime.ListPodSandbox(self.pb.ListPodSandboxRequest(), timeout=self.timeout).items]
