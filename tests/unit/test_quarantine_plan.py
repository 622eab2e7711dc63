"""
Plan tests of the fleet view's quarantine (deploy/fleet_view.py with fleet_quarantine=true): GPU nodes
on pyinfra's @fake connector whose NodeReports answer holds their health.json, and a control plane
whose kubectl is answered by a stand-in cluster (test_drain_plan.py's StandInCluster, grown by the
calls the quarantine makes: the nodes' list, a JSON patch applied by the jsonpatch library as the API
server applies RFC 6902, DeviceTaintRules and ResourceSlices). No Kubernetes API server runs here.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import shlex
from dataclasses import dataclass, field

import jsonpatch
import pyinfra
import pytest
import yaml
from hostile_reports import health_report
from plan import QUICK, Node, run_inventory
from pyinfra.api import Inventory
from pyinfra.facts.server import Hostname
from test_drain_plan import StandInCluster, kubectl_verb
from test_k8s_schemas import (
    schema_files_read_once,  # noqa: F401 (its schema cache, for this module too)
    schema_problem,
)

from deploy.facts.gpu_holders import DeviceHolders
from deploy.facts.reports import NodeReports
from deploy.k8s.quarantine import RECORD_ANNOTATION, TAINT_KEY, device_rule
from deploy.k8s.quarantine import Step as QuarantineStep
from deploy.operations.quarantine import apply_step
from deploy.reports.node_report import NodeRecord, Step, report_json
from deploy.settings import SettingsError

pytestmark = pytest.mark.usefixtures("both_modes")


@pytest.fixture(autouse=True)
def info_lines(caplog):
    """The quarantine's lines of what it left as it is, and why (pyinfra's logger, at INFO and above)."""
    caplog.set_level(logging.INFO)


CP = "@fake/cp1"
FLEET_VIEW = "deploy/fleet_view.py"
GPU_A, GPU_B = "0000:3b:00.0", "0000:86:00.0"
CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
# A run of one GPU node: its whole group may be quarantined (50%, the default, of one rounds down to none)
ONE_NODE = {"quarantine_max_percent": 100}


def health(status: str, checked_at: str = "2026-05-01T10:00:00+00:00", problems=()) -> dict:
    """A health report as the node's health check writes it (HealthReportFormat: the fleet view refuses any other)."""
    return health_report("node", status, tuple(problems), gpus=(GPU_A, GPU_B), checked_at=checked_at)


def problem(kind="xid", gpu=GPU_A, severity="fatal", line="Xid 79 on 0000:3b:00.0: GPU fallen off the bus") -> dict:
    return {"kind": kind, "gpu": gpu, "severity": severity, "line": line}


def reports_lines(host: str, health_report: dict | str | None) -> list[str]:
    """What the NodeReports fact's command prints: the node's boot report and its health.json."""

    def line(name: str, text: str) -> str:
        return f"report {base64.b64encode(name.encode()).decode()} 1000 {base64.b64encode(text.encode()).decode()}"

    boot = report_json([NodeRecord(host=host, gpus=[f"0x2331 at {GPU_A}"], steps=[Step("gpu_pci", "pass", "1 GPU")])])
    lines = [line("boot-report.json", json.dumps(boot))]
    if health_report is not None:
        lines.append(
            line("health.json", health_report if isinstance(health_report, str) else json.dumps(health_report))
        )
    return lines


