"""
A minimal CRI client, run INSIDE a node container with Debian's python3-grpcio: what the kubelet
does to start one container, for a containerd whose `ctr` cannot ask for a CDI device (1.7's
`ctr run` has no CDI flag; its CRI plugin injects CDI devices named in a container's
``CDI_devices``, the field the device plugin's ``cdi-cri`` strategy fills).

The request messages are encoded here by hand (protobuf wire format: varints and length-delimited
fields), with the field numbers of the CRI's runtime.v1 API; only the fields this test needs.

    python3 cri_client.py run SOCKET IMAGE CDI_DEVICE COMMAND...

starts a host-network pod sandbox and, in it, a container of IMAGE running COMMAND with
CDI_DEVICE, waits for it to exit, prints its output, and removes both. Exit code: the
container's; 2 and one line on stderr when the runtime refuses a request.
"""

from __future__ import annotations

import sys
import time
import uuid

SERVICE = "/runtime.v1.RuntimeService/"
NODE_NAMESPACE = 2  # NamespaceMode.NODE: the host's network, so no CNI is needed
EXITED = 2  # ContainerState.CONTAINER_EXITED


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value) -> bytes:
    """One field: int as varint (wire type 0), str/bytes length-delimited (wire type 2)."""
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def fields(message: bytes) -> dict[int, list]:
    """Decode one message's top-level fields (varints as int, length-delimited as bytes)."""
    found: dict[int, list] = {}
    position = 0

    def read_varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            byte = message[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while position < len(message):
        key = read_varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = read_varint()
        elif wire == 2:
            length = read_varint()
            value = message[position : position + length]
            position += length
        elif wire == 1:
            value, position = message[position : position + 8], position + 8
        elif wire == 5:
            value, position = message[position : position + 4], position + 4
        else:
            raise ValueError(f"wire type {wire} not handled")
        found.setdefault(number, []).append(value)
    return found


def sandbox_config(name: str, log_directory: str) -> bytes:
    metadata = field(1, name) + field(2, str(uuid.uuid4())) + field(3, "default") + field(4, 0)
    namespaces = field(1, NODE_NAMESPACE)  # NamespaceOption.network
    # LinuxPodSandboxConfig: cgroup_parent 1 (a slice: the deploy wires runc with the systemd cgroup
    # driver), security_context 2 (its namespace_options 1)
    linux = field(1, "system.slice") + field(2, field(1, namespaces))
    # PodSandboxConfig: metadata 1, log_directory 3, linux 8 (no hostname: the host's UTS namespace)
    return field(1, metadata) + field(3, log_directory) + field(8, linux)


def container_config(name: str, image: str, command: list[str], cdi_device: str, log_path: str) -> bytes:
    # ContainerConfig: metadata 1 (name 1), image 2 (ImageSpec.image 1), command 3, log_path 11,
    # CDI_devices 17 (CDIDevice.name 1)
    return (
        field(1, field(1, name))
        + field(2, field(1, image))
        + b"".join(field(3, part) for part in command)
        + field(11, log_path)
        + field(17, field(1, cdi_device))
    )


class Refused(Exception):
    pass


def run(socket: str, image: str, cdi_device: str, command: list[str]) -> int:
    import grpc

    channel = grpc.insecure_channel(f"unix://{socket}")

    def call(method: str, request: bytes) -> dict[int, list]:
        try:
            reply = channel.unary_unary(SERVICE + method)(request, timeout=120)
        except grpc.RpcError as error:
            raise Refused(f"{method}: {error.details()}") from None
        return fields(reply)

    name = f"cdi-{uuid.uuid4().hex[:8]}"
    log_directory = f"/tmp/{name}"
    config = sandbox_config(name, log_directory)
    sandbox = call("RunPodSandbox", field(1, config))[1][0].decode()
    try:
        created = call(
            "CreateContainer",
            field(1, sandbox)
            + field(2, container_config(name, image, command, cdi_device, "container.log"))
            + field(3, config),
        )
        container = created[1][0].decode()
        call("StartContainer", field(1, container))
        deadline = time.monotonic() + 60
        while True:
            status = fields(call("ContainerStatus", field(1, container))[1][0])
            if status.get(3, [0])[0] == EXITED:
                break
            if time.monotonic() > deadline:
                raise Refused(f"container {container} did not exit in 60 s")
            time.sleep(0.2)
        # The CRI log format: "<time> <stream> <tag> <text>" per line.
        with open(f"{log_directory}/container.log") as log:
            sys.stdout.write("".join(line.split(" ", 3)[3] for line in log))
        return status.get(7, [0])[0]  # ContainerStatus.exit_code
    finally:
        call("StopPodSandbox", field(1, sandbox))
        call("RemovePodSandbox", field(1, sandbox))


if __name__ == "__main__":
    if len(sys.argv) < 6 or sys.argv[1] != "run":
        sys.exit("usage: cri_client.py run SOCKET IMAGE CDI_DEVICE COMMAND...")
    try:
        sys.exit(run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]))
    except Refused as refused:
        print(f"cri_client: {refused}", file=sys.stderr)
        sys.exit(2)
