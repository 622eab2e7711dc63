"""
The runtimes' table (deploy/runtimes/registry.py) is what verify, the CDI stage, the node's report and
the settings know of the container runtimes. A STAND-IN third runtime, written here and put in the
table alone (the test sets RUNTIMES), reaches verify's read, its steps and its GPU run, the CDI
decision and the report, with no other file of deploy/ changed; and the files of deploy/ that name
a runtime are counted: its own, the table's, and the few a new runtime has to touch
(docs/contributing.md, "Adding a container runtime").
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from plan import DEFAULT, QUICK, Node, Plan, run_plan, run_pyinfra, settings_for
from pyinfra.api import Inventory
from pyinfra.api.deploy import add_deploy, deploy
from test_verify_steps import containerd_dump, node_lines

from deploy.facts.containerd import ContainerdInstallations
from deploy.facts.cuda import CudaInit
from deploy.facts.installed_kernels import InstalledKernels
from deploy.facts.nvidia import NodeSurvey
from deploy.facts.verification import VerifyReadout
from deploy.operations import docker as docker_ops
from deploy.operations import verification
from deploy.operations.cdi import state_read as cdi_state_read
from deploy.operations.devices import links_read
from deploy.operations.runtime_config import WiredRuntime
from deploy.reports.node_report import FAIL, PASS, SKIP, Step
from deploy.runtimes import registry
from deploy.runtimes.cdi import CdiUnsupported, RuntimeCdi
from deploy.runtimes.registry import CONTAINER, CONTAINERD, DOCKER, GpuRun, Runtime, RuntimeReadout
from deploy.settings.fields import choices
from deploy.settings.model import ALLOWED
from deploy.settings.values import ContainerRuntime
from deploy.stages import STEPS
from deploy.tasks.cdi import cdi
from deploy.verification.cdi import cdi_expected
from deploy.verification.options import VerifyOptions

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def standin_cdi(wiring, reading: dict) -> RuntimeCdi:
    """The stand-in has CDI from its release 3."""
    major = reading.get("major")
    if wiring.enable_cdi and major is not None and major < 3:
        raise CdiUnsupported(f"cdi=true, but the stand-in {reading.get('version')} has no CDI")
    if wiring.enable_cdi is None:
        wiring = replace(wiring, enable_cdi=True if (major or 0) >= 3 else None)
    return RuntimeCdi(wiring, bool(wiring.enable_cdi), wiring.enable_cdi)


def standin_read_line(reading: dict, key: str, rest: str) -> None:
    field = {
        "standin_path": "path",
        "standin_active": "active",
        "standin_version": "version",
        "standin_binary": "binary",
    }.get(key)
    if field:
        reading[field] = rest or None
    elif key == "standin_image":
        reading["image_present"] = rest == "1"
    if key == "standin_version" and rest:
        reading["major"] = int(rest.split(".")[0])


def standin_config_step(reading: dict, options) -> Step:
    wired = reading["binary"] == options.wiring.binary
    return Step("standin_config", PASS if wired else FAIL, f"stand-in {reading['version']} runs {reading['binary']}")


STANDIN = Runtime(
    name="standin",
    title="Stand-in",
    cdi=standin_cdi,
    cdi_since="the stand-in 3",
    # Its part of verify's read borrows Docker's script (deploy/shell/ holds only real runtimes'); the
    # fake connector runs none of it: the node's lines below are the test's.
    readout=RuntimeReadout(
        script="verify_readout_docker",
        keys=("standin_path", "standin_active", "standin_version", "standin_binary", "standin_image"),
        default=lambda: {
            "path": None,
            "active": None,
            "version": None,
            "major": None,
            "binary": None,
            "image_present": False,
        },
        read_line=standin_read_line,
    ),
    config_step=standin_config_step,
    configured_binary=lambda reading: reading["binary"],
    summary=lambda reading: f"stand-in {reading['version']}",
    runs=(
        GpuRun(
            "standin_run",
            CONTAINER,
            what="standin run nvidia-smi",
            pull="standin pull",
            command=lambda reading, image, name: ("standin", "run", "--gpus", "all", image),
        ),
    ),
)
STANDIN_LINES = [
    "standin_path /usr/bin/standin",
    "standin_active active",
    "standin_version 3.1.0",
    "standin_binary /usr/bin/nvidia-container-runtime",
    "standin_image 1",
]


@pytest.fixture
def standin(monkeypatch):
    """The stand-in in the table, after the two real runtimes."""
    monkeypatch.setattr(registry, "RUNTIMES", (CONTAINERD, DOCKER, STANDIN))


def test_the_settings_allow_the_runtimes_of_the_table():
    assert choices(ContainerRuntime) == registry.runtime_names() == ("containerd", "docker")
    assert ALLOWED["container_runtimes"] == "a comma-separated list of containerd, docker"


def test_every_runtime_of_the_table_has_its_stage_and_every_runtime_stage_its_row():
    """What a run does to a runtime on a host is its stage (deploy/stages.py): named as its row."""
    assert sorted(step.name for step in STEPS if step.wired is not None) == sorted(registry.runtime_names())


def test_a_stand_in_runtime_is_read_by_verifys_one_read(standin):
    fact = VerifyReadout()
    assert fact.default()["standin"]["path"] is None
    read = fact.process(["ctrd_path /usr/bin/containerd", "docker_path ", *STANDIN_LINES])
    assert read["standin"] == {
        "path": "/usr/bin/standin",
        "active": "active",
        "version": "3.1.0",
        "major": 3,
        "binary": "/usr/bin/nvidia-container-runtime",
        "image_present": True,
    }
    assert read["containerd"]["path"] == "/usr/bin/containerd" and read["docker"]["path"] is None


def run_verify_with_standin(tmp_path, lines: list[str], runs: dict) -> dict:
    """verify's operation on a @fake node with containerd and the stand-in wired (VerifyOptions asks
    for it: the settings' choices are made when they are imported)."""
    report = tmp_path / "report.json"
    settings = settings_for(verify_report_path=str(report))
    options = replace(VerifyOptions.from_settings(settings), runtimes=("containerd", "standin"))
    plain = verification.containerd_of(options, ContainerdInstallations.default())
    node = Node(
        facts=[
            (ContainerdInstallations, []),
            (NodeSurvey, lines),
            (verification.verify_read(options, plain), lines),
            (verification.containerd_config_read(plain), lines),
            (CudaInit, lines),
            (cdi_state_read(), lines),
            (links_read(settings.nvidia_driver_root), lines),
            (InstalledKernels, lines),
            (verification.signing_read(options), lines),
        ],
        commands=runs,
    )

    @deploy("Verify with the stand-in")
    def verify_standin():
        verification.check_node(name="Verify", options=options, report_path=str(report))

    inventory = Inventory(([("@fake/node", QUICK)], {}))
    state, error = run_pyinfra(inventory, lambda state: add_deploy(state, verify_standin), nodes={"@fake/node": node})
    return {"plan": Plan(state=state, error=error), **json.loads(report.read_text())["nodes"][0]}


