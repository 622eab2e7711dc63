"""
What the fleet view's quarantine reads of the cluster (deploy/fleet/quarantine.py), on the control-plane
host through kubectl, each in ``captured()``'s form (deploy/facts/k8s.py): the nodes' taints, their
resourceVersion and gpu-node's record annotation; and, where a GPU node's group is DRA, whether the
cluster serves DeviceTaintRule, NVIDIA's ResourceSlices (which device is which PCI address) and gpu-node's
own DeviceTaintRules.
"""

from __future__ import annotations

import re
from typing import Any

from pyinfra.api import StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..k8s import dra
from ..k8s.quarantine import (
    DEVICE_TAINT_VERSIONS,
    MANAGED_BY,
    PCI_ATTRIBUTE,
    RECORD_ANNOTATION,
    RULE_NODE_ANNOTATION,
    DeviceApi,
    LiveNode,
    pci_key,
)
from ..reports.health_report import PCI_ADDRESS
from .base import NodeFact
from .k8s import (
    captured,
    cluster_json,
    first_error_line,
    kubeconfig_problem,
    kubectl,
    parse_captured,
    unreadable_reason,
)

_PCI = re.compile(f"^{PCI_ADDRESS}$")


def _guarded(kubeconfig: str | None, *commands: str | StringCommand) -> StringCommand:
    """``commands`` where kubectl exists and its kubeconfig can be read, else one line saying why not."""
    return StringCommand(
        "if ! command -v kubectl >/dev/null 2>&1; then echo kubectl-missing;",
        "elif _why=$(",
        kubeconfig_problem(kubeconfig),
        '); [ -n "$_why" ];',
        'then echo "kubeconfig-unreadable $_why";',
        "else",
        *commands,
        "; fi",
    )


def _refusal(output: list[str]) -> str | None:
    if output and output[0] == "kubectl-missing":
        return "kubectl is not installed (not on PATH)"
    if output and output[0].startswith("kubeconfig-unreadable"):
        return unreadable_reason(output[0])
    return None


def _items(out: str, what: str) -> list[dict[str, Any]]:
    try:
        items = cluster_json(out, what).get("items") or []
    except (ValueError, AttributeError):
        raise FactProcessError(f"{what}: not a JSON list of objects: {out[:200]!r}") from None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise FactProcessError(f"{what}: not a JSON list of objects")
    return items


class KubeQuarantineNodes(NodeFact[dict[str, Any]]):
    """
    The cluster's nodes as the quarantine reads them (None when kubectl failed: see ``error``): each
    node's resourceVersion, its taints, whether it has annotations, and gpu-node's record annotation.

    .. code:: python

        {"nodes": {"gpu1": LiveNode(name="gpu1", resource_version="4711", taints=({"key": ..., ...},),
                                    annotations=True, record_text=None)}, "error": None}
    """

    def command(self, kubeconfig: str | None) -> str | StringCommand:
        return _guarded(kubeconfig, captured(kubectl(kubeconfig, "get", "nodes", "-o", "json")))

    @staticmethod
    def default() -> dict[str, Any]:
        return {"nodes": None, "error": "no output"}

    def process(self, output: list[str]) -> dict[str, Any]:
        refused = _refusal(output)
        if refused:
            return {"nodes": None, "error": refused}
        code, out, err = parse_captured(output)
        if code != 0:
            return {"nodes": None, "error": f"the API server did not answer: {first_error_line(err)}"}
        nodes = {}
        for item in _items(out, "kubectl get nodes"):
            metadata, spec = item.get("metadata") or {}, item.get("spec") or {}
            annotations = metadata.get("annotations")
            taints = spec.get("taints") or []
            if not isinstance(taints, list) or not all(isinstance(taint, dict) for taint in taints):
                raise FactProcessError(
                    f"kubectl get nodes: node {metadata.get('name')!r}: taints are no list of objects"
                )
            record = annotations.get(RECORD_ANNOTATION) if isinstance(annotations, dict) else None
            nodes[str(metadata.get("name"))] = LiveNode(
                name=str(metadata.get("name")),
                resource_version=str(metadata.get("resourceVersion")),
                taints=tuple(taints),
                annotations=isinstance(annotations, dict),
                record_text=record if isinstance(record, str) else None,
            )
        return {"nodes": nodes, "error": None}


class KubeDeviceTaints(NodeFact[Any]):
    """
    DeviceTaintRule as the cluster serves it (``kubectl api-resources``: its preferred apiVersion when that is
    resource.k8s.io/v1 or v1beta2, else None), the GPUs of NVIDIA's ResourceSlices per node (PCI address ->
    pool and device), and gpu-node's own DeviceTaintRules (labelled as its own; name -> node). What a
    kubectl call here could not read is empty.

    .. code:: python

        DeviceApi(version="resource.k8s.io/v1beta2", gpus={"gpu1": {"0000:3b:00.0": ("gpu1", "gpu-0")}},
                  rules={"gpu-node-gpu1-gpu-0-7905065b2f31": "gpu1"})
    """

    def command(self, kubeconfig: str | None) -> str | StringCommand:
        selector = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
        return _guarded(
            kubeconfig,
            captured(kubectl(kubeconfig, "api-resources", "--api-group=resource.k8s.io", "--no-headers"), "api-"),
            ";",
            captured(
                kubectl(
                    kubeconfig, "get", "resourceslices", f"--field-selector=spec.driver={dra.DRIVER}", "-o", "json"
                ),
                "slices-",
            ),
            ";",
            captured(kubectl(kubeconfig, "get", "devicetaintrules", "-l", selector, "-o", "json"), "rules-"),
        )

    @staticmethod
    def default() -> Any:
        return DeviceApi()

    def process(self, output: list[str]) -> Any:
        if _refusal(output):
            return DeviceApi()
        code, out, _ = parse_captured(output, "api-")
        version = None
        for line in out.splitlines() if code == 0 else ():
            words = line.split()
            # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND
            if len(words) >= 4 and words[0] == "devicetaintrules" and words[-3] in DEVICE_TAINT_VERSIONS:
                version = words[-3]
        gpus: dict[str, dict[str, tuple[str, str]]] = {}
        code, out, _ = parse_captured(output, "slices-")
        for item in _items(out, "kubectl get resourceslices") if code == 0 else ():
            spec = item.get("spec") or {}
            node, pool = spec.get("nodeName"), (spec.get("pool") or {}).get("name")
            if not isinstance(node, str) or not isinstance(pool, str) or spec.get("driver") != dra.DRIVER:
                continue
            for device in spec.get("devices") or []:
                attributes = (
                    device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}
                    if isinstance(device, dict)
                    else {}
                )
                address = (attributes.get(PCI_ATTRIBUTE) or {}).get("string") if isinstance(attributes, dict) else None
                if isinstance(address, str) and _PCI.match(address) and isinstance(device.get("name"), str):
                    gpus.setdefault(node, {})[pci_key(address)] = (pool, device["name"])
        rules = {}
        code, out, _ = parse_captured(output, "rules-")
        for item in _items(out, "kubectl get devicetaintrules") if code == 0 and version else ():
            metadata = item.get("metadata") or {}
            node = (metadata.get("annotations") or {}).get(RULE_NODE_ANNOTATION)
            if isinstance(node, str) and isinstance(metadata.get("name"), str):
                rules[metadata["name"]] = node
        return DeviceApi(version=version, gpus=gpus, rules=rules)
