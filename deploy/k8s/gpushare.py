"""
Pure helpers for GPU memory sharing with Aliyun's gpushare scheduler extender.

Nothing here touches a host: the scheduler config is built from the cluster version, and the
kube-scheduler static pod is edited as text in, text out, so both are tested on fixtures.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pyinfra.api.exceptions import PyinfraError

from ..foundations import node_text, templates

MANAGED_RESOURCE = "aliyun.com/gpu-mem"
EXTENDER_NAME = "gpushare-schd-extender"
EXTENDER_PORT = 12345
EXTENDER_NODE_PORT = 32766
# The scheduler runs with hostNetwork on the control plane and reaches the extender's NodePort.
EXTENDER_URL_PREFIX = f"http://127.0.0.1:{EXTENDER_NODE_PORT}/gpushare-scheduler"
SCHEDULER_KUBECONFIG = "/etc/kubernetes/scheduler.conf"
SCHEDULER_MANIFEST = "/etc/kubernetes/manifests/kube-scheduler.yaml"
SCHEDULER_CONTAINER = "kube-scheduler"
CONFIG_VOLUME = "gpushare-scheduler-config"
# A change of the config file must restart the scheduler: the kubelet recreates a static pod
# only when its manifest changes, so the manifest carries the config's checksum.
CONFIG_CHECKSUM_ANNOTATION = "gpu-node.io/scheduler-config-sha256"
NODE_LABEL = "gpushare"

SCHEDULER_CONFIG_GROUP = "kubescheduler.config.k8s.io"
MIN_MINOR = 23  # kubescheduler.config.k8s.io/v1beta3 arrived in 1.23
V1_MINOR = 25  # .../v1 arrived in 1.25
MASTER_LABEL_LAST_MINOR = 23  # kubeadm 1.24 stopped labelling control-plane nodes "master"
MASTER_TAINT_LAST_MINOR = 24  # kubeadm 1.25 stopped tainting them "master"


class GpushareError(PyinfraError):
    """gpushare cannot be set up as asked: raised with a one-line reason."""


class ManifestError(GpushareError):
    """The kube-scheduler static pod cannot be edited safely; it is left as it is."""


def kube_minor(version: Any) -> int:
    """The minor of a Kubernetes 1.x version: "v1.28.3", "1.28", "v1.29.1+k3s1" or (1, 28)."""
    if isinstance(version, (tuple, list)) and len(version) >= 2:
        major, minor = int(version[0]), int(version[1])
    else:
        match = re.match(r"^v?(\d+)\.(\d+)", str(version).strip())
        if not match:
            raise GpushareError(f"cannot read a Kubernetes version from {str(version)!r}")
        major, minor = int(match.group(1)), int(match.group(2))
    if major != 1:
        raise GpushareError(f"Kubernetes {major}.{minor} is not a 1.x version gpushare knows")
    return minor


def scheduler_config_api_version(version: Any) -> str:
    """The KubeSchedulerConfiguration apiVersion to write for a cluster of this version."""
    minor = kube_minor(version)
    if minor < MIN_MINOR:
        raise GpushareError(
            f"gpushare needs Kubernetes >= 1.{MIN_MINOR} (KubeSchedulerConfiguration v1beta3 or v1); "
            f"the cluster runs 1.{minor}"
        )
    return f"{SCHEDULER_CONFIG_GROUP}/{'v1' if minor >= V1_MINOR else 'v1beta3'}"


def scheduler_config(
    version: Any, url_prefix: str = EXTENDER_URL_PREFIX, kubeconfig: str = SCHEDULER_KUBECONFIG
) -> dict[str, Any]:
    """The kube-scheduler config that calls the gpushare extender for filter and bind."""
    return {
        "apiVersion": scheduler_config_api_version(version),
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "extenders": [
            {
                "urlPrefix": url_prefix,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "enableHTTPS": False,
                "nodeCacheCapable": True,
                "managedResources": [{"name": MANAGED_RESOURCE, "ignoredByScheduler": False}],
                "ignorable": False,
            }
        ],
    }


def dump_yaml(data: Any) -> str:
    """YAML as kubeadm writes it: block style, keys in the order given, no line folding."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1 << 20)


def scheduler_config_yaml(version: Any, **kwargs: Any) -> str:
    return dump_yaml(scheduler_config(version, **kwargs))