def test_a_stand_in_runtime_reaches_verifys_steps_its_gpu_run_and_the_report(standin, tmp_path):
    smi = "0, GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77, A100-SXM4-40GB, 40960, 550.54.15"
    lines = (
        node_lines(
            gpus=1,
            smi=smi,
            smi_list="GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)",
            kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  x",
            dump=containerd_dump(),
        )
        + STANDIN_LINES
    )
    record = run_verify_with_standin(tmp_path, lines, runs={"standin run": ["rc 0", "GPU 0: A100-SXM4-40GB"]})
    steps = {step["name"]: step for step in record["steps"]}
    assert steps["standin_config"] == {
        "name": "standin_config",
        "status": PASS,
        "reason": "stand-in 3.1.0 runs /usr/bin/nvidia-container-runtime",
    }
    assert steps["standin_run"]["status"] == PASS, steps["standin_run"]
    assert steps["standin_run"]["reason"] == "standin run nvidia-smi: GPU 0: A100-SXM4-40GB"
    (run,) = record["plan"].matching("standin run")
    assert "standin run --gpus all docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi 2>&1" in run, run
    assert steps["docker_config"]["status"] == SKIP and steps["containerd_config"]["status"] == PASS
    assert record["runtime"] == "containerd 1.6.20~ds1, stand-in 3.1.0"
    # the stand-in's version has CDI, containerd 1.6's has not: the node should run CDI, and has no spec
    assert steps["cdi"]["status"] == FAIL and steps["cdi"]["reason"].startswith("no CDI spec at"), steps["cdi"]


