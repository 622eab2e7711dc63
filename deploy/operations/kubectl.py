"""
kubectl operations run on the control plane, and the helpers to render manifests for them.

Idempotence of ``apply_manifests``: every object carries the digest of its bundle as an
annotation. The operation first reads the live objects' annotations (one ``kubectl get``):
all present with the same digest means nothing to do, no apply. An object missing means one
``kubectl apply --server-side``. Otherwise ``kubectl diff --server-side`` decides: no difference is
no change; a difference is one apply.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml
from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.exceptions import PyinfraError

from ..facts.k8s import (
    FIELD_MANAGER,
    HelmRelease,
    KubeCluster,
    KubeLiveObjects,
    KubeNodes,
    KubeServerSideDiff,
    kubeconfig_option,
    kubeconfig_words,
    kubectl,
    object_key,
    with_stdin,
)
from ..foundations.pyinfra_api import Commands
from . import probes
from .failure import failing_command

BUNDLE_ANNOTATION = "gpu-node.io/bundle"
DIGEST_ANNOTATION = "gpu-node.io/digest"


class KubeUnavailableError(PyinfraError):
    """kubectl missing, kubeconfig unreadable or the API server unreachable on a control-plane host."""


def manifest_documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a rendered manifest."""
    return [document for document in yaml.safe_load_all(text) if document]


class _BlockStyleDumper(yaml.SafeDumper):
    """Multi-line strings (config files in ConfigMaps) as readable ``|`` blocks."""


_BlockStyleDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)


def dump_documents(documents: list[dict[str, Any]]) -> str:
    return yaml.dump_all(documents, Dumper=_BlockStyleDumper, sort_keys=False, default_flow_style=False, width=1000)


def stamp_manifest(text: str, bundle: str) -> tuple[str, str]:
    """
    The manifest with every object annotated with the bundle name and the digest of the
    bundle's content (computed before stamping), and that digest.
    """
    documents = manifest_documents(text)
    canonical = dump_documents(documents)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:20]
    for document in documents:
        annotations = document.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[BUNDLE_ANNOTATION] = bundle
        annotations[DIGEST_ANNOTATION] = digest
    return dump_documents(documents), digest


def unavailable_message(kubeconfig: str | None, error: str) -> str:
    return f"cannot use the cluster with {kubeconfig_words(kubeconfig)}: {error}"


def require_cluster(kubeconfig: str | None) -> dict[str, Any]:
    """
    The ``KubeCluster`` fact of the current host, or ``KubeUnavailableError`` naming the host
    and the kubeconfig (the one kubectl read, where it found one) when kubectl is missing or the
    API server does not answer.
    """
    cluster = host.get_fact(KubeCluster, kubeconfig=kubeconfig)
    if not cluster["reachable"]:
        raise KubeUnavailableError(
            f"{host.name}: {unavailable_message(cluster['kubeconfig'] or kubeconfig, cluster['error'])}"
        )
    return cluster


@operation()
def apply_manifests(manifest: str, kubeconfig: str | None, bundle: str, field_manager: str = FIELD_MANAGER) -> Commands:
    """
    Server-side apply a rendered manifest (several YAML documents) as one named bundle.

    + manifest: the rendered YAML (unstamped)
    + bundle: a short name, kept in the ``gpu-node.io/bundle`` annotation
    """
    stamped, digest = stamp_manifest(manifest, bundle)
    wanted = {object_key(document) for document in manifest_documents(stamped)}

    live = host.get_fact(KubeLiveObjects, kubeconfig=kubeconfig, manifest=stamped)
    if live["objects"] is None:
        yield failing_command(unavailable_message(kubeconfig, live["error"]))
        return
    if all(live["objects"].get(key, {}).get(DIGEST_ANNOTATION) == digest for key in wanted):
        host.noop(f"{bundle}: {len(wanted)} objects are applied at digest {digest}")
        return

    # A missing object is a change: no diff then (the API server cannot dry-run objects in a
    # namespace the same manifest creates, "namespaces ... not found").
    if all(key in live["objects"] for key in wanted):
        diff = host.get_fact(KubeServerSideDiff, kubeconfig=kubeconfig, manifest=stamped, field_manager=field_manager)
        if diff["changed"] is None:
            yield failing_command(unavailable_message(kubeconfig, f"kubectl diff: {diff['error']}"))
            return
        if not diff["changed"]:
            host.noop(f"{bundle}: the cluster already matches")
            return
    yield with_stdin(
        stamped,
        kubectl(
            kubeconfig,
            "apply",
            "--server-side",
            f"--field-manager={field_manager}",
            "--force-conflicts",
            "-f",
            "-",
        ),
    )


def labels_to_change(current: dict[str, str], wanted: dict[str, str | None]) -> dict[str, str | None]:
    """The labels whose value differs; None means the label must be absent."""
    return {
        key: value
        for key, value in sorted(wanted.items())
        if (value is None and key in current) or (value is not None and current.get(key) != value)
    }


