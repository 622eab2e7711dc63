"""
Probes: commands that change a host for a moment to prove something works, undo the change and
report. ``CrictlRun`` runs a sandbox (and a container in it) through the CRI, ``ContainerRun`` a
throwaway container with the GPUs (``ctr``, ``docker``: as its runtime starts one), ``SmokeTestRun``
the vector-add pod.

A probe is not a fact. A fact (``deploy/facts/``) only reads, so pyinfra may run it whenever it
likes: while it prepares the plan, during change detection, again at execution. A probe starts
containers or creates pods, so it has its own calling convention:

When it runs
    Only from inside an operation that pyinfra is executing (``executing(host)`` is true), after
    the earlier operations ran. In its default mode pyinfra runs an operation's body twice: while
    preparing (change detection, shown before it asks to confirm; also ``--dry``) and again while
    executing; with ``-y`` only while executing. While preparing, the operation does not call the
    probe: it returns early, with ``host.noop(...)`` saying when the probe will run, and ``run``
    refuses (``ProbeOutsideExecution``). So a probe runs once per run, with or without ``-y``.

Never cached
    Every ``run`` call runs the command again and returns what this run saw. Nothing is kept.

How it reports
    Its command exits 0 whatever happens to what it starts, prints one tagged line per step
    (exit code and output), and always removes what it started. ``process`` turns the lines
    into a dict, the way a fact's ``process`` does. When the command cannot run at all (the
    connection failed, the shell exited non-zero), ``run`` logs one warning line naming the
    probe and returns ``default()``, a result that reads as a failure. The calling operation
    decides what the result means: it yields no command when the probe passed (so the run shows
    no change) and fails the host otherwise.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from paramiko import SSHException
from pyinfra import logger
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from ..facts.k8s import kubectl, with_stdin
from ..foundations import node_text, shell_scripts
from ..runtimes.containerd.installations import PLAIN_SOCKET
from ..verification.cdi import CdiProbe

if TYPE_CHECKING:
    from pyinfra.api import Host

T = TypeVar("T")


class ProbeOutsideExecution(RuntimeError):
    """A probe was called while pyinfra was preparing: it would run before the earlier operations."""


class Probe(Generic[T]):
    """One command that changes the host for a moment and reports what happened (see the module)."""

    def command(self, *args: Any, **kwargs: Any) -> StringCommand | str:
        raise NotImplementedError

    @staticmethod
    def default() -> T:
        """The result when the command could not run: it must read as a failure."""
        raise NotImplementedError

    def process(self, output: list[str]) -> T:
        raise NotImplementedError


def executing(host: Host) -> bool:
    """Whether pyinfra is executing operations now: the only time a probe may run."""
    return bool(host.state.is_executing)


def connector_arguments(host: Host) -> dict[str, Any]:
    """The connection arguments (``_sudo``, ``_su_user``...) of the operation being executed: pyinfra
    applies them to the commands an operation yields, not to commands it runs itself."""
    operation_arguments: dict[str, Any] = dict(host.current_op_global_arguments or {})
    return {key: operation_arguments[key] for key in CONNECTOR_ARGUMENT_KEYS if key in operation_arguments}


def run(host: Host, probe: type[Probe[T]], **arguments: Any) -> T:
    """
    Run ``probe`` on ``host`` now, from inside the operation being executed, with that
    operation's connection arguments (``_sudo`` and the like), and return its processed result.
    """
    name = probe.__name__
    if not executing(host):
        raise ProbeOutsideExecution(f"probe {name} called while pyinfra prepares; call it when executing")
    instance = probe()
    command = instance.command(**arguments)
    if isinstance(command, str):
        command = StringCommand(command)
    state = host.state
    try:
        status, output = host.run_shell_command(
            command, print_output=state.print_output, print_input=state.print_input, **connector_arguments(host)
        )
    except (TimeoutError, OSError, SSHException) as error:
        logger.warning(f"{host.print_prefix}probe {name} could not run: {error}")
        return instance.default()
    if not status:
        said = [line.strip() for line in output.stderr_lines if line.strip()]
        logger.warning(f"{host.print_prefix}probe {name} could not run: {said[-1] if said else 'no error output'}")
        return instance.default()
    return instance.process(output.stdout_lines)


# ---------------------------------------------------------------------------------------------
# Verify's runs (deploy/operations/verification.py)

SANDBOX_NAME = "gpu-node-verify"


def sandbox_config(uid: str, systemd_cgroup: bool = True) -> dict[str, Any]:
    """A host-network pod sandbox (as the device plugin's pods run), logging under /tmp. Its cgroup
    parent has the form the kubelet passes for the cgroup driver (runc refuses a path for systemd)."""
    parent = "gpunodeverify.slice" if systemd_cgroup else f"/{SANDBOX_NAME}"
    return {
        "metadata": {"name": SANDBOX_NAME, "namespace": "kube-system", "uid": uid, "attempt": 0},
        "log_directory": f"/tmp/{SANDBOX_NAME}-{uid}",
        "linux": {"cgroup_parent": parent, "security_context": {"namespace_options": {"network": 2}}},
    }


def container_config(image: str, command: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "nvidia-smi"},
        "image": {"image": image},
        "command": command,
        "log_path": "nvidia-smi.log",
        "linux": {},
    }


def cdi_container_config(image: str, cdi: CdiProbe) -> dict[str, Any]:
    """A container given ``cdi.device`` through the CRI's ``CDI_devices`` (as the kubelet passes the
    device plugin's cdi-cri answer), printing which of ``cdi.paths`` it has as device nodes.
    NVIDIA_VISIBLE_DEVICES=void: the nvidia runtime injects nothing of its own, in any mode, so what
    the container has came through CDI."""
    paths = " ".join(shlex.quote(path) for path in cdi.paths)
    return {
        "metadata": {"name": "cdi-devices"},
        "image": {"image": image},
        "command": ["sh", "-c", f'for p in {paths}; do [ -c "$p" ] && echo "device $p"; done; true'],
        "envs": [{"key": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "CDI_devices": [{"name": cdi.device}],
        "log_path": "cdi-devices.log",
        "linux": {},
    }


class CrictlRun(Probe[dict[str, Any]]):
    """
    Through the CRI, the path the kubelet takes: ``crictl runp --runtime nvidia`` a host-network
    sandbox, then (when ``image`` is given) create, start, wait for, read the logs of and remove a
    container running ``command`` in it, and (when ``cdi`` is given too) the same for a container
    given a CDI device (``cdi_container_config``; its steps' names start with ``cdi_``); stop and
    remove the sandbox. One command.

    .. code:: python

        {"runp": {"exit_code": 0, "output": "a1b2..."}, "create": {...}, "start": {...},
         "state": {"exit_code": 0, "output": "CONTAINER_EXITED 0"}, "logs": {...}, "rm": {...},
         "cdi_create": {...}, ..., "cdi_logs": {"exit_code": 0, "output": "device /dev/nvidia0"}, ...,
         "stopp": {...}, "rmp": {...}}
    """

    def command(
        self,
        uid: str,
        handler: str = "nvidia",
        image: str | None = None,
        command: Iterable[str] = ("nvidia-smi", "-L"),
        timeout: int = 60,
        systemd_cgroup: bool = True,
        socket: str = PLAIN_SOCKET,
        cdi: CdiProbe | None = None,
    ) -> str:
        return shell_scripts.script(
            "crictl_run",
            socket=socket,
            handler=handler,
            image=image or "none",
            timeout=int(timeout),
            pod_json=json.dumps(sandbox_config(uid, systemd_cgroup)),
            container_json=json.dumps(container_config(image or "", list(command))),
            cdi_json=json.dumps(cdi_container_config(image or "", cdi)) if cdi else "{}",
            run_container=1 if image else 0,
            run_cdi=1 if image and cdi else 0,
        ).strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        steps = {}
        for line in output:
            parts = line.strip().split(" ", 3)
            if len(parts) >= 3 and parts[0] == "step" and parts[2].lstrip("-").isdigit():
                text = node_text.decode_b64(parts[3], parts[1]) if len(parts) == 4 and parts[3] else ""
                steps[parts[1]] = {"exit_code": int(parts[2]), "output": text}
        return steps


class ContainerRun(Probe[dict[str, Any]]):
    """
    Run a throwaway container with the GPUs and report exit code and output: ``run``, the words that
    start it as its runtime says (deploy/runtimes/registry.py GpuRun: ``ctr run --rm --gpus 0 IMAGE
    ID``, as NVIDIA's guides do, or ``docker run --rm --gpus all --name ID IMAGE``), then ``command``.
    One command, always exit 0.

    .. code:: python

        {"exit_code": 0, "output": "GPU 0: ..."}
    """

    def command(self, run: Iterable[str], command: Iterable[str] = ("nvidia-smi",)) -> StringCommand:
        started = StringCommand(*[QuoteString(word) for word in (*run, *command)])
        return StringCommand(
            "out=$(", started, "2>&1); rc=$?;", 'echo "rc $rc"; printf \'%s\\n\' "$out" | head -n 40; true'
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"exit_code": None, "output": ""}

    def process(self, output: list[str]) -> dict[str, Any]:
        result = self.default()
        lines = list(output)
        if lines and lines[0].startswith("rc "):
            code = lines[0][3:].strip()
            result["exit_code"] = int(code) if code.lstrip("-").isdigit() else None
            lines = lines[1:]
        result["output"] = "\n".join(lines)
        return result


# ---------------------------------------------------------------------------------------------
# The cluster's smoke pod (deploy/operations/kubectl.py run_smoke_test, from deploy/tasks/k8s.py)


class SmokeTestRun(Probe[dict[str, Any]]):
    """
    Run the smoke pod once and report, leaving the cluster as it was: delete any old pod,
    create it, wait at most ``timeout`` seconds for Succeeded/Failed, read why it is not
    scheduled or not running, read its log, delete it.

    .. code:: python

        {"created": True, "create_error": None, "phase": "Succeeded",
         "scheduled": "False Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
         "waiting": ["ErrImagePull: ..."], "log": ["[Vector addition of 50000 elements]", ...],
         "passed": True, "deleted": True}
    """

    def command(self, kubeconfig: str | None, manifest: str, namespace: str, pod: str, timeout: int) -> StringCommand:
        k = kubectl(kubeconfig, "-n", QuoteString(namespace))
        conditions = (
            '{range .status.conditions[?(@.type=="PodScheduled")]}{"scheduled "}{.status}{" "}'
            '{.reason}{": "}{.message}{"\\n"}{end}'
            '{range .status.containerStatuses[*]}{"waiting "}{.state.waiting.reason}{": "}'
            '{.state.waiting.message}{"\\n"}{end}'
        )
        return StringCommand(
            k,
            "delete",
            "pod",
            QuoteString(pod),
            "--ignore-not-found",
            "--wait=true",
            ">/dev/null 2>&1;",
            "if ! _err=$(",
            with_stdin(manifest, StringCommand(k, "create", "-f", "-")),
            "2>&1 >/dev/null);",
            "then echo create-failed; printf '%s\\n' \"$_err\" | sed 's/^/detail /';",
            "else echo created;",
            f"_end=$(( $(date +%s) + {int(timeout)} )); _phase=;",
            "while :; do _phase=$(",
            k,
            "get",
            "pod",
            QuoteString(pod),
            "-o",
            "jsonpath='{.status.phase}'",
            "2>/dev/null);",
            'case "$_phase" in Succeeded|Failed) break;; esac;',
            '[ "$(date +%s)" -ge "$_end" ] && break; sleep 2; done;',
            'echo "phase ${_phase:-Unknown}";',
            k,
            "get",
            "pod",
            QuoteString(pod),
            "-o",
            QuoteString(f"jsonpath={conditions}"),
            "2>/dev/null;",
            "echo;",
            k,
            "logs",
            QuoteString(pod),
            "2>/dev/null | tail -n 50 | sed 's/^/log /';",
            k,
            "delete",
            "pod",
            QuoteString(pod),
            "--ignore-not-found",
            "--wait=false",
            ">/dev/null 2>&1",
            "&& echo deleted;",
            "fi; true",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "created": False,
            "create_error": "no output",
            "phase": None,
            "scheduled": None,
            "waiting": [],
            "log": [],
            "passed": False,
            "deleted": False,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        details = []
        for line in output:
            tag, _, rest = line.partition(" ")
            if tag == "created":
                state.update(created=True, create_error=None)
            elif tag == "create-failed":
                state["create_error"] = None
            elif tag == "detail":
                details.append(rest)
            elif tag == "phase":
                state["phase"] = rest.strip()
            elif tag == "scheduled":
                state["scheduled"] = rest.strip()
            elif tag == "waiting" and rest.strip(" :"):
                state["waiting"].append(rest.strip())
            elif tag == "log":
                state["log"].append(rest)
            elif tag == "deleted":
                state["deleted"] = True
        if not state["created"]:
            state["create_error"] = details[-1] if details else "kubectl create failed"
        state["passed"] = state["phase"] == "Succeeded" and any("Test PASSED" in line for line in state["log"])
        return state
