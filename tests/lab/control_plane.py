"""
A Kubernetes v1.28.7 control plane on 127.0.0.1 only: Debian's etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as local processes, tracked and stopped by PID.

The apiserver runs with ``--endpoint-reconciler-type=none`` (the ``kubernetes`` Endpoints object
may not hold a loopback address); CA, serving certificate, client certificates and the
service-account key pair come from openssl. The controller-manager and scheduler start once
``/readyz`` answers (before that RBAC is not bootstrapped and they exit); Pods can be created
once the ``default`` ServiceAccount exists.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab import assets

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
ADMIN_USER = "gpu-node-lab-admin"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# The API server's audit policy: every write by the admin (the tool's kubectl and the tests'), and every
# update/patch of a Node object (not its status) by anyone, at Metadata level (who, what, which object).
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["{ADMIN_USER}"]
  verbs: {list(WRITE_VERBS)}
- level: Metadata
  verbs: ["update", "patch"]
  resources:
  - group: ""
    resources: ["nodes"]
- level: None
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Pki:
    """A throwaway CA and the certificates the lab needs, made with openssl."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=gpu-node-lab-ca",
            cwd=folder,
        )
        openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def issue(self, name: str, subject: str, server: bool = False) -> tuple[Path, Path]:
        """(certificate, key) signed by the lab CA; ``server``: serving cert for 127.0.0.1/localhost."""
        extensions = self.folder / f"{name}.ext"
        if server:
            extensions.write_text(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth,clientAuth\n"
                "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
            )
        else:
            extensions.write_text(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
            )
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subject,
            cwd=self.folder,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            "-extfile",
            extensions.name,
            cwd=self.folder,
        )
        return self.folder / f"{name}.crt", self.folder / f"{name}.key"


def kubeconfig_text(server: str, ca: Path, cert: Path, key: Path, user: str, embed: bool = False) -> str:
    """A kubeconfig; ``embed``: certificates inline (for copying into a node container)."""
    import base64

    def ref(kind: str, path: Path) -> str:
        if embed:
            return f"{kind}-data: {base64.b64encode(path.read_bytes()).decode()}"
        return f"{kind}: {path}"

    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: lab\n  cluster:\n    server: {server}\n    {ref('certificate-authority', ca)}\n"
        f"users:\n- name: {user}\n  user:\n    {ref('client-certificate', cert)}\n    {ref('client-key', key)}\n"
        f"contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: {user}\ncurrent-context: lab\n"
    )