@operation()
def label_node(kubeconfig: str | None, node: str, labels: dict[str, str | None]) -> Commands:
    """
    Set (or, for a None value, remove) labels on one node, only those that differ;
    one ``kubectl label`` for all of them.
    """
    nodes = host.get_fact(KubeNodes, kubeconfig=kubeconfig)
    if nodes["nodes"] is None:
        yield failing_command(unavailable_message(kubeconfig, nodes["error"]))
        return
    if node not in nodes["nodes"]:
        yield failing_command(f"no Kubernetes node named {node!r} (set kube_node_names)")
        return
    changes = labels_to_change(nodes["nodes"][node], labels)
    if not changes:
        host.noop(f"node {node} has its labels")
        return
    arguments = [QuoteString(f"{key}-" if value is None else f"{key}={value}") for key, value in changes.items()]
    yield kubectl(kubeconfig, "label", "node", QuoteString(node), "--overwrite", *arguments)


def smoke_test_report(run: dict[str, Any]) -> str:
    """One line saying what happened to the smoke pod (and why, when it did not pass)."""
    if not run["created"]:
        return f"smoke pod not created: {run['create_error']}"
    if run["passed"]:
        return "smoke test passed: the vector-add pod logged 'Test PASSED'"
    phase = run["phase"] or "Unknown"
    if phase in ("Pending", "Unknown"):
        reasons = [item for item in [run["scheduled"], *run["waiting"]] if item and not item.startswith("True")]
        why = "; ".join(reasons) or "no reason reported"
        return f"smoke pod still {phase} after the timeout: {why}"
    tail = " | ".join(run["log"][-3:]) or "no log"
    return f"smoke pod {phase} without 'Test PASSED' in its log: {tail}"


@operation()
def run_smoke_test(kubeconfig: str | None, manifest: str, namespace: str, pod: str, timeout: int) -> Commands:
    """
    Run the vector-add pod once (bounded wait), check its log for ``Test PASSED``, delete it.
    The pod is transient (the cluster ends as it was), so a pass is no change; anything else
    fails the operation with the reason (the scheduler's, when the pod stayed pending).
    """
    if not probes.executing(host):
        # A probe: the pod runs once, when executing, after the device plugin has been applied.
        return
    run = probes.run(
        host,
        probes.SmokeTestRun,
        kubeconfig=kubeconfig,
        manifest=manifest,
        namespace=namespace,
        pod=pod,
        timeout=timeout,
    )
    report = smoke_test_report(run)
    if run["created"] and not run["deleted"]:
        report += f" (and the pod {namespace}/{pod} could not be deleted)"
    if not run["passed"]:
        yield failing_command(report)
        return
    logger.info(f"{host.print_prefix}{report}")
    host.noop(report)


HELM_RELEASE = "nvdp"
HELM_CHART = "nvidia-device-plugin"
HELM_REPO_URL = "https://nvidia.github.io/k8s-device-plugin"


@operation()
def helm_upgrade_device_plugin(kubeconfig: str | None, namespace: str, chart_version: str, values: str) -> Commands:
    """
    ``helm upgrade --install`` the nvdp/nvidia-device-plugin chart at a pinned version with
    these values, unless the release is deployed at that version with exactly these values.
    """
    yield from helm_upgrade._inner(
        kubeconfig=kubeconfig,
        namespace=namespace,
        release=HELM_RELEASE,
        chart=HELM_CHART,
        repo=HELM_REPO_URL,
        chart_version=chart_version,
        values=values,
    )


@operation()
def helm_upgrade(
    kubeconfig: str | None, namespace: str, release: str, chart: str, repo: str | None, chart_version: str, values: str
) -> Commands:
    """
    ``helm upgrade --install`` ``chart`` (from ``repo``; None: ``chart`` is an oci:// reference) at a
    pinned version with these values, unless ``release`` is deployed at that version with exactly these values.
    """
    found = host.get_fact(HelmRelease, kubeconfig=kubeconfig, namespace=namespace, release=release)
    if not found["helm"] or found["error"]:
        yield failing_command(unavailable_message(kubeconfig, f"helm: {found['error']}"))
        return
    wanted_values = yaml.safe_load(values) or {}
    chart_name = chart.rsplit("/", 1)[-1]
    if (
        found["exists"]
        and found["chart"] == f"{chart_name}-{chart_version}"
        and found["status"] == "deployed"
        and found["values"] == wanted_values
    ):
        host.noop(f"helm release {release} is {chart_name}-{chart_version} with these values")
        return
    yield with_stdin(
        values,
        StringCommand(
            "helm",
            kubeconfig_option(kubeconfig),
            "upgrade",
            "--install",
            QuoteString(release),
            QuoteString(chart),
            *(("--repo", QuoteString(repo)) if repo else ()),
            "--version",
            QuoteString(chart_version),
            "--namespace",
            QuoteString(namespace),
            "--create-namespace",
            "--wait",
            "--values",
            "-",
        ),
    )