@dataclass
class StandInGpuCluster(StandInCluster):
    """A stand-in kube-apiserver for the quarantine's calls: whole Node objects (taints, annotations, cordon,
    resourceVersion), JSON patches, DeviceTaintRules where ``served`` names their apiVersion, NVIDIA's
    ResourceSlices. ``changed_after_read``: another writer changes these nodes right after the quarantine
    read them (their resourceVersion moves on)."""

    objects: dict[str, dict] = field(default_factory=dict)
    served: str | None = None
    slices: list[dict] = field(default_factory=list)
    rules: dict[str, dict] = field(default_factory=dict)
    changed_after_read: tuple[str, ...] = ()
    writes: list[str] = field(default_factory=list)

    def node(self, name: str, taints=(), annotations=None, unschedulable=False, version=1) -> None:
        metadata = {"name": name, "resourceVersion": str(version)}
        if annotations is not None:
            metadata["annotations"] = dict(annotations)
        spec = {"unschedulable": True} if unschedulable else {}
        if taints:
            spec["taints"] = [dict(taint) for taint in taints]
        self.objects[name] = {"kind": "Node", "metadata": metadata, "spec": spec}

    def answer(self, command: str):
        if "api-resources" in command:
            return True, self.device_lines(), []
        verb, words = kubectl_verb(command)
        if verb == "get" and words[words.index("get") + 1] == "nodes":
            listed = {"kind": "List", "items": [copy.deepcopy(node) for node in self.objects.values()]}
            for name in self.changed_after_read:
                version = self.objects[name]["metadata"]["resourceVersion"]
                self.objects[name]["metadata"]["resourceVersion"] = str(int(version) + 1)
            return True, ["rc 0", "out " + json.dumps(listed)], []
        if verb in ("patch", "create", "delete"):
            self.writes.append(shlex.join(words[words.index(verb) :]))
        if verb == "patch":
            name = words[-1]  # kubectl patch --type=json -p PATCH -- node NAME
            try:
                patched = jsonpatch.apply_patch(self.objects[name], json.loads(words[words.index("-p") + 1]))
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                return False, [], [f"The request is invalid: the server rejected our request: {error}"]
            patched["metadata"]["resourceVersion"] = str(int(patched["metadata"]["resourceVersion"]) + 1)
            self.objects[name] = patched
            return True, [f"node/{name} patched"], []
        if verb == "create":
            text = shlex.split(command)[2]  # printf '%s\n' TEXT | kubectl ...
            for rule in yaml.safe_load_all(text):
                self.rules[rule["metadata"]["name"]] = rule
            return True, ["devicetaintrule created"], []
        if verb == "delete":
            for name in words[words.index("devicetaintrules") + 1 :]:
                self.rules.pop(name, None)
            return True, ["devicetaintrule deleted"], []
        return super().answer(command)

    def device_lines(self) -> list[str]:
        api = [f"devicetaintrules {self.served} false DeviceTaintRule"] if self.served else []
        lines = [
            "api-rc 0",
            *(f"api-out {line}" for line in ["resourceslices resource.k8s.io/v1 false ResourceSlice", *api]),
        ]
        lines += ["slices-rc 0", "slices-out " + json.dumps({"kind": "List", "items": self.slices})]
        if self.served:
            ours = [
                rule
                for rule in self.rules.values()
                if rule["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "gpu-node"
            ]
            lines += ["rules-rc 0", "rules-out " + json.dumps({"kind": "List", "items": ours})]
        else:
            lines += ["rules-rc 1", 'rules-err error: the server doesn\'t have a resource type "devicetaintrules"']
        return lines

    def taints(self, name: str) -> list[dict]:
        return self.objects[name]["spec"].get("taints", [])

    def record(self, name: str) -> dict | None:
        text = (self.objects[name]["metadata"].get("annotations") or {}).get(RECORD_ANNOTATION)
        return json.loads(text) if text else None


def slice_of(node: str, devices: dict[str, str]) -> dict:
    """NVIDIA's ResourceSlice of ``node`` (v1): device name -> its PCI address attribute."""
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-x"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": name,
                    "attributes": {"resource.kubernetes.io/pciBusID": {"string": pci}, "type": {"string": "gpu"}},
                }
                for name, pci in devices.items()
            ],
        },
    }


@dataclass
class Run:
    plan: object
    cluster: StandInGpuCluster

    @property
    def failed(self) -> list[str]:
        return sorted(host.name for host in self.plan.state.failed_hosts)