def control_plane_placement(version: Any) -> dict[str, Any]:
    """
    nodeSelector / affinity and tolerations that put the extender on a control-plane node.
    Clusters older than 1.24 may carry only the old ``master`` label, so they select either label.
    """
    minor = kube_minor(version)
    control_plane = "node-role.kubernetes.io/control-plane"
    master = "node-role.kubernetes.io/master"
    placement: dict[str, Any] = {}
    if minor <= MASTER_LABEL_LAST_MINOR:
        placement["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": control_plane, "operator": "Exists"}]},
                        {"matchExpressions": [{"key": master, "operator": "Exists"}]},
                    ]
                }
            }
        }
    else:
        placement["nodeSelector"] = {control_plane: ""}
    tolerations = [{"key": control_plane, "operator": "Exists", "effect": "NoSchedule"}]
    if minor <= MASTER_TAINT_LAST_MINOR:
        tolerations.append({"key": master, "operator": "Exists", "effect": "NoSchedule"})
    tolerations.append(
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists", "effect": "NoSchedule"}
    )
    placement["tolerations"] = tolerations
    return placement


NAMESPACE = "kube-system"
DEVICE_PLUGIN_NAME = "gpushare-device-plugin"


def extender_manifest(version: Any, image: str) -> str:
    """The extender's RBAC, Deployment (on a control-plane node) and NodePort Service."""
    return templates.render(
        "k8s/gpushare/extender.yaml.j2",
        object_name=EXTENDER_NAME,
        namespace=NAMESPACE,
        image=image,
        port=EXTENDER_PORT,
        node_port=EXTENDER_NODE_PORT,
        placement=control_plane_placement(version),
    )


def device_plugin_manifest(image: str, memory_unit: str) -> str:
    """The gpushare device plugin's RBAC and DaemonSet, on the nodes labelled gpushare=true."""
    if memory_unit not in ("GiB", "MiB"):
        raise GpushareError(f"gpushare memory unit must be GiB or MiB, not {memory_unit!r}")
    return templates.render(
        "k8s/gpushare/device-plugin.yaml.j2",
        object_name=DEVICE_PLUGIN_NAME,
        namespace=NAMESPACE,
        image=image,
        memory_unit=memory_unit,
        node_label=NODE_LABEL,
    )


# The kube-scheduler static pod.


def _scheduler_pod(text: str) -> dict[str, Any]:
    try:
        pod = node_text.parsed(yaml.safe_load, text, "it")
    except node_text.UnreadableText as error:
        raise ManifestError(str(error)) from None
    except yaml.YAMLError as error:
        raise ManifestError(f"not valid YAML ({node_text.syntax_error(error, text)})") from None
    if not isinstance(pod, dict) or pod.get("kind") != "Pod" or pod.get("apiVersion") != "v1":
        raise ManifestError("not a v1 Pod manifest")
    if not isinstance(pod.get("metadata"), dict) or not isinstance(pod.get("spec"), dict):
        raise ManifestError("a Pod without metadata or spec")
    return pod


