"""
Join a node container (the project's systemd node image, ``tests/harness.py`` run flags, containerd
running) to the lab control plane as a kubelet.

What the kubelet needs in a node container on this machine, all done inside the node:
- containerd's CRI socket, the lab's pause image as containerd's sandbox image, the lab's images
  imported with ``ctr -n k8s.io images import``;
- a pod network that creates nothing in this machine's network namespace: the lab's own CNI plugin
  (``LAB_CNI_PLUGIN``) makes a veth pair with both ends inside the pod's own network namespace and
  gives ``eth0`` an address, and the real ``loopback`` plugin brings ``lo`` up. (The CNI ``dummy``
  plugin would do, but this machine's kernel has no dummy link type: "operation not supported".)
  In-cluster clients reach the API server as every pod is told to, through the ``kubernetes``
  Service (10.96.0.1:443): the plugin starts a small forwarder (``LAB_SERVICE_PROXY``, what
  kube-proxy's old userspace mode did) listening on 10.96.0.1:443 inside the pod's namespace and
  connecting to the API server on 127.0.0.1. So the manifests users get run unchanged;
- cgroup v1 with the host's cgroup namespace: the kubelet looks for ``kubepods.slice`` at the root of
  each hierarchy while the node's systemd creates it under ``/docker/<id>/``. After checking that the
  node's cgroup mounts are private (nothing propagates to this machine), the node's own cgroup is
  bind-mounted over each hierarchy's root, and again at ``<root>/docker/<id>`` (as kind does);
- the six kernel settings the kubelet writes: ``/proc/sys`` stays read-only (it is this machine's
  kernel); small regular files are bind-mounted over those entries inside the node;
- ``cgroupDriver: systemd``, ``failSwapOn: false``, ``makeIPTablesUtilChains: false``, its ports on
  127.0.0.1, distinct per node.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tomlkit
from harness import Node, run, wait_for

from lab import assets
from lab.control_plane import LOOPBACK, ControlPlane, free_port

# The kernel settings the kubelet writes at start (its defaults with protectKernelDefaults=false).
KUBELET_SYSCTLS = (
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
KUBELET_SYSCTL_FILES = "/run/gpu-node-lab/sysctl"


def machine_kernel_settings() -> dict[str, str]:
    """This machine's own values of the settings the kubelet writes (read from here, not a node)."""
    return {name: Path("/proc/sys", name).read_text().strip() for name in KUBELET_SYSCTLS}


CGROUP_SCRIPT = r"""
set -eu
container_id=$1
not_private=$(findmnt -rn -R -o TARGET,PROPAGATION /sys/fs/cgroup | awk '$2 != "private"')
if [ -n "$not_private" ]; then echo "refusing: mounts not private: $not_private" >&2; exit 3; fi
for mountpoint in $(findmnt -rn -t cgroup -o TARGET); do
  own="$mountpoint/docker/$container_id"
  if findmnt -rn --mountpoint "$own" >/dev/null || [ ! -d "$own" ]; then continue; fi
  mount --bind "$own" "$mountpoint"
  mkdir -p "$own"
  mount --bind "$mountpoint" "$own"
done
"""

SYSCTL_SCRIPT = r"""
set -eu
grep -q ' /proc/sys [^ ]* ro[, ]' /proc/mounts || { echo "refusing: /proc/sys is not read-only" >&2; exit 3; }
mkdir -p __DIR__
for entry in __ENTRIES__; do
  file=__DIR__/$(echo "$entry" | tr / .)
  if [ ! -f "$file" ]; then cat "/proc/sys/$entry" > "$file"; fi
  if ! findmnt -n "/proc/sys/$entry" >/dev/null; then mount --bind "$file" "/proc/sys/$entry"; fi
done
grep -q ' /proc/sys [^ ]* ro[, ]' /proc/mounts
"""

KUBELET_UNIT = """\
[Unit]
Description=kubelet (gpu-node lab)
After=containerd.service
Wants=containerd.service

[Service]
ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/config.yaml \\
  --kubeconfig=/etc/kubernetes/kubelet.conf --hostname-override={name} --v=2
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
"""