def run_view(
    monkeypatch,
    cluster: StandInGpuCluster,
    healths: dict[str, dict | str | None],
    data: dict | None = None,
    host_data: dict | None = None,
    holders: list[str] | None = None,
    hostnames: dict[str, str] | None = None,
) -> Run:
    """deploy/fleet_view.py --data fleet_quarantine=true over GPU nodes @fake/<name> (their hostname the name)
    and the control plane @fake/cp1."""
    monkeypatch.setattr(pyinfra, "is_cli", True)
    gpus = {f"@fake/{name}": {**QUICK, **(host_data or {}).get(name, {})} for name in healths}
    inventory = Inventory(
        ([*gpus.items(), (CP, QUICK)], {}),
        override_data={"fleet_quarantine": True, **(data or {})},
        gpu_nodes=(list(gpus), {}),
        control_plane=([CP], {}),
    )
    nodes = {
        f"@fake/{name}": Node(
            facts=[
                (NodeReports, reports_lines(name, report)),
                (Hostname, (hostnames or {}).get(name, name)),
                (DeviceHolders, holders or ["fuser"]),
            ]
        )
        for name, report in healths.items()
    }
    nodes[CP] = Node(stand_in=cluster.answer)
    return Run(run_inventory(inventory, nodes, FLEET_VIEW), cluster)


def quarantine_lines(caplog) -> list[str]:
    return [
        record.getMessage().split("quarantine", 1)[1]
        for record in caplog.records
        if "quarantine" in record.getMessage() and record.levelno >= logging.INFO
    ]


def test_an_unhealthy_node_is_tainted_and_recorded_its_cordon_taints_and_annotations_kept_no_real_cluster(monkeypatch):
    """A cordoned node with a taint and an annotation of someone else's: only gpu-node's taint and record added,
    through one JSON patch that tests the resourceVersion first; a second run changes nothing."""
    cluster = StandInGpuCluster()
    cluster.node("gpu1", taints=[CORDONED, DEDICATED], annotations={"team": "vision"}, unschedulable=True)
    cluster.node("gpu2")
    reports = {"gpu1": health("unhealthy", problems=[problem()]), "gpu2": health("healthy")}
    run = run_view(monkeypatch, cluster, reports)
    assert run.failed == [] and run.plan.error is None, run.plan.error
    assert cluster.taints("gpu1") == [CORDONED, DEDICATED, {"key": TAINT_KEY, "value": "xid", "effect": "NoSchedule"}]
    assert cluster.objects["gpu1"]["spec"]["unschedulable"] is True
    assert cluster.objects["gpu1"]["metadata"]["annotations"]["team"] == "vision"
    assert cluster.record("gpu1") == {
        "by": "gpu-node",
        "since": "2026-05-01T10:00:00Z",
        "reason": "Xid 79 on 0000:3b:00.0: GPU fallen off the bus",
    }
    (patch,) = cluster.writes
    words = shlex.split(patch)
    assert json.loads(words[words.index("-p") + 1])[0] == {
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": "1",
    }
    assert cluster.objects["gpu2"]["spec"] == {} and cluster.record("gpu2") is None

    again = run_view(monkeypatch, cluster, reports)
    assert again.failed == [] and cluster.writes == [patch]


