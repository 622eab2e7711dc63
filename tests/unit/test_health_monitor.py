"""
node-problem-detector on the GPU nodes (gpu_health_monitor=npd; deploy/k8s/health_monitor.py): the
custom plugin monitor's config held to the fields node-problem-detector documents for it (its
docs/custom_plugin_monitor.md and the config types of pkg/custompluginmonitor/types, written here as
a JSON Schema and the rules its Validate() applies at startup), and the DaemonSet placed on every GPU
node the cluster deploy labels, DRA's too, and on no other. No node-problem-detector runs here: the
schema matrix (test_k8s_schemas.py) checks the objects against Kubernetes' own schemas, and running
the official image is the lab's (docs/cluster.md says what is not run).
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml

from deploy.facts.gpu_node_identity import GpuNode
from deploy.health import check
from deploy.health.settings import CONFIG_PATH
from deploy.k8s import health_monitor
from deploy.operations.kubectl import manifest_documents
from deploy.settings import parse_settings
from deploy.tasks import archives, boot, health
from deploy.tasks.k8s import node_labels

# Go's time.ParseDuration, as NPD reads invoke_interval and timeout: a sequence of number+unit.
GO_DURATION = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
CONDITION = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "reason", "message"],
    "properties": {
        "type": {"type": "string", "minLength": 1},
        "reason": {"type": "string"},
        "message": {"type": "string"},
    },
}
# The custom plugin monitor's documented fields, and no other (an unknown key is silently ignored by
# NPD's JSON decoding: a misspelt one would leave the default in force without a word).
NPD_CUSTOM_PLUGIN_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "required": ["plugin", "source", "conditions", "rules"],
    "properties": {
        "plugin": {"const": "custom"},
        "pluginConfig": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "invoke_interval": {"type": "string", "pattern": GO_DURATION},
                "timeout": {"type": "string", "pattern": GO_DURATION},
                "max_output_length": {"type": "integer", "minimum": 1},
                "concurrency": {"type": "integer", "minimum": 1},
                "enable_message_change_based_condition_update": {"type": "boolean"},
                "skip_initial_status": {"type": "boolean"},
            },
        },
        "source": {"type": "string", "minLength": 1},
        "metricsReporting": {"type": "boolean"},
        "conditions": {"type": "array", "items": CONDITION},
        "rules": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "reason", "path"],
                "properties": {
                    "type": {"enum": ["temporary", "permanent"]},
                    "condition": {"type": "string"},
                    "reason": {"type": "string", "minLength": 1},
                    "path": {"type": "string", "pattern": "^/"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "timeout": {"type": "string", "pattern": GO_DURATION},
                    "invoke_interval": {"type": "string", "pattern": GO_DURATION},
                },
            },
        },
    },
}


def seconds(duration: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(number) * units[unit] for number, unit in re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", duration))


def npd_config_problems(config: dict) -> list[str]:
    """What NPD would refuse or ignore in a custom plugin monitor config: the documented fields (schema),
    then its startup Validate()'s rules (a rule's timeout within the global one, every permanent rule's
    condition among the default conditions)."""
    found = [error.message for error in jsonschema.Draft202012Validator(NPD_CUSTOM_PLUGIN_CONFIG).iter_errors(config)]
    if found:
        return found
    global_timeout = seconds(config.get("pluginConfig", {}).get("timeout", "5s"))  # NPD's default: 5s
    conditions = {condition["type"] for condition in config["conditions"]}
    for rule in config["rules"]:
        if "timeout" in rule and seconds(rule["timeout"]) > global_timeout:
            found.append(f"rule {rule['reason']}: its timeout is above the global timeout")
        if rule["type"] == "permanent" and rule.get("condition") not in conditions:
            found.append(f"rule {rule['reason']}: permanent problem {rule.get('condition')!r} has no default condition")
    return found


def bundle(**data) -> dict[str, dict]:
    documents = manifest_documents(health_monitor.render(parse_settings({"gpu_health_monitor": "npd", **data})))
    return {document["kind"]: document for document in documents}


def plugin_config(**data) -> dict:
    configmap = bundle(**data)["ConfigMap"]
    (text,) = configmap["data"].values()
    return json.loads(text)


def test_the_config_holds_only_the_fields_npd_documents_and_passes_its_startup_checks():
    config = plugin_config()
    assert npd_config_problems(config) == []
    assert config["pluginConfig"]["max_output_length"] == 80  # the check's one line (its --npd contract)


@pytest.mark.parametrize(
    "broken, says",
    [
        (
            lambda config: config["pluginConfig"].update(invoke_intervall="60s"),
            "Additional properties are not allowed ('invoke_intervall' was unexpected)",
        ),
        (lambda config: config["rules"][0].update(timeout="60s"), "its timeout is above the global timeout"),
        (lambda config: config["rules"][0].update(condition="GPUProblem"), "has no default condition"),
        (lambda config: config["pluginConfig"].update(timeout="30 seconds"), "does not match"),
    ],
)
def test_the_config_check_can_fail(broken, says):
    config = plugin_config()
    broken(config)
    assert any(says in problem for problem in npd_config_problems(config)), npd_config_problems(config)


def test_the_plugin_runs_the_health_check_in_the_hosts_namespaces_and_sets_one_condition():
    config = plugin_config(gpu_health_monitor_interval="2min")
    (rule,) = config["rules"]
    assert [rule["path"], *rule["args"]] == [
        "/usr/bin/nsenter",
        "--target",
        "1",
        "--mount",
        "--uts",
        "--ipc",
        "--pid",
        "--",
        "/usr/bin/python3",
        "-I",
        "/usr/lib/gpu-node/gpu-node-health.pyz",
        "--npd",
    ]
    assert rule["type"] == "permanent" and rule["condition"] == "GPUUnhealthy"
    assert config["conditions"] == [
        {"type": "GPUUnhealthy", "reason": "GPUsHealthy", "message": "gpu-node's health check finds no problem"}
    ]
    # a systemd time span in the settings, Go's duration in NPD's config
    assert config["pluginConfig"]["invoke_interval"] == "120s"
    pod = bundle()["DaemonSet"]["spec"]["template"]["spec"]
    # PID 1 is the host's only where the pod shares the host's PID namespace; nsenter needs privilege
    assert pod["hostPID"] is True and pod["containers"][0]["securityContext"] == {"privileged": True}


def exec_lines(unit: str, key: str) -> list[list[str]]:
    return [line.split("=", 1)[1].lstrip("-").split() for line in unit.splitlines() if line.startswith(f"{key}=")]


def test_the_plugin_runs_the_check_every_gpu_node_installs_as_the_nodes_own_units_run_it():
    """The command after nsenter's ``--`` is what deploy/tasks/health.py's service and the first-boot unit
    run (interpreter, -I, the archive deploy/tasks/archives.py puts), with --npd; without --config, the
    check reads the settings file the health stage writes; NPD keeps as much of its output as --npd prints."""
    settings = parse_settings({})
    files = health.wanted_files(settings)
    ((*service, config_flag, config),) = exec_lines(files[f"{health.UNIT_DIR}/{health.SERVICE}"][0], "ExecStart")
    ((*at_boot, _, _),) = exec_lines(boot.wanted_files(settings)[f"{boot.UNIT_DIR}/{boot.SERVICE}"][0], "ExecStartPost")
    (rule,) = plugin_config()["rules"]
    npd = rule["args"][rule["args"].index("--") + 1 :]
    assert npd == [*service, "--npd"] and service == at_boot and service[2] == archives.HEALTH.path
    assert (config_flag, config) == ("--config", CONFIG_PATH) and CONFIG_PATH in files
    assert plugin_config()["pluginConfig"]["max_output_length"] == check.NPD_LINE


def test_the_daemonset_runs_the_pinned_image_with_the_custom_plugin_monitor_alone():
    image = "mirror.example:5000/npd:v0.8.21@sha256:" + "ab" * 32
    objects = bundle(npd_image=image)
    (container,) = objects["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image
    # its own command: the image's entrypoint would start NPD's kernel and readonly log monitors too
    assert container["command"] == [
        "/node-problem-detector",
        "--logtostderr",
        "--config.custom-plugin-monitor=/config/gpu-node-health.json",
    ]
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == "/config" and objects["DaemonSet"]["spec"]["template"]["spec"]["volumes"] == [
        {"name": mount["name"], "configMap": {"name": objects["ConfigMap"]["metadata"]["name"]}}
    ]
    assert list(objects["ConfigMap"]["data"]) == ["gpu-node-health.json"]
    # Kubernetes' own role for node-problem-detector, bound to the DaemonSet's account
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:node-problem-detector",
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": objects["ServiceAccount"]["metadata"]["name"],
            "namespace": objects["Namespace"]["metadata"]["name"],
        }
    ]


def selected(affinity: dict, labels: dict[str, str]) -> bool:
    """Kubernetes' rule for requiredDuringScheduling node affinity with In expressions: any term whose
    expressions all match."""
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(expression["operator"] == "In" for term in terms for expression in term["matchExpressions"])
    return any(
        all(labels.get(expression["key"]) in expression["values"] for expression in term["matchExpressions"])
        for term in terms
    )


def labelled(data: dict) -> dict[str, str]:
    """The labels the cluster deploy gives a GPU node with these settings (deploy/tasks/k8s.py's node_labels)."""
    settings = parse_settings(data)
    node = GpuNode(
        host_name="gpu1",
        node_name="gpu1",
        products=("NVIDIA A100-SXM4-40GB",),
        pci_gpus=1,
        nvidia_smi="ok",
        gpu_sharing=settings.gpu_sharing,
        nvidia_runtime_default=settings.nvidia_runtime_default,
        settings=settings,
    )
    return {key: value for key, value in node_labels(node).items() if value is not None}


@pytest.mark.parametrize(
    "data",
    [{}, {"gpu_sharing": "time-slicing"}, {"gpu_sharing": "gpushare"}, {"gpu_allocator": "dra"}],
    ids=["device-plugin", "time-slicing", "gpushare", "dra"],
)
def test_every_gpu_node_the_cluster_deploy_labels_runs_it(data):
    affinity = bundle()["DaemonSet"]["spec"]["template"]["spec"]["affinity"]
    assert selected(affinity, labelled(data))


def test_a_node_without_gpu_labels_does_not_run_it_and_every_taint_is_tolerated():
    pod = bundle()["DaemonSet"]["spec"]["template"]["spec"]
    assert not selected(pod["affinity"], {"kubernetes.io/os": "linux", "node-role.kubernetes.io/control-plane": ""})
    # a quarantined node (gpu-node.nvidia.com/gpu-unhealthy:NoSchedule) keeps its monitor
    assert pod["tolerations"] == [{"operator": "Exists"}]


def test_the_namespace_admits_the_privileged_pod_where_pod_security_is_enforced():
    assert bundle()["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_config_map_is_the_json_npd_reads():
    """The ConfigMap's text is JSON (NPD reads the file with Go's encoding/json) and YAML reads it back as written."""
    text = health_monitor.render(parse_settings({"gpu_health_monitor": "npd"}))
    (configmap,) = [document for document in yaml.safe_load_all(text) if document and document["kind"] == "ConfigMap"]
    assert json.loads(configmap["data"]["gpu-node-health.json"]) == health_monitor.plugin_config(60)
