"""
The fleet view's quarantine mode (``--data fleet_quarantine=true``; docs/cluster.md): on the first
control-plane host of the inventory, the run's GPU nodes' health reports (health.json, read by the
NodeReports fact the fleet view reads anyway) and the cluster's nodes (kubectl there, read first) turn
into deploy/k8s/quarantine.py's plan, applied one node at a time (deploy/operations/quarantine.py).
With ``quarantine_reset=plan`` it also says, for each GPU whose problem needs a reset, whether the node
could reset it now (nothing holds /dev/nvidia*, the driver reload's holder check); it resets nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyinfra import host, inventory, logger
from pyinfra.api.exceptions import NoGroupError
from pyinfra.facts.server import Hostname

from ..driver.reload import named
from ..facts.gpu_holders import DeviceHolders
from ..facts.gpu_node_identity import kube_node_name
from ..facts.quarantine import KubeDeviceTaints, KubeQuarantineNodes
from ..facts.reports import REPORTS_DIR, NodeReports
from ..foundations import node_text
from ..foundations.pyinfra_api import deploy
from ..k8s import quarantine
from ..operations import failure
from ..operations import quarantine as quarantine_ops
from ..operations.kubectl import unavailable_message
from ..reports.formats import HealthReportFormat
from ..reports.health_report import HEALTH_CHECK_COMMAND, HEALTH_REPORT_PATH, NEEDS_RESET, UNHEALTHY
from ..reports.read_back import NotAReport, health_report_of
from ..settings import Settings, SettingsError, host_settings
from ..settings.values import NODE_NAME, time_span_seconds

if TYPE_CHECKING:
    from pyinfra.api import Host


def control_plane(settings: Settings) -> Host:
    """The host the quarantine runs kubectl on: the inventory's first control-plane host; SettingsError
    (before any host changes) where there is none."""
    try:
        hosts = inventory.get_group(settings.control_plane_group)
    except NoGroupError:
        hosts = []
    if not hosts:
        raise SettingsError(
            f"fleet_quarantine=true but the inventory has no {settings.control_plane_group} host "
            "(control_plane_group) to run kubectl on: add the control-plane host to the inventory"
        )
    return hosts[0]


def gpu_hosts(settings: Settings) -> list[Host]:
    try:
        return list(inventory.get_group(settings.gpu_nodes_group))
    except NoGroupError:
        return []


def health_of_reports(reports: list[dict[str, Any]], host_name: str) -> tuple[HealthReportFormat | None, str | None]:
    """The health report among a node's reports (the NodeReports fact), checked against its format as the
    fleet view checks it, or None and why not."""
    source = f"{host_name}: {HEALTH_REPORT_PATH}"
    entry = next((report for report in reports if f"{REPORTS_DIR}/{report['name']}" == HEALTH_REPORT_PATH), None)
    if entry is None:
        return None, f"no {HEALTH_REPORT_PATH} (the node's health check has not run)"
    if "not_read" in entry:
        return None, node_text.printable(f"{source}: {entry['not_read']}")
    try:
        return health_report_of(entry["text"], source), None
    except NotAReport as error:
        return None, node_text.printable(f"{source}: {error}")
    except node_text.UnreadableText as error:
        return None, node_text.printable(str(error))  # it names its source


def needing_reset(report: HealthReportFormat | None) -> list[str]:
    """The GPUs of an unhealthy report whose problem needs a reset."""
    if report is None or report.status != UNHEALTHY:
        return []
    return sorted({problem.gpu for problem in report.problems if problem.severity == NEEDS_RESET and problem.gpu})


def reset_note(node: str, gpus: list[str], holders: dict[str, Any]) -> str:
    """What quarantine_reset=plan says of a node whose ``gpus`` need a reset, from its DeviceHolders."""
    if not holders["fuser"]:
        return f"{node}: GPU {', '.join(gpus)} needs a reset; whether anything holds it is unknown (no fuser): not now"
    if holders["holders"]:
        return f"{node}: GPU {', '.join(gpus)} needs a reset; not now: {named(holders['holders'])}"
    # the check keeps a boot's Xids until told they were reset away: else the node stays unhealthy
    forget = " ".join((*HEALTH_CHECK_COMMAND, "--forget-xids"))
    commands = "; ".join([*(f"nvidia-smi -r -i {gpu}" for gpu in gpus), forget])
    return (
        f"{node}: GPU {', '.join(gpus)} needs a reset and nothing holds /dev/nvidia*: `{commands}` would reset it "
        "and tell the health check (gpu-node resets nothing)"
    )


@deploy("Quarantine GPU nodes")
def quarantine_gpu_nodes(settings: Settings) -> None:
    """The quarantine's reads, plan and steps, from this control-plane host's context."""
    names = dict(settings.kube_node_names)
    nodes, resets = [], []
    for gpu_host in gpu_hosts(settings):
        node_settings = host_settings(gpu_host)
        try:
            reports = gpu_host.get_fact(NodeReports)
            node = kube_node_name(names, gpu_host.name, None if gpu_host.name in names else gpu_host.get_fact(Hostname))
        except Exception as error:  # noqa: BLE001 - an unreachable GPU node must not stop the others
            nodes.append(
                quarantine.GpuHealth(
                    node=names.get(gpu_host.name, gpu_host.name),
                    report=None,
                    unreadable=node_text.printable(f"not reached ({error})"),
                    host=gpu_host.name,
                )
            )
            continue
        if len(node) > 253 or not NODE_NAME.fullmatch(node):  # the node's hostname: its word, reaching kubectl
            why = f"its hostname '{node_text.printable(node)}' is no Kubernetes node name (kube_node_names maps it)"
            nodes.append(quarantine.GpuHealth(node=gpu_host.name, report=None, unreadable=why, host=gpu_host.name))
            continue
        report, unreadable = health_of_reports(reports, gpu_host.name)
        nodes.append(
            quarantine.GpuHealth(
                node=node,
                report=report,
                unreadable=unreadable,
                dra=node_settings.gpu_allocator == "dra",
                host=gpu_host.name,
            )
        )
        if settings.quarantine_reset == "plan" and needing_reset(report):
            resets.append((node, needing_reset(report), gpu_host))

    live = host.get_fact(KubeQuarantineNodes, kubeconfig=settings.kubeconfig)
    if live["nodes"] is None:
        failure.fail(
            name="Read the cluster's GPU nodes", message=unavailable_message(settings.kubeconfig, live["error"])
        )
        return
    devices = (
        host.get_fact(KubeDeviceTaints, kubeconfig=settings.kubeconfig) if any(node.dra for node in nodes) else None
    )
    bound = quarantine.Bound(
        settings.quarantine_max_nodes,
        settings.quarantine_max_percent,
        time_span_seconds(settings.quarantine_release_after),
    )
    planned = quarantine.plan(nodes, live["nodes"], devices, bound)
    for note in planned.notes:  # what is left as it is: the operator's to look at
        logger.warning(f"{host.print_prefix}quarantine: {note}")
    for node, gpus, gpu_host in resets:
        logger.info(
            f"{host.print_prefix}quarantine_reset=plan: {reset_note(node, gpus, gpu_host.get_fact(DeviceHolders))}"
        )
    for step in planned.steps:
        quarantine_ops.apply_step(
            name=f"Quarantine: {step.node}: {step.verb}: {step.says}", kubeconfig=settings.kubeconfig, step=step
        )
    if not planned.steps:
        logger.info(f"{host.print_prefix}quarantine: nothing to change on the {len(nodes)} GPU nodes of the run")