def test_never_more_than_quarantine_max_nodes_the_worst_first_counting_others_taints_no_real_cluster(
    monkeypatch, caplog
):
    cluster = StandInGpuCluster()
    for name in ("gpu1", "gpu2", "gpu3", "gpu4", "gpu5"):
        cluster.node(name)
    reports = {
        "gpu1": health(
            "unhealthy", problems=[problem(kind="row remap", severity="needs reset", line="rows pending remapping")]
        ),
        "gpu2": health("unhealthy", problems=[problem()]),
        "gpu3": health(
            "unhealthy", problems=[problem(line="Xid 79 on 0000:3b:00.0: GPU fallen off the bus (2 times this boot)")]
        ),
        "gpu4": health("healthy"),
        "gpu5": health("healthy"),
    }
    run = run_view(monkeypatch, cluster, reports, data={"quarantine_max_nodes": 2, "quarantine_max_percent": 100})
    assert run.failed == []
    # fatal first, by name: gpu2 and gpu3; gpu1 (needs reset) waits for the bound
    assert [name for name in cluster.objects if cluster.taints(name)] == ["gpu2", "gpu3"]
    assert any(
        "gpu1: unhealthy (rows pending remapping) but not quarantined: 2 of the run's 5 GPU nodes are, the "
        "most quarantine_max_nodes=2 and quarantine_max_percent=100 allow (2)" in line
        for line in quarantine_lines(caplog)
    )

    # someone else's taint of the key counts: one taint of theirs, a bound of one, nothing more tainted
    others = StandInGpuCluster()
    others.node("gpu1")
    others.node("gpu2", taints=[{"key": TAINT_KEY, "value": "manual", "effect": "NoSchedule"}])
    run = run_view(
        monkeypatch,
        others,
        {"gpu1": health("unhealthy", problems=[problem()]), "gpu2": health("healthy"), "gpu3": health("healthy")},
        data={"quarantine_max_nodes": 1},
    )
    assert run.failed == [] and others.writes == []
    assert any(
        "gpu1: unhealthy (Xid 79 on 0000:3b:00.0: GPU fallen off the bus) but not quarantined: 1 of the run's 3 GPU nodes"
        in line
        for line in quarantine_lines(caplog)
    )


def test_a_problem_needing_attention_about_no_single_gpu_taints_the_node_a_reading_not_made_does_not_no_real_cluster(
    monkeypatch,
):
    """The health check's other severities: needs attention (a service down, a module missing) makes a node
    unhealthy, about no GPU; not read (a reading that could not be made) leaves its status unknown."""
    cluster = StandInGpuCluster()
    cluster.node("gpu1")
    cluster.node("gpu2")
    down = problem(kind="service", gpu=None, severity="needs attention", line="nvidia-fabricmanager.service is failed")
    not_read = problem(kind="reading", gpu=None, severity="not read", line="nvidia-smi timed out")
    run_view(
        monkeypatch,
        cluster,
        {"gpu1": health("unhealthy", problems=[down]), "gpu2": health("unknown", problems=[not_read])},
        data=ONE_NODE,
    )
    assert cluster.taints("gpu1") == [{"key": TAINT_KEY, "value": "service", "effect": "NoSchedule"}]
    assert cluster.record("gpu1")["reason"] == "nvidia-fabricmanager.service is failed"
    assert cluster.taints("gpu2") == []


def test_the_share_of_the_group_is_rounded_down_no_real_cluster(monkeypatch):
    cluster = StandInGpuCluster()
    for name in ("gpu1", "gpu2", "gpu3"):
        cluster.node(name)
    unhealthy = health("unhealthy", problems=[problem()])
    run_view(
        monkeypatch,
        cluster,
        {"gpu1": unhealthy, "gpu2": unhealthy, "gpu3": unhealthy},
        data={"quarantine_max_nodes": 10, "quarantine_max_percent": 50},
    )
    assert [name for name in cluster.objects if cluster.taints(name)] == ["gpu1"]  # 50% of 3: 1
    alone = StandInGpuCluster()
    alone.node("gpu1")
    run_view(monkeypatch, alone, {"gpu1": unhealthy})
    assert alone.writes == []  # 50% of a group of one: none