def kubelet_config(port: int, healthz_port: int, more: dict | None = None) -> str:
    """The KubeletConfiguration; ``more``: what a release needs besides (tests/lab/dra.py)."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": LOOPBACK,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": healthz_port,
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "cgroupDriver": "systemd",
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": False,
        "staticPodPath": "/etc/kubernetes/manifests",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
        },
        "authorization": {"mode": "AlwaysAllow"},
        # The machine's disk is shared with other work: never evict or taint for it.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        **(more or {}),
    }
    return json.dumps(config, indent=2) + "\n"


# The lab's "kube-proxy" for the kubernetes Service only: listens inside a pod's network namespace,
# connects from the node's (this machine's loopback), forwards bytes both ways.
LAB_SERVICE_PROXY = r"""
import ctypes, os, socket, sys, threading
CLONE_NEWNET = 0x40000000
netns, listen_ip, listen_port, target_host, target_port = sys.argv[1:6]
libc = ctypes.CDLL(None, use_errno=True)
own = os.open("/proc/self/ns/net", os.O_RDONLY)
pod = os.open(netns, os.O_RDONLY)
if libc.setns(pod, CLONE_NEWNET) != 0:
    sys.exit("setns into the pod's network namespace failed")
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind((listen_ip, int(listen_port)))
listener.listen(64)
if libc.setns(own, CLONE_NEWNET) != 0:
    sys.exit("setns back failed")
os.close(pod)


def pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    source.close()


while True:
    client, _ = listener.accept()
    try:
        upstream = socket.create_connection((target_host, int(target_port)), timeout=10)
        upstream.settimeout(None)
    except OSError:
        client.close()
        continue
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
"""
SERVICE_IP = "10.96.0.1"

# A CNI plugin (spec 1.0.0) that creates interfaces only inside the pod's network namespace: a veth
# pair whose both ends stay there; eth0 gets the next address of this node's /24.
LAB_CNI_PLUGIN = r"""#!/bin/sh
set -eu
state=/var/lib/gpu-node-lab-cni
config=$(cat)
case "${CNI_COMMAND:-}" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'; exit 0;;
DEL)
  if [ -f "$state/$CNI_CONTAINERID.proxy" ]; then kill "$(cat "$state/$CNI_CONTAINERID.proxy")" 2>/dev/null || true; fi
  rm -f "$state/$CNI_CONTAINERID" "$state/$CNI_CONTAINERID.proxy"; exit 0;;
CHECK|GC|STATUS) exit 0;;
ADD) ;;
*) echo '{"cniVersion":"1.0.0","code":4,"msg":"unknown CNI_COMMAND"}'; exit 1;;
esac
subnet=$(printf '%s' "$config" | sed -n 's/.*"subnetPrefix": *"\([0-9.]*\)".*/\1/p')
apiserver_port=$(printf '%s' "$config" | sed -n 's/.*"apiServerPort": *\([0-9]*\).*/\1/p')
mkdir -p "$state"
address=$(
  flock 9
  last=$(cat "$state/last" 2>/dev/null || echo 1)
  next=$(( last % 250 + 2 ))
  echo "$next" > "$state/last"
  echo "$subnet.$next"
) 9>"$state/lock"
echo "$address" > "$state/$CNI_CONTAINERID"
nsenter --net="$CNI_NETNS" ip link add "$CNI_IFNAME" type veth peer name lab-peer0
nsenter --net="$CNI_NETNS" ip link set lab-peer0 up
nsenter --net="$CNI_NETNS" ip addr add "$address/24" dev "$CNI_IFNAME"
nsenter --net="$CNI_NETNS" ip link set "$CNI_IFNAME" up
nsenter --net="$CNI_NETNS" ip addr add __SERVICE_IP__/32 dev lab-peer0
setsid python3 /usr/local/lib/gpu-node-lab/service-proxy.py "$CNI_NETNS" __SERVICE_IP__ 443 127.0.0.1 "$apiserver_port" \
  </dev/null >/dev/null 2>&1 &
