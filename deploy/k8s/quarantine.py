"""
The fleet view's quarantine (fleet_quarantine=true), pure: from each GPU node's health report
(/var/lib/gpu-node/health.json) and what the cluster holds, what to taint and what to release.

- A node whose report says unhealthy gets the taint ``gpu-node.nvidia.com/gpu-unhealthy:NoSchedule``
  and the annotation ``gpu-node.nvidia.com/quarantine`` (gpu-node's record: since when, why, since when
  healthy again), in one JSON patch that first tests the node's resourceVersion: a node changed since it
  was read is not patched (the patch fails, the next run reads it again). On a DRA node whose failed
  GPUs each map to a device of its ResourceSlices, and where the cluster serves DeviceTaintRule
  (resource.k8s.io/v1 or v1beta2), a DeviceTaintRule per failed GPU instead of the node taint.
- Bounded: at most ``quarantine_max_nodes`` and ``quarantine_max_percent`` (rounded down) of the run's
  GPU nodes at once, counting every taint of the key the cluster holds, gpu-node's or anyone's; the
  worst first (fatal, then needs reset), then by name.
- Released once its reports have said healthy for ``quarantine_release_after`` (by their own
  checked_at, so a silent node's old report never counts as time healthy): the record's healthy_since
  is set at the first healthy report and cleared by any other.
- Never touched: a taint of the key without gpu-node's record (someone else's), any other taint, the
  node's cordon (spec.unschedulable), any annotation but the record, any DeviceTaintRule not labelled
  as gpu-node's.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from ..foundations import node_text
from ..reports.formats import HealthProblemFormat, HealthReportFormat
from ..reports.health_report import HEALTHY, SEVERITIES, UNHEALTHY, UNHEALTHY_SEVERITIES
from . import dra

TAINT_KEY = "gpu-node.nvidia.com/gpu-unhealthy"
EFFECT = "NoSchedule"
RECORD_ANNOTATION = "gpu-node.nvidia.com/quarantine"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-node"}
RULE_NODE_ANNOTATION = "gpu-node.nvidia.com/node"
# The attribute NVIDIA's DRA driver gives each GPU (Kubernetes' standard one): its PCI address.
PCI_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
DEVICE_TAINT_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2")
LINE = 240  # a problem's line, a record's reason: what one line of kubectl describe shows


def acted_on(report: HealthReportFormat) -> list[HealthProblemFormat]:
    """The report's problems that make a node unhealthy."""
    return [problem for problem in report.problems if problem.severity in UNHEALTHY_SEVERITIES]


def worst(report: HealthReportFormat) -> HealthProblemFormat | None:
    return min(acted_on(report), key=lambda problem: SEVERITIES.index(problem.severity), default=None)


def failed_gpus(report: HealthReportFormat) -> set[str] | None:
    """The PCI addresses of the GPUs its problems name; None when one is about no single GPU."""
    problems = acted_on(report)
    gpus = [problem.gpu for problem in problems]
    if not gpus or None in gpus:
        return None
    return {pci_key(gpu) for gpu in gpus if gpu is not None}


def checked_at(report: HealthReportFormat) -> datetime:
    return datetime.fromisoformat(report.checked_at)  # UTC, as its format holds it


def pci_key(address: str) -> str:
    """A PCI address as one spelling (NVML's 00000000:3B:00.0 and sysfs' 0000:3b:00.0 alike)."""
    domain, rest = address.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


class QuarantineRecord(BaseModel):
    """gpu-node's annotation on a node it quarantined: what marks the taint (and rules) as its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    by: Literal["gpu-node"] = "gpu-node"
    since: AwareDatetime
    reason: str = Field(max_length=LINE)
    healthy_since: AwareDatetime | None = None
    devices: tuple[str, ...] = Field((), max_length=64)  # DeviceTaintRules' names; none: the node taint

    def text(self) -> str:
        return self.model_dump_json(exclude_none=True, exclude=None if self.devices else {"devices"})


def record_of(text: str) -> QuarantineRecord | None:
    """The record an annotation's value holds; None when it is no gpu-node record."""
    try:
        return QuarantineRecord.model_validate(node_text.parsed(json.loads, text, RECORD_ANNOTATION))
    except (ValueError, ValidationError):
        return None