def test_released_after_healthy_reports_for_the_set_time_its_own_taint_only_no_real_cluster(monkeypatch):
    cluster = StandInGpuCluster()
    cluster.node("gpu1")
    data = {**ONE_NODE, "quarantine_release_after": "10min"}
    run_view(monkeypatch, cluster, {"gpu1": health("unhealthy", "2026-05-01T10:00:00+00:00", [problem()])}, data=data)
    # the operator cordons it and adds a taint of theirs while it is quarantined
    node = cluster.objects["gpu1"]
    node["spec"]["unschedulable"] = True
    node["spec"]["taints"] = [CORDONED, *node["spec"]["taints"], DEDICATED]

    run_view(monkeypatch, cluster, {"gpu1": health("healthy", "2026-05-01T11:00:00+00:00")}, data=data)
    assert cluster.record("gpu1")["healthy_since"] == "2026-05-01T11:00:00Z" and len(cluster.taints("gpu1")) == 3
    # unknown in between: its healthy time starts over
    run_view(monkeypatch, cluster, {"gpu1": health("unknown", "2026-05-01T11:05:00+00:00")}, data=data)
    assert "healthy_since" not in cluster.record("gpu1")
    run_view(monkeypatch, cluster, {"gpu1": health("healthy", "2026-05-01T11:06:00+00:00")}, data=data)
    run_view(monkeypatch, cluster, {"gpu1": health("healthy", "2026-05-01T11:15:00+00:00")}, data=data)
    assert cluster.record("gpu1")["healthy_since"] == "2026-05-01T11:06:00Z"  # 540 s: not yet
    run_view(monkeypatch, cluster, {"gpu1": health("healthy", "2026-05-01T11:16:00+00:00")}, data=data)
    assert cluster.record("gpu1") is None
    assert cluster.taints("gpu1") == [CORDONED, DEDICATED] and cluster.objects["gpu1"]["spec"]["unschedulable"] is True


def test_a_taint_of_the_key_someone_else_set_is_never_removed_no_real_cluster(monkeypatch, caplog):
    cluster = StandInGpuCluster()
    manual = {"key": TAINT_KEY, "value": "manual", "effect": "NoSchedule"}
    cluster.node("gpu1", taints=[manual])
    for checked_at in ("2026-05-01T10:00:00+00:00", "2026-05-09T10:00:00+00:00"):
        run = run_view(
            monkeypatch, cluster, {"gpu1": health("healthy", checked_at)}, data={"quarantine_release_after": 0}
        )
        assert run.failed == []
    assert cluster.writes == [] and cluster.taints("gpu1") == [manual]
    assert any(
        "gpu1: tainted gpu-node.nvidia.com/gpu-unhealthy by someone else (no gpu-node record): left as it is" in line
        for line in quarantine_lines(caplog)
    )


def test_a_node_changed_since_it_was_read_is_not_patched_no_real_cluster(monkeypatch, caplog):
    """Another writer changes the node between the quarantine's read and its patch: the patch's test of the
    resourceVersion fails, the API server rejects the whole patch, the run says so and fails."""
    cluster = StandInGpuCluster(changed_after_read=("gpu1",))
    cluster.node("gpu1", taints=[DEDICATED])
    run = run_view(
        monkeypatch,
        cluster,
        {"gpu1": health("unhealthy", problems=[problem()]), "gpu2": health("healthy")},
        data={"quarantine_max_nodes": 2, "quarantine_max_percent": 100},
    )
    assert CP in run.failed
    assert cluster.taints("gpu1") == [DEDICATED] and cluster.record("gpu1") is None


def test_on_a_dra_node_the_failed_gpu_alone_gets_a_device_taint_rule_and_its_release_deletes_it_no_real_cluster(
    monkeypatch,
):
    cluster = StandInGpuCluster(
        served="resource.k8s.io/v1beta2", slices=[slice_of("gpu1", {"gpu-0": GPU_A, "gpu-1": GPU_B})]
    )
    cluster.node("gpu1")
    dra = {"gpu1": {"gpu_allocator": "dra"}}
    data = {**ONE_NODE, "quarantine_release_after": 0}
    run = run_view(
        monkeypatch,
        cluster,
        {"gpu1": health("unhealthy", problems=[problem(gpu=GPU_B.upper())])},
        data=data,
        host_data=dra,
    )
    assert run.failed == []
    assert cluster.taints("gpu1") == []
    assert list(cluster.rules) == ["gpu-node-gpu1-gpu-1-319741fc84da"]
    assert cluster.rules["gpu-node-gpu1-gpu-1-319741fc84da"]["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu1", "device": "gpu-1"},
        "taint": {"key": TAINT_KEY, "value": "xid", "effect": "NoSchedule"},
    }
    assert cluster.record("gpu1")["devices"] == ["gpu-node-gpu1-gpu-1-319741fc84da"]

    run_view(monkeypatch, cluster, {"gpu1": health("healthy", "2026-05-01T11:00:00+00:00")}, data=data, host_data=dra)
    assert cluster.rules == {} and cluster.record("gpu1") is None


