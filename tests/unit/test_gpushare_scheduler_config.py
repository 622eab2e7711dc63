"""
The KubeSchedulerConfiguration gpushare writes, checked against a strict model of the official
Go types (k8s.io/kube-scheduler/config/v1 and v1beta3: KubeSchedulerConfiguration, Extender,
ExtenderManagedResource, ExtenderTLSConfig, KubeSchedulerProfile, and component-base's
LeaderElectionConfiguration / ClientConnectionConfiguration), with unknown fields rejected.
kubernetes-validate has no schema for this kind (it only warns), hence this model.
"""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from deploy.k8s.gpushare import (
    EXTENDER_URL_PREFIX,
    MANAGED_RESOURCE,
    GpushareError,
    scheduler_config,
    scheduler_config_api_version,
    scheduler_config_yaml,
)

# The KubeSchedulerConfiguration versions each kube-scheduler release serves, from the Kubernetes
# changelog and KEP-785 (sig-scheduling/785-scheduler-component-config-api): v1beta1 was removed in
# 1.23 (kubernetes/kubernetes#104782), v1beta2 arrived in 1.22 and was removed in 1.28 (#117649),
# v1beta3 arrived in 1.23 and was removed in 1.29 (#119994), v1 arrived in 1.25 (GA). The tool's choice is checked against these facts, never against itself.
SERVED_BY_RELEASE = {
    "1.23": {"v1beta2", "v1beta3"},
    "1.24": {"v1beta2", "v1beta3"},
    "1.25": {"v1beta2", "v1beta3", "v1"},
    "1.26": {"v1beta2", "v1beta3", "v1"},
    "1.27": {"v1beta2", "v1beta3", "v1"},
    "1.28": {"v1beta3", "v1"},
    "1.29": {"v1"},
    "1.30": {"v1"},
    "1.31": {"v1"},
    "1.32": {"v1"},
    "1.33": {"v1"},
}
NEWEST_FIRST = ("v1", "v1beta3", "v1beta2")


def served_by(cluster_version: str) -> set[str]:
    release = ".".join(cluster_version.lstrip("v").split(".")[:2])
    return {f"kubescheduler.config.k8s.io/{version}" for version in SERVED_BY_RELEASE[release]}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpushare"


def strict(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
INT64 = {"type": "integer"}
DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
BYTES = {"type": "string"}  # []byte: base64 in JSON

LEADER_ELECTION = strict(
    {
        "leaderElect": BOOLEAN,
        "leaseDuration": DURATION,
        "renewDeadline": DURATION,
        "retryPeriod": DURATION,
        "resourceLock": STRING,
        "resourceName": STRING,
        "resourceNamespace": STRING,
    }
)
CLIENT_CONNECTION = strict(
    {
        "kubeconfig": STRING,
        "acceptContentTypes": STRING,
        "contentType": STRING,
        "qps": {"type": "number"},
        "burst": INT32,
    }
)
EXTENDER_TLS = strict(
    {
        "insecure": BOOLEAN,
        "serverName": STRING,
        "certFile": STRING,
        "keyFile": STRING,
        "caFile": STRING,
        "certData": BYTES,
        "keyData": BYTES,
        "caData": BYTES,
    }
)
MANAGED_RESOURCE_SCHEMA = strict({"name": STRING, "ignoredByScheduler": BOOLEAN}, ("name",))
EXTENDER = strict(
    {
        "urlPrefix": STRING,
        "filterVerb": STRING,
        "preemptVerb": STRING,
        "prioritizeVerb": STRING,
        "weight": INT64,
        "bindVerb": STRING,
        "enableHTTPS": BOOLEAN,
        "tlsConfig": EXTENDER_TLS,
        "httpTimeout": DURATION,
        "nodeCacheCapable": BOOLEAN,
        "managedResources": {"type": "array", "items": MANAGED_RESOURCE_SCHEMA},
        "ignorable": BOOLEAN,
    },
    ("urlPrefix",),
)
PLUGIN = strict({"name": STRING, "weight": INT32}, ("name",))
PLUGIN_SET = strict({"enabled": {"type": "array", "items": PLUGIN}, "disabled": {"type": "array", "items": PLUGIN}})
EXTENSION_POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
)
PROFILE = strict(
    {
        "schedulerName": STRING,
        "percentageOfNodesToScore": INT32,
        "plugins": strict({point: PLUGIN_SET for point in EXTENSION_POINTS}),
        "pluginConfig": {"type": "array", "items": strict({"name": STRING, "args": {"type": "object"}}, ("name",))},
    }
)


def kube_scheduler_configuration(api_version: str) -> dict:
    return strict(
        {
            "apiVersion": {"const": api_version},
            "kind": {"const": "KubeSchedulerConfiguration"},
            "parallelism": INT32,
            "leaderElection": LEADER_ELECTION,
            "clientConnection": CLIENT_CONNECTION,
            "enableProfiling": BOOLEAN,
            "enableContentionProfiling": BOOLEAN,
            "percentageOfNodesToScore": INT32,
            "podInitialBackoffSeconds": INT64,
            "podMaxBackoffSeconds": INT64,
            "profiles": {"type": "array", "items": PROFILE},
            "extenders": {"type": "array", "items": EXTENDER},
        },
        ("apiVersion", "kind"),
    )


