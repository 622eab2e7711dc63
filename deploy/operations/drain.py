"""
Drain a live node before its container runtime restarts or it reboots, and uncordon it after.

kubectl runs on the control-plane host of the same inventory. The drain is a
``FunctionCommand`` the runtime operations yield once their candidate config passed the
daemon's check, right before the swap and restart (``before_restart``), and the driver stage
runs before a reboot: so a node is drained only when a restart really follows. At execution it
runs on the control-plane host, in order:

1. ``kubectl get node NAME -o json``: not registered: nothing to drain; already cordoned (by
   an operator): drained, but never uncordoned by this run;
2. ``kubectl cordon NAME``;
3. ``kubectl drain NAME --ignore-daemonsets --delete-emptydir-data --timeout=Ns``: a failure
   fails the host before the restart; the node stays cordoned.

``uncordon_node`` runs after verify and uncordons only a node this run cordoned. When a host
fails after its node was cordoned, a state callback says that the node stays cordoned and how
to recover it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.exceptions import FactProcessError
from pyinfra.api.state import BaseStateCallback

from ..facts.drain import KubeNodeSchedule
from ..facts.k8s import first_error_line, kubeconfig_words, kubectl
from ..facts.nvidia import NodeSurvey
from ..facts.read_ahead import known_fact
from ..foundations.pyinfra_api import Commands
from ..foundations.run_state import per_run
from .driver import awaits_reboot
from .failure import fail_host

if TYPE_CHECKING:
    from pyinfra.api import Host, State
    from pyinfra.api.operation import OperationMeta


@dataclass(frozen=True)
class DrainTarget:
    """Which Kubernetes node a GPU host is, and where and how to drain it."""

    node: str  # Kubernetes node name
    control_plane: str  # inventory name of the host kubectl runs on
    kubeconfig: str | None  # on the control-plane host; None: the one kubectl finds there
    timeout: int  # seconds `kubectl drain` has

    def drain_command(self) -> StringCommand:
        return kubectl(
            self.kubeconfig,
            "drain",
            QuoteString(self.node),
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            f"--timeout={int(self.timeout)}s",
        )


@dataclass
class DrainRecord:
    """What this run did to one GPU host's node."""

    target: DrainTarget
    # Operations whose change may restart a runtime or reboot (for the prepare-time plan).
    restart_ops: list[OperationMeta] = field(default_factory=list)
    drained: bool = False  # drained (or nothing to drain) earlier in this run
    cordoned_by_run: bool = False  # this run cordoned it and has not uncordoned it yet
    was_cordoned: bool = False  # an operator had cordoned it before this run


class Drains(dict[str, DrainRecord]):
    """This run's drain records: inventory host name -> DrainRecord (deploy/foundations/run_state.py)."""


def drain_record(state: State, host_name: str, target: DrainTarget) -> DrainRecord:
    """This run's record of ``host_name``'s node (deploy/foundations/run_state.py), created on first use; the
    run's first record hooks the failure message into the State's callbacks."""
    drains = per_run(state, Drains, created=lambda drains: state.add_callback_handler(_StaysCordoned(drains)))
    if host_name not in drains:
        drains[host_name] = DrainRecord(target=target)
    return drains[host_name]


def watch(target: DrainTarget | None, operation_meta: OperationMeta) -> None:
    """An operation of the current host whose change restarts a runtime or reboots (before which
    ``target`` is drained; None: no drain)."""
    if target is not None and operation_meta is not None:
        drain_record(host.state, host.name, target).restart_ops.append(operation_meta)


def before_restart(target: DrainTarget | None) -> tuple[FunctionCommand, ...]:
    """The commands the runtime operations yield right before a restart: the drain, if any."""
    if target is None:
        return ()
    return (FunctionCommand(drain_node, (target,), {}),)


class _StaysCordoned(BaseStateCallback):
    def __init__(self, store: dict[str, DrainRecord]) -> None:
        self.store = store

    # pyinfra declares its callbacks static, and calls them on the handler it is given: this is a method
    def operation_host_error(  # type: ignore[override]
        self,
        state: State,
        host: Host,
        op_hash: str,
        retry_count: int = 0,
        max_retries: int = 0,
    ) -> None:
        record = self.store.get(host.name)
        if record is None or state.get_op_data_for_host(host, op_hash).global_arguments.get("_ignore_errors"):
            return
        node = record.target.node
        if record.cordoned_by_run:
            logger.error(
                f"{host.print_prefix}gpu-node: Kubernetes node {node} stays cordoned (cordoned and "
                f"drained before a restart): uncordon it with `kubectl uncordon {node}` once fixed"
            )
        elif record.was_cordoned:
            logger.error(
                f"{host.print_prefix}gpu-node: Kubernetes node {node} stays cordoned, as it was before this run"
            )