def test_a_rule_a_stopped_step_did_not_create_is_made_by_the_next_run_no_real_cluster(monkeypatch):
    cluster = StandInGpuCluster(served="resource.k8s.io/v1", slices=[slice_of("gpu1", {"gpu-0": GPU_A})])
    cluster.node("gpu1")
    dra = {"gpu1": {"gpu_allocator": "dra"}}
    unhealthy = {"gpu1": health("unhealthy", problems=[problem()])}
    run_view(monkeypatch, cluster, unhealthy, data=ONE_NODE, host_data=dra)
    cluster.rules.clear()  # as if the create had failed after the node's record was patched
    run_view(monkeypatch, cluster, unhealthy, data=ONE_NODE, host_data=dra)
    assert (
        list(cluster.rules) == ["gpu-node-gpu1-gpu-0-7905065b2f31"]
        and cluster.rules["gpu-node-gpu1-gpu-0-7905065b2f31"]["apiVersion"] == "resource.k8s.io/v1"
    )


def test_device_taint_rules_of_two_nodes_never_share_a_name_no_real_cluster(monkeypatch):
    """Node n1's device gpu-1-gpu-0 and node n1-gpu-1's device gpu-0 (names a node's DRA driver chooses): a rule
    each, and n1's release deletes its own alone."""
    devices = {"n1": {"gpu-1-gpu-0": GPU_A}, "n1-gpu-1": {"gpu-0": GPU_A}}
    cluster = StandInGpuCluster(served="resource.k8s.io/v1", slices=[slice_of(n, d) for n, d in devices.items()])
    dra = {name: {"gpu_allocator": "dra"} for name in devices}
    data = {"quarantine_max_nodes": 2, "quarantine_max_percent": 100, "quarantine_release_after": 0}
    for name in devices:
        cluster.node(name)
    unhealthy = health("unhealthy", problems=[problem()])
    run_view(monkeypatch, cluster, {"n1": unhealthy, "n1-gpu-1": unhealthy}, data=data, host_data=dra)
    assert sorted(rule["metadata"]["annotations"]["gpu-node.nvidia.com/node"] for rule in cluster.rules.values()) == [
        "n1",
        "n1-gpu-1",
    ]
    run_view(
        monkeypatch,
        cluster,
        {"n1": health("healthy", "2026-05-01T11:00:00+00:00"), "n1-gpu-1": unhealthy},
        data=data,
        host_data=dra,
    )
    assert [rule["spec"]["deviceSelector"]["pool"] for rule in cluster.rules.values()] == ["n1-gpu-1"]
    assert cluster.record("n1") is None and cluster.record("n1-gpu-1")["devices"] == list(cluster.rules)


def test_without_device_taint_rules_served_a_dra_node_is_tainted_whole_no_real_cluster(monkeypatch, caplog):
    cluster = StandInGpuCluster(served=None, slices=[slice_of("gpu1", {"gpu-0": GPU_A})])
    cluster.node("gpu1")
    run_view(
        monkeypatch,
        cluster,
        {"gpu1": health("unhealthy", problems=[problem()])},
        data=ONE_NODE,
        host_data={"gpu1": {"gpu_allocator": "dra"}},
    )
    assert [taint["key"] for taint in cluster.taints("gpu1")] == [TAINT_KEY] and cluster.rules == {}