@dataclass(frozen=True)
class LiveNode:
    """One node as the cluster holds it (the quarantine's fact)."""

    name: str
    resource_version: str
    taints: tuple[dict[str, Any], ...] = ()
    annotations: bool = False  # whether metadata.annotations exists at all
    record_text: str | None = None  # the value of RECORD_ANNOTATION, if any

    def taint_index(self) -> int | None:
        return next(
            (
                index
                for index, taint in enumerate(self.taints)
                if taint.get("key") == TAINT_KEY and taint.get("effect") == EFFECT
            ),
            None,
        )


@dataclass(frozen=True)
class GpuHealth:
    """One GPU node of the run: its Kubernetes name, its report (or why none), whether its group is DRA, the
    inventory host its report was read from."""

    node: str
    report: HealthReportFormat | None
    unreadable: str | None = None
    dra: bool = False
    host: str = ""


@dataclass(frozen=True)
class DeviceApi:
    """DeviceTaintRule as the cluster serves it: its apiVersion (None: not served), each DRA node's GPUs
    (PCI key -> (pool, device)) from NVIDIA's ResourceSlices, and gpu-node's own rules (name -> node)."""

    version: str | None = None
    gpus: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    rules: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Bound:
    max_nodes: int
    max_percent: int
    release_after: int  # seconds (quarantine_release_after's)

    def limit(self, group: int) -> int:
        return min(self.max_nodes, math.floor(group * self.max_percent / 100))


@dataclass(frozen=True)
class Step:
    """One change to one node: a JSON patch of the Node, DeviceTaintRules to create or delete."""

    node: str
    verb: str
    says: str
    patch: tuple[dict[str, Any], ...] = ()
    create: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()


@dataclass
class QuarantinePlan:
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is left as it is, and why


def stamp(moment: datetime) -> str:
    offset = moment.utcoffset()
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if offset is not None and not offset else moment.isoformat()


def taint_value(report: HealthReportFormat) -> str:
    """The worst problem's kind as a label value (what `kubectl describe node` shows beside the key)."""
    found = worst(report)
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", found.kind if found else "")[:63].strip("-_.")
    return value or "unhealthy"


def reason(report: HealthReportFormat) -> str:
    found = worst(report)
    return node_text.printable(found.line if found else f"status {report.status}")[:LINE]