echo $! > "$state/$CNI_CONTAINERID.proxy"
mac=$(nsenter --net="$CNI_NETNS" ip -o link show "$CNI_IFNAME" | sed -n 's|.*link/ether \([0-9a-f:]*\).*|\1|p')
printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","mac":"%s","sandbox":"%s"}],' "$CNI_IFNAME" "$mac" "$CNI_NETNS"
printf '"ips":[{"address":"%s/24","interface":0}]}\n' "$address"
""".replace("__SERVICE_IP__", SERVICE_IP)


def cni_config(subnet_index: int, apiserver_port: int) -> str:
    return (
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "gpu-node-lab",
                "plugins": [
                    {
                        "type": "gpu-node-lab-netns",
                        "subnetPrefix": f"10.244.{subnet_index}",
                        "apiServerPort": apiserver_port,
                    },
                    {"type": "loopback"},
                ],
            },
            indent=2,
        )
        + "\n"
    )


@dataclass
class KubeletNode:
    """A node container joined as kubelet ``name``; removed with its container (by id)."""

    node: Node
    name: str
    index: int
    port: int = 0
    healthz_port: int = 0
    join_seconds: float = 0.0
    # where its kubelet comes from: the lab's 1.28 release, or another (tests/lab/dra.py)
    kubernetes_binary: Callable[[str], Path] = assets.kubernetes_binary
    kubelet_settings: dict = field(default_factory=dict)  # kubelet_config's ``more``

    def sh(self, script: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return self.node.sh(script, check=check, **kwargs)

    def copy_in(self, source: Path, target: str, mode: str = "755") -> None:
        self.sh(f"mkdir -p {shlex.quote(str(Path(target).parent))}")
        run(["docker", "cp", "-L", str(source), f"{self.node.id}:{target}"])
        self.sh(f"chmod {mode} {shlex.quote(target)}")

    def containerd_config_paths(self) -> dict:
        dumped = self.sh("containerd config dump").stdout
        cri = tomlkit.parse(dumped)["plugins"]["io.containerd.grpc.v1.cri"]
        return {
            "cni_bin": cri["cni"]["bin_dir"],
            "cni_conf": cri["cni"]["conf_dir"],
            "config": "/etc/containerd/config.toml",
        }

    def configure_containerd(self, sandbox_image: str) -> None:
        """
        Lab changes to the node's containerd config.toml (CRI plugin, config version 2): the lab's
        pause image as sandbox image, and ``restrict_oom_score_adj`` (a node container lacks
        CAP_SYS_RESOURCE, so runc cannot lower a sandbox's oom_score_adj below containerd's own).
        """
        path = "/etc/containerd/config.toml"
        text = self.node.read(path) if self.node.exists(path) else "version = 2\n"
        document = tomlkit.parse(text)
        cri = document.setdefault("plugins", tomlkit.table()).setdefault("io.containerd.grpc.v1.cri", tomlkit.table())
        wanted = {"sandbox_image": sandbox_image, "restrict_oom_score_adj": True}
        if all(cri.get(key) == value for key, value in wanted.items()):
            return
        cri.update(wanted)
        self.node.write(path, tomlkit.dumps(document))
        self.sh("systemctl restart containerd")
        wait_for(
            lambda: self.sh("ctr version", check=False).returncode == 0, timeout=60, what="containerd after restart"
        )

    def import_images(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            archive, image = assets.image_archive(key)
            if self.sh(f"ctr -n k8s.io images ls -q | grep -qxF {shlex.quote(image)}", check=False).returncode == 0:
                continue
            with archive.open("rb") as stream:
                result = subprocess.run(
                    ["docker", "exec", "-i", self.node.id, "ctr", "-n", "k8s.io", "images", "import", "-"],
                    stdin=stream,
                    capture_output=True,
                    text=True,
                )
            if result.returncode != 0:
                raise AssertionError(f"ctr images import {archive.name} failed: {result.stderr}")

    def join(
        self, control_plane: ControlPlane, images: tuple[str, ...] = ("pause",), timeout: float = 120
    ) -> KubeletNode:
        began = time.monotonic()
        self.port, self.healthz_port = free_port(), free_port()
        paths = self.containerd_config_paths()
        self.copy_in(self.kubernetes_binary("kubelet"), "/usr/local/bin/kubelet")
        self.copy_in(assets.crictl(), "/usr/local/bin/crictl")
        self.node.write(
            "/etc/crictl.yaml",
            "runtime-endpoint: unix:///run/containerd/containerd.sock\n"
            "image-endpoint: unix:///run/containerd/containerd.sock\n",
        )
        self.copy_in(assets.cni_plugins() / "loopback", f"{paths['cni_bin']}/loopback")
        self.node.write(f"{paths['cni_bin']}/gpu-node-lab-netns", LAB_CNI_PLUGIN, mode="755")
        self.node.write("/usr/local/lib/gpu-node-lab/service-proxy.py", LAB_SERVICE_PROXY)
        if self.sh("command -v ip", check=False).returncode != 0:
            self.sh(
                "DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >/dev/null 2>&1 || "
                "{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "
                "apt-get install -y -q iproute2 >/dev/null; }",
                timeout=300,
            )
        self.node.write(
            f"{paths['cni_conf']}/10-gpu-node-lab.conflist", cni_config(self.index, control_plane.apiserver_port)
        )
        self.configure_containerd(assets.IMAGES["pause"])
        self.import_images(images)

        run(["docker", "exec", self.node.id, "sh", "-c", CGROUP_SCRIPT, "sh", self.node.id])
        script = SYSCTL_SCRIPT.replace("__DIR__", KUBELET_SYSCTL_FILES).replace(
            "__ENTRIES__", " ".join(KUBELET_SYSCTLS)
        )
        self.sh(script)
        # The kubelet's OOM watcher opens /dev/kmsg, which containers do not get (kind links it too).
        self.sh("[ -e /dev/kmsg ] || ln -s $( [ -e /dev/console ] && echo /dev/console || echo /dev/null ) /dev/kmsg")

        self.node.write("/etc/kubernetes/pki/ca.crt", control_plane.pki.ca.read_text())
        self.node.write("/etc/kubernetes/kubelet.conf", control_plane.issue_node_credentials(self.name), mode="600")
        self.node.write(
            "/var/lib/kubelet/config.yaml", kubelet_config(self.port, self.healthz_port, self.kubelet_settings)
        )
        self.node.write("/etc/systemd/system/kubelet.service", KUBELET_UNIT.format(name=self.name))
        self.sh("mkdir -p /etc/kubernetes/manifests && systemctl daemon-reload && systemctl enable --now kubelet")
        try:
            wait_for(lambda: self.ready(control_plane), timeout=timeout, interval=1, what=f"node {self.name} Ready")
        except AssertionError as error:
            raise AssertionError(f"{error}; the kubelet's log:\n{self.kubelet_log()}") from None
        self.join_seconds = time.monotonic() - began
        return self

    def ready(self, control_plane: ControlPlane) -> bool:
        result = control_plane.kubectl(
            "get", "node", self.name, "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False
        )
        # A kubelet that exits (e.g. this machine's inotify instances are exhausted by other
        # containers: "too many open files") is restarted by systemd: keep waiting.
        return result.stdout.strip() == "True"

    def kubelet_log(self, lines: int = 25) -> str:
        return self.sh(
            f"journalctl -u kubelet --no-pager | grep -v 'FLAG:' | grep -E ' [EF][0-9]{{4}} ' | tail -n {lines}",
            check=False,
        ).stdout

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.sh("crictl " + " ".join(shlex.quote(arg) for arg in args), check=check)

    def container_logs(self, pod: str, container: str, namespace: str = "default") -> str:
        """A pod container's log, read with crictl on the node (kubectl logs cannot reach the kubelet)."""
        ids = self.crictl(
            "ps",
            "-a",
            "-q",
            "--label",
            f"io.kubernetes.pod.name={pod}",
            "--label",
            f"io.kubernetes.pod.namespace={namespace}",
            "--label",
            f"io.kubernetes.container.name={container}",
        ).stdout.split()
        if not ids:
            return ""
        result = self.sh(f"crictl logs {shlex.quote(ids[0])} 2>&1", check=False)
        return result.stdout