@pytest.mark.parametrize(
    "version, api",
    [("1.36", "resource.k8s.io/v1beta2"), ("1.37", "resource.k8s.io/v1beta2"), ("1.37", "resource.k8s.io/v1")],
)
def test_the_device_taint_rule_is_valid_where_the_release_serves_its_api(version, api):
    rule = device_rule(api, "gpu1", "gpu1", "gpu-0", "xid")
    assert schema_problem(rule, version) is None
    assert schema_problem(rule, "1.35") == f"DeviceTaintRule {api} is not served by Kubernetes 1.35"


@pytest.mark.parametrize(
    "holders, says",
    [
        # then the health check forgets the Xids the reset cleared (else the node stays unhealthy until its next boot)
        (
            ["fuser"],
            "gpu1: GPU 0000:3b:00.0 needs a reset and nothing holds /dev/nvidia*: `nvidia-smi -r -i 0000:3b:00.0; "
            "/usr/bin/python3 -I /usr/lib/gpu-node/gpu-node-health.pyz --forget-xids` would reset it and tell the "
            "health check (gpu-node resets nothing)",
        ),
        (
            ["fuser", "holder 4242 - alice /dev/nvidia0 python3"],
            "gpu1: GPU 0000:3b:00.0 needs a reset; not now: python3 (pid 4242, user alice) holds /dev/nvidia0",
        ),
    ],
)
def test_quarantine_reset_plan_says_what_a_reset_would_need_and_runs_none_no_real_cluster(
    monkeypatch, caplog, holders, says
):
    cluster = StandInGpuCluster()
    cluster.node("gpu1")
    cluster.node("gpu2")
    needs_reset = health(
        "unhealthy",
        problems=[problem(severity="needs reset", line="Xid 48 on 0000:3b:00.0: uncorrectable (double-bit) ECC error")],
    )
    run = run_view(
        monkeypatch,
        cluster,
        {"gpu1": needs_reset, "gpu2": health("healthy")},
        data={"quarantine_reset": "plan"},
        holders=holders,
    )
    assert run.failed == []
    assert any(says in line for line in quarantine_lines(caplog)), quarantine_lines(caplog)
    gpu_commands = [command for host, command in run.plan.timeline if host == "@fake/gpu1"]
    assert not [command for command in gpu_commands if "nvidia-smi" in command]


# A report the health check's format refuses: control characters in a field; a report of another shape
# (a Z timestamp, a kind the check does not write, a GPU without its readings) the quarantine must refuse
# as the fleet view does, one format for both
NOT_HEALTH_REPORTS = {
    "hostile": ({**health("unhealthy", problems=[problem()]), "checked_at": "yesterday\x1b[2J"}, "checked_at"),
    "another-shape": (
        {
            **health("unhealthy", problems=[problem(kind="xid-79")]),
            "checked_at": "2026-05-01T10:00:00Z",
            "gpus": [{"pci": GPU_A, "seen_by_driver": False}],
        },
        "checked_at",
    ),
}


@pytest.mark.parametrize("case", NOT_HEALTH_REPORTS)
def test_a_health_report_that_is_no_health_report_is_one_line_and_the_node_left_alone_no_real_cluster(
    monkeypatch, caplog, case
):
    cluster = StandInGpuCluster()
    cluster.node("gpu1")
    cluster.node("gpu2")
    report, field_named = NOT_HEALTH_REPORTS[case]
    run = run_view(monkeypatch, cluster, {"gpu1": json.dumps(report), "gpu2": health("healthy")}, data=ONE_NODE)
    assert cluster.writes == []
    # the fleet view refuses it too, as any file of the node's that is no report (docs/health.md): that host fails
    assert run.failed == ["@fake/gpu1"]
    lines = [line for line in quarantine_lines(caplog) if "gpu1" in line]
    assert lines and f"health.json: not a gpu-node report: {field_named}" in lines[0] and "\x1b" not in lines[0]