def _pointer(key: str) -> str:
    """A JSON pointer's segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _tested(node: LiveNode) -> list[dict[str, Any]]:
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version}]


def _record_op(node: LiveNode, record: QuarantineRecord | None) -> dict[str, Any]:
    path = f"/metadata/annotations/{_pointer(RECORD_ANNOTATION)}"
    if record is None:
        return {"op": "remove", "path": path}
    if not node.annotations:
        return {"op": "add", "path": "/metadata/annotations", "value": {RECORD_ANNOTATION: record.text()}}
    return {"op": "replace" if node.record_text is not None else "add", "path": path, "value": record.text()}


def rule_name(node: str, device: str) -> str:
    """A DeviceTaintRule's name: readable, a DNS subdomain of at most 253, unique per node and device by its
    hash ('-' joins names that hold '-' themselves: node a's device b-c and node a-b's device c alike)."""
    unique = hashlib.sha256(f"{node}/{device}".encode()).hexdigest()
    name = f"gpu-node-{node}-{device}-{unique[:12]}".lower()
    if len(name) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name):
        return name
    return f"gpu-node-{unique[:32]}"


def device_rule(version: str, node: str, pool: str, device: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(node, device),
            "labels": dict(MANAGED_BY),
            "annotations": {RULE_NODE_ANNOTATION: node},
        },
        "spec": {
            "deviceSelector": {"driver": dra.DRIVER, "pool": pool, "device": device},
            "taint": {"key": TAINT_KEY, "value": value, "effect": EFFECT},
        },
    }


def _device_rules(
    gpu: GpuHealth, report: HealthReportFormat, devices: DeviceApi | None
) -> tuple[list[dict[str, Any]] | None, str]:
    """The DeviceTaintRules for ``gpu``'s failed GPUs alone (its ``report``'s), or None and why the node is tainted
    instead."""
    if not gpu.dra:
        return None, ""
    if devices is None or devices.version is None:
        return None, "the cluster serves no DeviceTaintRule (resource.k8s.io/v1 or v1beta2): the node tainted"
    failed = failed_gpus(report)
    if failed is None:
        return None, "a problem is about no single GPU: the node tainted"
    known = devices.gpus.get(gpu.node, {})
    missing = sorted(failed - set(known))
    if missing:
        return None, f"GPU {', '.join(missing)} is in none of the node's ResourceSlices: the node tainted"
    value = taint_value(report)
    return [device_rule(devices.version, gpu.node, *known[pci], value) for pci in sorted(failed)], ""


def _quarantine(gpu: GpuHealth, report: HealthReportFormat, node: LiveNode, devices: DeviceApi | None) -> Step:
    rules, why = _device_rules(gpu, report, devices)
    record = QuarantineRecord(
        since=checked_at(report), reason=reason(report), devices=tuple(rule["metadata"]["name"] for rule in rules or ())
    )
    if rules:
        names = ", ".join(rule["spec"]["deviceSelector"]["device"] for rule in rules)
        return Step(
            node.name,
            "quarantine devices",
            f"DeviceTaintRule for {names}: {record.reason}",
            patch=(*_tested(node), _record_op(node, record)),
            create=tuple(rules),
        )
    taint = {"key": TAINT_KEY, "value": taint_value(report), "effect": EFFECT}
    add = (
        {"op": "add", "path": "/spec/taints/-", "value": taint}
        if node.taints
        else {"op": "add", "path": "/spec/taints", "value": [taint]}
    )
    says = f"tainted {TAINT_KEY}={taint['value']}:{EFFECT}: {record.reason}" + (f" ({why})" if why else "")
    return Step(node.name, "quarantine", says, patch=(*_tested(node), add, _record_op(node, record)))


def _release(node: LiveNode, record: QuarantineRecord, healthy_for: float) -> Step:
    patch = _tested(node)
    index = node.taint_index()
    if not record.devices and index is not None:
        patch.append({"op": "remove", "path": f"/spec/taints/{index}"})
    patch.append(_record_op(node, None))
    what = f"DeviceTaintRule {', '.join(record.devices)}" if record.devices else f"taint {TAINT_KEY}"
    return Step(
        node.name,
        "release",
        f"healthy for {int(healthy_for)}s: {what} removed",
        patch=tuple(patch),
        delete=record.devices,
    )


def _missing_rules(
    gpu: GpuHealth, report: HealthReportFormat, node: LiveNode, ours: QuarantineRecord, devices: DeviceApi | None
) -> list[Step]:
    """A device-quarantined node still unhealthy: the rules its failed GPUs need that the cluster lacks (one
    a step stopped before, a GPU failed since), the record naming them all."""
    rules, _ = _device_rules(gpu, report, devices)
    if rules is None or devices is None:
        return []  # its report now names no single GPU: its rules stay, as its record says
    wanted = {rule["metadata"]["name"]: rule for rule in rules}
    missing = [rule for name, rule in wanted.items() if name not in devices.rules]
    if not missing:
        return []
    names = tuple(dict.fromkeys((*ours.devices, *wanted)))
    patch = (
        (*_tested(node), _record_op(node, ours.model_copy(update={"devices": names}))) if names != ours.devices else ()
    )
    shown = ", ".join(rule["spec"]["deviceSelector"]["device"] for rule in missing)
    return [
        Step(
            node.name,
            "quarantine devices",
            f"DeviceTaintRule for {shown}: {reason(report)}",
            patch=patch,
            create=tuple(missing),
        )
    ]


def _orphans(group: set[str], live: dict[str, LiveNode], devices: DeviceApi | None) -> list[Step]:
    """gpu-node's DeviceTaintRules of the group's nodes that no record of theirs names (a release whose
    delete failed after the node's record was removed): deleted."""
    steps = []
    for name, node in sorted((devices.rules if devices else {}).items()):
        record = record_of(live[node].record_text or "") if node in live else None
        if node in group and (record is None or name not in record.devices):
            steps.append(
                Step(node, "delete orphan", f"DeviceTaintRule {name} no gpu-node record names: deleted", delete=(name,))
            )
    return steps


def plan(gpus: list[GpuHealth], live: dict[str, LiveNode], devices: DeviceApi | None, bound: Bound) -> QuarantinePlan:
    """What the quarantine does to the run's GPU nodes ``gpus`` (the group its bound counts)."""
    result = QuarantinePlan()
    limit = bound.limit(len(gpus))
    group = {gpu.node for gpu in gpus}
    quarantined = {
        name
        for name in group
        if name in live
        and (live[name].taint_index() is not None or record_of(live[name].record_text or "") is not None)
    }
    candidates: list[tuple[GpuHealth, HealthReportFormat]] = []
    claimed: dict[str, list[str]] = {}
    for gpu in gpus:
        claimed.setdefault(gpu.node, []).append(gpu.host)
    for gpu in sorted(gpus, key=lambda gpu: gpu.node):
        node = live.get(gpu.node)
        if gpu.node not in claimed:  # said below once for all its hosts
            continue
        if len(claimed[gpu.node]) > 1:  # a node's hostname is its own word: which report is the node's is unknown
            hosts = claimed.pop(gpu.node)
            result.notes.append(
                f"{gpu.node}: {len(hosts)} hosts of the run ({', '.join(sorted(hosts))}) say they are this node "
                "(their hostname; kube_node_names maps each host to its node): left as it is"
            )
            continue
        if gpu.report is None:
            result.notes.append(f"{gpu.node}: {gpu.unreadable or 'no health report'}: left as it is")
            continue
        if node is None:
            result.notes.append(f"{gpu.node}: no such Kubernetes node: left as it is")
            continue
        ours = record_of(node.record_text) if node.record_text is not None else None
        if node.record_text is not None and ours is None:
            result.notes.append(f"{gpu.node}: its {RECORD_ANNOTATION} annotation is no gpu-node record: left as it is")
            continue
        report = gpu.report
        if ours is None:
            if node.taint_index() is not None:
                result.notes.append(
                    f"{gpu.node}: tainted {TAINT_KEY} by someone else (no gpu-node record): left as it is"
                )
            elif report.status == UNHEALTHY:
                candidates.append((gpu, report))
            continue
        if report.status == HEALTHY:
            now = checked_at(report)
            since = ours.healthy_since or now
            healthy_for = (now - since).total_seconds()
            if healthy_for >= bound.release_after:
                result.steps.append(_release(node, ours, healthy_for))
                quarantined.discard(gpu.node)
            elif ours.healthy_since is None:
                marked = ours.model_copy(update={"healthy_since": now})
                result.steps.append(
                    Step(
                        gpu.node,
                        "mark healthy",
                        f"healthy at {stamp(now)}: released after {bound.release_after}s of healthy reports",
                        patch=(*_tested(node), _record_op(node, marked)),
                    )
                )
            else:
                result.notes.append(
                    f"{gpu.node}: healthy for {int(healthy_for)}s of the {bound.release_after}s before its release"
                )
        elif ours.healthy_since is not None:
            cleared = ours.model_copy(update={"healthy_since": None})
            result.steps.append(
                Step(
                    gpu.node,
                    "unmark healthy",
                    f"{report.status} again: its healthy time starts over",
                    patch=(*_tested(node), _record_op(node, cleared)),
                )
            )
        if ours.devices and report.status == UNHEALTHY:
            result.steps += _missing_rules(gpu, report, node, ours, devices)
    result.steps += _orphans(group, live, devices)
    candidates.sort(
        key=lambda candidate: (
            SEVERITIES.index(problem.severity) if (problem := worst(candidate[1])) else len(SEVERITIES),
            candidate[0].node,
        )
    )
    for gpu, report in candidates:
        if len(quarantined) >= limit:
            result.notes.append(
                f"{gpu.node}: unhealthy ({reason(report)}) but not quarantined: {len(quarantined)} "
                f"of the run's {len(gpus)} GPU nodes are, the most quarantine_max_nodes="
                f"{bound.max_nodes} and quarantine_max_percent={bound.max_percent} allow ({limit})"
            )
            continue
        result.steps.append(_quarantine(gpu, report, live[gpu.node], devices))
        quarantined.add(gpu.node)
    return result