def test_a_stand_in_runtimes_version_decides_cdi_where_no_other_runtime_is_wired(standin):
    options = replace(VerifyOptions.from_settings(settings_for()), runtimes=("standin",))
    reading = {"path": "/usr/bin/standin", "version": "3.1.0", "major": 3}
    readout = {runtime.name: runtime.readout.default() for runtime in registry.RUNTIMES}
    assert cdi_expected({**readout, "standin": {**readout["standin"], **reading}}, options)
    assert not cdi_expected({**readout, "standin": {**readout["standin"], **reading, "major": 2}}, options)


STANDIN_VERSION = docker_ops.state_read("/etc/standin/config.json", service="standin")


def cdi_plan(version: str, **data):
    """The CDI stage on a @fake node whose one wired runtime is the stand-in; its version read borrows
    DockerState's (a reader of ``version`` lines), answered here."""
    wired = (WiredRuntime("standin", STANDIN_VERSION),)
    state = (
        "ctk /usr/bin/nvidia-ctk\ninputs_changed 200\nsmi_exit_code 0\nsmi_gpus 1\n"
        "refresh_unit /usr/lib/systemd/system/nvidia-cdi-refresh.path\nrefresh_enabled enabled\nrefresh_active active"
    )
    return run_plan(
        cdi,
        settings_for(**data),
        wired,
        unstated=DEFAULT,
        facts=[
            (STANDIN_VERSION, f"dockerd /usr/bin/standin\nversion Stand-in version {version}"),
            (cdi_state_read(), state),
        ],
    )


def test_the_cdi_stage_turns_cdi_on_for_a_stand_in_runtime_with_it(standin):
    assert cdi_plan("3.1.0").ran("cdi generate --output /var/run/cdi/nvidia.yaml")
    assert not cdi_plan("2.9.0").ran("cdi generate")


def test_a_refusal_names_the_stand_ins_first_release_with_cdi(standin):
    plan = cdi_plan("2.9.0", nvidia_runtime_mode="cdi")
    assert plan.failed and "containerd 1.7 or Docker 25 or the stand-in 3 at least" in plan.refusal, plan.refusal


# The files of deploy/ a runtime may be named in (as a string, or by its constant in the table): its
# own (its folder in runtimes/, its facts, operations and task), the table, and the files adding one
# touches besides (docs/contributing.md): its stage's row, its package names in the family table,
# its settings; and, for containerd alone, what it is the runtime of (verify's read of the installation
# in effect, the DRA driver, which needs it).
SHARED = {"runtimes/registry.py", "stages.py", "distros/families.py", "settings/sections/runtimes.py"}
CONTAINERD_ALONE = {"operations/verification.py", "settings/sections/dra.py"}


def own_files(name: str) -> set[str]:
    return {f"facts/{name}.py", f"operations/{name}.py", f"tasks/{name}.py"}


def files_naming(runtime: Runtime) -> set[str]:
    constant = {CONTAINERD.name: "CONTAINERD", DOCKER.name: "DOCKER"}[runtime.name]
    named = set()
    for path in DEPLOY.rglob("*.py"):
        tree = ast.parse(path.read_text())
        if any(
            isinstance(node, ast.Constant)
            and node.value in (runtime.name, runtime.title)
            or isinstance(node, (ast.Name, ast.alias))
            and constant in (getattr(node, "id", None), getattr(node, "name", None))
            for node in ast.walk(tree)
        ):
            named.add(str(path.relative_to(DEPLOY)))
    return named


@pytest.mark.parametrize("runtime", [CONTAINERD, DOCKER], ids=lambda runtime: runtime.name)
def test_a_runtime_is_named_only_in_its_own_files_the_table_and_the_few_an_addition_touches(runtime):
    named = {path for path in files_naming(runtime) if not path.startswith(f"runtimes/{runtime.name}/")}
    allowed = own_files(runtime.name) | SHARED | (CONTAINERD_ALONE if runtime is CONTAINERD else set())
    assert named <= allowed, f"{runtime.name} named by hand in {sorted(named - allowed)}: iterate the table instead"