# An extended resource name: a domain prefix outside kubernetes.io, as the scheduler's
# validation of managedResources requires.
EXTENDED_RESOURCE = re.compile(
    r"^(?!(.*\.)?kubernetes\.io/)[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def validate_scheduler_config(document: dict, cluster_version: str) -> None:
    """Schema per apiVersion, that apiVersion served by the cluster's kube-scheduler, and the
    cross-field rules of the scheduler's own validation for extenders."""
    served = served_by(cluster_version)
    if document.get("apiVersion") not in served:
        raise ValueError(f"{document.get('apiVersion')} is not served by Kubernetes {cluster_version} ({served})")
    jsonschema.validate(document, kube_scheduler_configuration(document["apiVersion"]))
    extenders = document.get("extenders", [])
    if sum(1 for extender in extenders if extender.get("bindVerb")) > 1:
        raise ValueError("only one extender can implement bind")
    for extender in extenders:
        if not re.match(r"^https?://", extender["urlPrefix"]):
            raise ValueError(f"urlPrefix {extender['urlPrefix']!r} is not an http(s) URL")
        if extender.get("prioritizeVerb") and extender.get("weight", 0) <= 0:
            raise ValueError("weight must be positive with a prioritizeVerb")
        for resource in extender.get("managedResources", []):
            if not EXTENDED_RESOURCE.match(resource["name"]):
                raise ValueError(f"{resource['name']} is not an extended resource name")


EXPECTED_EXTENDER = {
    "urlPrefix": EXTENDER_URL_PREFIX,
    "filterVerb": "filter",
    "bindVerb": "bind",
    "enableHTTPS": False,
    "nodeCacheCapable": True,
    "managedResources": [{"name": MANAGED_RESOURCE, "ignoredByScheduler": False}],
    "ignorable": False,
}


@pytest.mark.parametrize(
    "version, api_version",
    [
        ("1.23", "kubescheduler.config.k8s.io/v1beta3"),
        ("1.24", "kubescheduler.config.k8s.io/v1beta3"),
        ("1.25", "kubescheduler.config.k8s.io/v1"),
        ("1.28", "kubescheduler.config.k8s.io/v1"),
        ("1.31", "kubescheduler.config.k8s.io/v1"),
    ],
)
def test_scheduler_config_validates_strictly_for_the_cluster_version(version, api_version):
    text = scheduler_config_yaml(version)
    document = yaml.safe_load(text)
    validate_scheduler_config(document, version)
    assert document["apiVersion"] == api_version
    assert document["kind"] == "KubeSchedulerConfiguration"
    assert document["clientConnection"] == {"kubeconfig": "/etc/kubernetes/scheduler.conf"}
    assert document["extenders"] == [EXPECTED_EXTENDER]


def test_scheduler_config_golden_text_for_1_28():
    """tests/fixtures/gpushare/scheduler-config-v1.28.yaml: the real kube-scheduler v1.28.7 loads it
    (tests/e2e/test_gpushare_scheduler_config_real.py)."""
    assert scheduler_config_yaml("v1.28.2") == (FIXTURES / "scheduler-config-v1.28.yaml").read_text()


@pytest.mark.parametrize("release", sorted(SERVED_BY_RELEASE))
def test_the_config_version_is_the_newest_the_clusters_scheduler_serves(release):
    """A version the release's kube-scheduler no longer serves stops it from starting; an older one
    than needed is deprecated. The changelog's table above is the oracle."""
    newest = next(version for version in NEWEST_FIRST if version in SERVED_BY_RELEASE[release])
    assert scheduler_config_api_version(release) == f"kubescheduler.config.k8s.io/{newest}"
    assert scheduler_config_api_version(f"v{release}.3") == f"kubescheduler.config.k8s.io/{newest}"


@pytest.mark.parametrize("version", ["1.22", "v1.20.15", "1.16"])
def test_clusters_older_than_1_23_are_refused(version):
    with pytest.raises(GpushareError, match=r"gpushare needs Kubernetes >= 1.23 .* the cluster runs 1\.\d+"):
        scheduler_config_api_version(version)


@pytest.mark.parametrize("version", ["", "latest", "2.0"])
def test_unreadable_versions_are_refused(version):
    with pytest.raises(GpushareError):
        scheduler_config(version)


def test_the_model_rejects_what_upstream_ships_for_1_28_and_unknown_fields():
    """The strict model has teeth: v1beta2 (upstream's file, gone in 1.28), v1beta3 on 1.31
    (removed in 1.29), a misspelt field, and a second binder are all refused."""
    v1beta2 = {**scheduler_config("1.28"), "apiVersion": "kubescheduler.config.k8s.io/v1beta2"}
    with pytest.raises(ValueError, match="not served"):
        validate_scheduler_config(v1beta2, "1.28")
    v1beta3 = {**scheduler_config("1.31"), "apiVersion": "kubescheduler.config.k8s.io/v1beta3"}
    with pytest.raises(ValueError, match="not served"):
        validate_scheduler_config(v1beta3, "1.31")
    misspelt = scheduler_config("1.28")
    misspelt["extenders"][0]["nodeCacheCapabel"] = True
    with pytest.raises(jsonschema.ValidationError, match="nodeCacheCapabel"):
        validate_scheduler_config(misspelt, "1.28")
    top_level = {**scheduler_config("1.25"), "policy": {}}
    with pytest.raises(jsonschema.ValidationError, match="policy"):
        validate_scheduler_config(top_level, "1.25")
    two_binders = scheduler_config("1.28")
    two_binders["extenders"].append(dict(two_binders["extenders"][0]))
    with pytest.raises(ValueError, match="only one extender can implement bind"):
        validate_scheduler_config(two_binders, "1.28")
    wrong_type = scheduler_config("1.28")
    wrong_type["extenders"][0]["enableHTTPS"] = "false"
    with pytest.raises(jsonschema.ValidationError):
        validate_scheduler_config(wrong_type, "1.28")