@dataclass
class ControlPlane:
    """Start with ``start()``, stop with ``stop()`` (by PID; safe to call twice)."""

    workdir: Path = field(default_factory=lambda: assets.scratch_dir("control-plane-"))
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    apiserver_port: int = 0
    etcd_port: int = 0
    started_seconds: float = 0.0
    # where its binaries come from: the lab's 1.28 release, or another (tests/lab/dra.py)
    kubernetes_binary: Callable[[str], Path] = assets.kubernetes_binary

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters), on this machine."""
        return self.workdir / "admin.conf"

    @property
    def audit_policy(self) -> Path:
        return self.workdir / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines, written before each request is answered)."""
        return self.workdir / "audit.log"

    def audit_events(self) -> list[dict]:
        """Every audit event so far, oldest first (see AUDIT_POLICY for what is logged)."""
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]

    @property
    def bin_dir(self) -> Path:
        """A folder holding the lab's kubectl (put it first on PATH for the tool's kubectl calls)."""
        return self.workdir / "bin"

    def start(self, timeout: float = 120) -> ControlPlane:
        began = time.monotonic()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - began
        return self

    def _start(self, timeout: float) -> None:
        binaries = {
            name: self.kubernetes_binary(name)
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        }
        etcd = assets.etcd()
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        (self.bin_dir / "kubectl").symlink_to(binaries["kubectl"])
        self.pki = pki = Pki(self.workdir / "pki")
        serving = pki.issue("apiserver", "/CN=kube-apiserver", server=True)
        admin = pki.issue("admin", f"/O=system:masters/CN={ADMIN_USER}")
        controller_manager = pki.issue("controller-manager", "/CN=system:kube-controller-manager")
        scheduler = pki.issue("scheduler", "/CN=system:kube-scheduler")
        self.etcd_port, peer_port = free_port(), free_port()
        self.apiserver_port = free_port()
        self.kubeconfig.write_text(kubeconfig_text(self.server, pki.ca, *admin, "admin"))
        (self.workdir / "controller-manager.conf").write_text(
            kubeconfig_text(self.server, pki.ca, *controller_manager, "system:kube-controller-manager")
        )
        (self.workdir / "scheduler.conf").write_text(
            kubeconfig_text(self.server, pki.ca, *scheduler, "system:kube-scheduler")
        )

        self.audit_policy.write_text(AUDIT_POLICY)
        etcd_url = f"http://{LOOPBACK}:{self.etcd_port}"
        self._spawn(
            "etcd",
            [
                str(etcd),
                "--name",
                "lab",
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://{LOOPBACK}:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://{LOOPBACK}:{peer_port}",
                "--initial-cluster",
                f"lab=http://{LOOPBACK}:{peer_port}",
                "--unsafe-no-fsync",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                "--bind-address",
                LOOPBACK,
                "--advertise-address",
                LOOPBACK,
                "--secure-port",
                str(self.apiserver_port),
                "--etcd-servers",
                etcd_url,
                "--endpoint-reconciler-type=none",
                "--service-cluster-ip-range",
                SERVICE_CIDR,
                "--authorization-mode",
                "Node,RBAC",
                "--client-ca-file",
                str(pki.ca),
                "--tls-cert-file",
                str(serving[0]),
                "--tls-private-key-file",
                str(serving[1]),
                "--kubelet-client-certificate",
                str(admin[0]),
                "--kubelet-client-key",
                str(admin[1]),
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                str(pki.folder / "sa.pub"),
                "--service-account-signing-key-file",
                str(pki.folder / "sa.key"),
                "--allow-privileged=true",
                "--enable-admission-plugins",
                "NodeRestriction",
                "--profiling=false",
                "--audit-policy-file",
                str(self.audit_policy),
                "--audit-log-path",
                str(self.audit_log),
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
            ],
        )
        self._wait(
            lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
            timeout,
            "the API server's /readyz",
        )
        self._spawn(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                "--kubeconfig",
                str(self.workdir / "controller-manager.conf"),
                "--authentication-kubeconfig",
                str(self.workdir / "controller-manager.conf"),
                "--authorization-kubeconfig",
                str(self.workdir / "controller-manager.conf"),
                "--bind-address",
                LOOPBACK,
                "--secure-port",
                str(free_port()),
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                "--service-account-private-key-file",
                str(pki.folder / "sa.key"),
                "--root-ca-file",
                str(pki.ca),
                "--cluster-signing-cert-file",
                str(pki.ca),
                "--cluster-signing-key-file",
                str(pki.folder / "ca.key"),
                "--controllers",
                "*,-nodeipam,-service,-route,-cloud-node-lifecycle",
                "--profiling=false",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(binaries["kube-scheduler"]),
                "--kubeconfig",
                str(self.workdir / "scheduler.conf"),
                "--authentication-kubeconfig",
                str(self.workdir / "scheduler.conf"),
                "--authorization-kubeconfig",
                str(self.workdir / "scheduler.conf"),
                "--bind-address",
                LOOPBACK,
                "--secure-port",
                str(free_port()),
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        self._wait(
            lambda: self.kubectl("-n", "default", "get", "serviceaccount", "default", check=False).returncode == 0,
            timeout,
            "the default ServiceAccount",
        )

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        # Its own session: stopped as a group by its PID, never by name.
        self.processes[name] = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(
                        f"{name} exited ({process.returncode}) while waiting for {what}:\n{self.log_tail(name)}"
                    )
            if predicate():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def env(self) -> dict[str, str]:
        """Environment in which ``kubectl`` is the lab's and KUBECONFIG the admin's."""
        return {
            **os.environ,
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(self.kubeconfig),
        }

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,  # noqa: A002 - subprocess.run's name
        timeout: float = 60,
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input=manifest)

    def issue_node_credentials(self, node_name: str) -> str:
        """A kubeconfig (certificates inline) for the kubelet of ``node_name`` (Node authorizer)."""
        cert, key = self.pki.issue(f"kubelet-{node_name}", f"/O=system:nodes/CN=system:node:{node_name}")
        return kubeconfig_text(self.server, self.pki.ca, cert, key, f"system:node:{node_name}", embed=True)

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in list(self.processes.values()):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=15)
        self.processes.clear()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