def _on_control_plane(state: State, target: DrainTarget, command: StringCommand) -> tuple[bool, list[str], list[str]]:
    """Run ``command`` on the control-plane host with its own connector arguments (sudo, ...)."""
    control_plane = state.inventory.get_host(target.control_plane)
    arguments, _ = pop_global_arguments(state, control_plane, {})
    connector_arguments = {key: value for key, value in arguments.items() if key in CONNECTOR_ARGUMENT_KEYS}
    try:
        if not control_plane.connected:
            control_plane.connect(reason="to drain a GPU node", raise_exceptions=True)
        ok, output = control_plane.run_shell_command(
            command,
            print_output=state.print_output,
            print_input=state.print_input,
            **connector_arguments,
        )
    except Exception as error:  # noqa: BLE001 - a lost control plane is a failed drain, never a crash
        return False, [], [f"{control_plane.name}: {error}"]
    return ok, output.stdout_lines, output.stderr_lines


def _last_error(stderr_lines: list[str]) -> str:
    return first_error_line("\n".join(stderr_lines))


def drain_node(state: State, host: Host, target: DrainTarget) -> bool:
    """The drain (a FunctionCommand body): True when the restart may go ahead."""
    record = drain_record(state, host.name, target)
    node, where = target.node, f"{kubeconfig_words(target.kubeconfig)} on {target.control_plane}"
    if record.drained:
        host.log_styled(f"Kubernetes node {node} was drained earlier in this run", fg="cyan")
        return True

    schedule = KubeNodeSchedule()
    ok, lines, errors = _on_control_plane(state, target, schedule.command(target.kubeconfig, node))
    try:
        answer = schedule.process(lines) if ok and lines else {**schedule.default(), "error": _last_error(errors)}
    except FactProcessError as error:
        answer = {**schedule.default(), "error": str(error)}
    if not answer["reachable"]:
        return fail_host(
            state,
            host,
            f"cannot drain Kubernetes node {node} before the restart: "
            f"{answer['error']} ({where}); nothing was restarted",
        )
    if not answer["registered"]:
        logger.warning(f"{host.print_prefix}no Kubernetes node named {node}: nothing to drain before the restart")
        record.drained = True
        return True

    if answer["unschedulable"]:
        record.was_cordoned = True
        host.log_styled(
            f"Kubernetes node {node} was already cordoned: draining it, it stays cordoned after", fg="yellow"
        )
    else:
        cordon = kubectl(target.kubeconfig, "cordon", QuoteString(node))
        ok, _, errors = _on_control_plane(state, target, cordon)
        if not ok:
            return fail_host(
                state, host, f"kubectl cordon {node} failed: {_last_error(errors)} ({where}); nothing was restarted"
            )
        record.cordoned_by_run = True

    ok, _, errors = _on_control_plane(state, target, target.drain_command())
    if not ok:
        return fail_host(
            state,
            host,
            f"kubectl drain {node} failed (--timeout={target.timeout}s): {_last_error(errors)}; nothing was restarted",
        )
    record.drained = True
    host.log_styled(f"Kubernetes node {node} cordoned and drained before the restart", fg="green")
    return True


def uncordon(state: State, host: Host, target: DrainTarget, driver_packages: tuple[str, ...] = ()) -> bool:
    """Uncordon a node this run cordoned (a FunctionCommand body), unless it is a GPU node whose driver
    change (``driver_packages``, this run's) awaits its reboot."""
    record = drain_record(state, host.name, target)
    if awaits_reboot(known_fact(host, NodeSurvey), driver_packages):
        # Its GPUs are unusable until the reboot loads the new module, and verify does not fail such a
        # node (exit 3, deploy/reports/exit_status.py): pods must not come back to it before then.
        logger.warning(
            f"{host.print_prefix}Kubernetes node {target.node} left cordoned: its NVIDIA driver awaits "
            f"the node's reboot; after it, kubectl uncordon {target.node}"
        )
        return True
    command = kubectl(target.kubeconfig, "uncordon", QuoteString(target.node))
    ok, _, errors = _on_control_plane(state, target, command)
    if not ok:
        # record.cordoned_by_run stays: the failure callback says the node stays cordoned.
        return fail_host(state, host, f"kubectl uncordon {target.node} failed: {_last_error(errors)}")
    record.cordoned_by_run = False
    host.log_styled(f"Kubernetes node {target.node} uncordoned", fg="green")
    return True


@operation(is_idempotent=False)
def drain_before_reboot(target: DrainTarget) -> Commands:
    """Cordon and drain ``target`` (gate it with ``_if=`` on what decides the reboot)."""
    yield from before_restart(target)


@operation()
def uncordon_node(target: DrainTarget, driver_packages: tuple[str, ...] = ()) -> Commands:
    """
    Uncordon ``target`` if this run cordoned it, unless its driver change (``driver_packages``: this
    run's driver stage's) awaits the node's reboot. Yields no command on a run that restarts
    nothing, so a no-op run stays change-free.
    """
    record = drain_record(host.state, host.name, target)
    if not host.state.is_executing:
        # Preparing: the drain happens only if a watched operation changes.
        if any(op.will_change for op in record.restart_ops):
            yield FunctionCommand(uncordon, (target, driver_packages), {})
        else:
            host.noop(f"no restart planned: Kubernetes node {target.node} is not drained")
        return
    if record.cordoned_by_run:
        yield FunctionCommand(uncordon, (target, driver_packages), {})
    elif record.was_cordoned:
        host.noop(f"Kubernetes node {target.node} was cordoned before this run: left cordoned")
    else:
        host.noop(f"Kubernetes node {target.node} was not cordoned by this run")