def _scheduler_container(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod["spec"].get("containers")
    if not isinstance(containers, list):
        raise ManifestError("spec.containers is not a list")
    named = [item for item in containers if isinstance(item, dict) and item.get("name") == SCHEDULER_CONTAINER]
    if len(named) != 1:
        raise ManifestError(f"expected one container named {SCHEDULER_CONTAINER}, found {len(named)}")
    return named[0]


def _argument_list(container: dict[str, Any]) -> list[Any]:
    key = "command" if isinstance(container.get("command"), list) else "args"
    arguments = container.get(key)
    if not isinstance(arguments, list) or not all(isinstance(item, str) for item in arguments):
        raise ManifestError(f"container {SCHEDULER_CONTAINER} has no command or args list of strings")
    return arguments


def _config_flags(container: dict[str, Any]) -> list[str]:
    flags = []
    for key in ("command", "args"):
        for item in container.get(key) or []:
            if isinstance(item, str) and (item == "--config" or item.startswith("--config=")):
                flags.append(item)
    return flags


def _list_field(parent: dict[str, Any], key: str, where: str) -> list[Any]:
    value = parent.setdefault(key, [])
    if not isinstance(value, list):
        raise ManifestError(f"{where}.{key} is not a list")
    return value


def edit_scheduler_manifest(text: str, config_path: str, config_sha256: str | None = None) -> str:
    """
    The kube-scheduler static pod with ``--config=<config_path>``, its hostPath volume and mount
    (each exactly once) and the config's checksum annotation; every other field kept as it is.
    Returns ``text`` itself when nothing is to change; raises ManifestError (manifest untouched)
    when the pod already points elsewhere.
    """
    pod = _scheduler_pod(text)
    container = _scheduler_container(pod)
    changed = False
    flag = f"--config={config_path}"

    flags = _config_flags(container)
    if flags and flags != [flag]:
        raise ManifestError(
            f"kube-scheduler already runs with {', '.join(flags)}: refusing to replace another "
            "scheduler config (merge the gpushare extender into it by hand, or remove the flag)"
        )
    if not flags:
        arguments = _argument_list(container)
        # kubeadm writes flags sorted: keep them so.
        position = next(
            (index for index, item in enumerate(arguments) if item.startswith("--") and item > flag),
            len(arguments),
        )
        arguments.insert(position, flag)
        changed = True

    mounts = _list_field(container, "volumeMounts", f"container {SCHEDULER_CONTAINER}")
    volumes = _list_field(pod["spec"], "volumes", "spec")
    mount = {"mountPath": config_path, "name": CONFIG_VOLUME, "readOnly": True}
    volume = {"hostPath": {"path": config_path, "type": "File"}, "name": CONFIG_VOLUME}
    for items, wanted, kind in ((mounts, mount, "volumeMount"), (volumes, volume, "volume")):
        same_name = [item for item in items if isinstance(item, dict) and item.get("name") == CONFIG_VOLUME]
        if kind == "volumeMount":
            same_name += [
                item
                for item in items
                if isinstance(item, dict) and item.get("mountPath") == config_path and item not in same_name
            ]
        if same_name == [wanted]:
            continue
        if same_name:
            raise ManifestError(
                f"a {kind} named {CONFIG_VOLUME} or at {config_path} exists but differs from "
                f"{wanted}: refusing to guess"
            )
        items.append(wanted)
        changed = True

    if config_sha256 is not None:
        metadata = pod["metadata"]
        annotations = metadata.get("annotations")
        if annotations is None:
            # Keys sorted, as kubeadm writes them: "annotations" comes first in metadata.
            pod["metadata"] = metadata = {"annotations": {}, **metadata}
            annotations = metadata["annotations"]
        if not isinstance(annotations, dict):
            raise ManifestError("metadata.annotations is not a mapping")
        if annotations.get(CONFIG_CHECKSUM_ANNOTATION) != config_sha256:
            annotations[CONFIG_CHECKSUM_ANNOTATION] = config_sha256
            changed = True

    return dump_yaml(pod) if changed else text


def check_scheduler_manifest(text: str, config_path: str) -> None:
    """
    Validate an edited kube-scheduler manifest before it goes near the manifests folder: a v1 Pod
    with the kube-scheduler container, an image, the flag, mount and hostPath volume exactly once.
    """
    pod = _scheduler_pod(text)
    if not pod["metadata"].get("name"):
        raise ManifestError("the Pod has no metadata.name")
    container = _scheduler_container(pod)
    if not isinstance(container.get("image"), str) or not container["image"]:
        raise ManifestError(f"container {SCHEDULER_CONTAINER} has no image")
    if _config_flags(container) != [f"--config={config_path}"]:
        raise ManifestError(f"expected --config={config_path} exactly once")
    mounts = [
        item
        for item in container.get("volumeMounts") or []
        if isinstance(item, dict) and item.get("mountPath") == config_path
    ]
    if len(mounts) != 1:
        raise ManifestError(f"expected one volumeMount at {config_path}, found {len(mounts)}")
    volumes = [
        item
        for item in pod["spec"].get("volumes") or []
        if isinstance(item, dict) and item.get("name") == mounts[0].get("name")
    ]
    if len(volumes) != 1 or (volumes[0].get("hostPath") or {}).get("path") != config_path:
        raise ManifestError(f"expected one hostPath volume {mounts[0].get('name')} for {config_path}")
    names = [item.get("name") for item in pod["spec"]["volumes"] if isinstance(item, dict)]
    if len(names) != len(set(names)):
        raise ManifestError("volume names are not unique")