def test_a_node_is_named_by_the_host_its_report_was_read_from_never_by_the_report_no_real_cluster(monkeypatch):
    """Every report says it is gpu1's (its host field): the host each was read from decides the node tainted."""
    cluster = StandInGpuCluster()
    cluster.node("gpu1")
    cluster.node("gpu2")
    claims_gpu1 = {**health("unhealthy", problems=[problem()]), "host": "gpu1"}
    run = run_view(
        monkeypatch, cluster, {"gpu1": {**health("healthy"), "host": "gpu1"}, "gpu2": claims_gpu1}, data=ONE_NODE
    )
    assert run.failed == []
    assert cluster.taints("gpu1") == [] and [taint["key"] for taint in cluster.taints("gpu2")] == [TAINT_KEY]


# Hostnames a node answers with (the Kubernetes node name where kube_node_names has none): another node's
# name, option-looking text, control characters. The stand-in cluster holds nodes of those names too
# (a real API server refuses them), so only the quarantine's own check stands between them and kubectl.
HOSTILE_HOSTNAMES = {
    "another-nodes-name": ("GPU1\n", "gpu1: 2 hosts of the run (@fake/gpu1, @fake/gpu3) say they are this node"),
    "an-option": ("-f/etc/passwd", "hostname '-f/etc/passwd' is no Kubernetes node name"),
    "all-nodes": ("--all", "hostname '--all' is no Kubernetes node name"),
    "a-selector": ("-l x", "hostname '-l x' is no Kubernetes node name"),
    "control-characters": ("gpu\x1b[2Jx", "hostname 'gpu\\x1b[2jx' is no Kubernetes node name"),
}


@pytest.mark.parametrize("case", HOSTILE_HOSTNAMES)
def test_a_hostile_hostname_taints_no_node_and_is_one_printable_line_no_real_cluster(monkeypatch, caplog, case):
    hostname, says = HOSTILE_HOSTNAMES[case]
    cluster = StandInGpuCluster()
    for name in ("gpu1", "gpu2", hostname.strip().lower()):
        cluster.node(name)
    unhealthy = health("unhealthy", problems=[problem()])
    run = run_view(
        monkeypatch,
        cluster,
        {"gpu1": health("healthy"), "gpu2": health("healthy"), "gpu3": unhealthy},
        data={"quarantine_max_nodes": 3, "quarantine_max_percent": 100},
        hostnames={"gpu3": hostname},
    )
    assert run.plan.error is None and run.failed == [] and cluster.writes == []
    lines = quarantine_lines(caplog)
    assert any(says in line for line in lines), lines
    assert not [line for line in lines if "\x1b" in line or "\n" in line.rstrip("\n")]


def test_quarantine_without_a_control_plane_in_the_inventory_stops_in_one_line(monkeypatch):
    monkeypatch.setattr(pyinfra, "is_cli", True)
    inventory = Inventory(
        ([("@fake/gpu1", QUICK)], {}), override_data={"fleet_quarantine": True}, gpu_nodes=(["@fake/gpu1"], {})
    )
    plan = run_inventory(inventory, {"@fake/gpu1": Node(facts=[(NodeReports, [])])}, FLEET_VIEW)
    assert isinstance(plan.error, SettingsError)
    assert str(plan.error) == (
        "fleet_quarantine=true but the inventory has no control_plane host (control_plane_group) "
        "to run kubectl on: add the control-plane host to the inventory"
    )
    assert plan.timeline == []


def test_the_quarantines_kubectl_reads_no_node_or_rule_name_as_an_option():
    """Names the plan has checked already, passed after ``--`` all the same: kubectl reads
    ``-f/etc/passwd`` after ``patch node`` as its file option."""
    step = QuarantineStep(
        "-f/etc/passwd", "release", "", patch=({"op": "test", "path": "/x", "value": 1},), delete=("--all",)
    )
    for command in apply_step._inner(kubeconfig=None, step=step):
        words = shlex.split(str(command))
        assert words[words.index("--") + 1 :] in (["node", "-f/etc/passwd"], ["devicetaintrules", "--all"]), words
