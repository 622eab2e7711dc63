"""
nvidia_runtime_mode: the nvidia runtime's own mode in /etc/nvidia-container-runtime/config.toml, the
containerd annotations its cdi mode needs, the refusals, verify's runtime_mode step, and verify's
CRI probe asking for a CDI device (deploy/settings/sections/runtimes.py, deploy/runtimes/cdi.py, deploy/runtimes/containerd/cri.py,
deploy/tasks/cdi.py, deploy/operations/cdi.py, deploy/verification/, deploy/operations/probes.py).

The config texts below are written for these tests in the shape the toolkit's package ships (keys,
commented-out keys, tables); tests/e2e/test_runtime_mode_e2e.py edits one on a node.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
import yaml
from plan import DEFAULT, assigned, gpu_node, run_deploy, run_plan, settings_for
from pyinfra import host
from pyinfra.api import deploy
from standin_toolkit import STANDIN_RUNTIME_CONFIG
from test_cdi_plan import CONFIG, PLAIN
from test_cdi_plan import CONTAINERD as CDI_PLAN_CONTAINERD
from test_verify_steps import (
    CONTAINER_ID,
    NVIDIA_SMI_L,
    POD,
    SANDBOX_ID,
    STATE_TEMPLATE,
    calls,
    containerd_dump,
    crictl_standin,
    node_lines,
    run_verify,
    smi_output,
)

from deploy.facts.cdi import CdiState
from deploy.facts.containerd import ContainerdInstallations
from deploy.foundations.toml_layout import ConfigError, tomllib
from deploy.operations.cdi import state_read
from deploy.operations.probes import CrictlRun
from deploy.runtimes.cdi import RUNTIME_CONFIG, runtime_mode_of, with_runtime_mode
from deploy.runtimes.containerd.cri import effective_problems, merge_containerd_config
from deploy.runtimes.wiring import runtime_wiring
from deploy.settings import SettingsError, parse_settings
from deploy.stages import wired_runtimes
from deploy.tasks.cdi import cdi, preflight_check
from deploy.tasks.k8s import SharingConfig
from deploy.verification.cdi import CdiProbe, cdi_container_problem, cri_cdi_probe, runtime_mode_step
from deploy.verification.options import VerifyOptions
from deploy.verification.toolkit_runtimes import cri_step

PACKAGE_CONFIG = STANDIN_RUNTIME_CONFIG


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- the setting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, mode",
    [(None, None), ("cdi", "cdi"), ("Legacy", "legacy"), ("none", None), ("csv", "csv"), ("auto", "auto")],
)
def test_the_mode_setting_reads_its_four_modes_and_unset(given, mode):
    data = {} if given is None else {"nvidia_runtime_mode": given}
    assert parse_settings(data).nvidia_runtime_mode == mode


def test_an_unknown_mode_stops_the_run_in_one_line_naming_the_modes():
    with pytest.raises(SettingsError) as raised:
        parse_settings({"nvidia_runtime_mode": "jit-cdi"})
    assert str(raised.value) == "invalid setting nvidia_runtime_mode='jit-cdi': allowed: one of auto, cdi, legacy, csv"


def test_cdi_mode_with_cdi_false_stops_the_run_in_one_line():
    with pytest.raises(SettingsError) as raised:
        parse_settings({"nvidia_runtime_mode": "cdi", "cdi": "false"})
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith("invalid setting nvidia_runtime_mode='cdi': allowed only with cdi=auto or true")


@pytest.mark.parametrize("mode, annotations", [("cdi", ("cdi.k8s.io/*",)), ("auto", ()), ("legacy", ()), (None, ())])
def test_only_cdi_mode_asks_containerd_to_pass_the_cdi_annotations_on(mode, annotations):
    data = {"nvidia_runtime_mode": mode} if mode else {}
    assert runtime_wiring(parse_settings(data)).container_annotations == annotations


# --- the runtime's config ------------------------------------------------------------------------


def test_the_mode_is_set_in_place_with_every_comment_and_other_line_kept():
    edited = with_runtime_mode(PACKAGE_CONFIG, "cdi")
    assert edited == PACKAGE_CONFIG.replace('mode = "auto"', 'mode = "cdi"')
    assert with_runtime_mode(edited, "cdi") == edited  # a second run changes nothing
    assert runtime_mode_of(edited) == "cdi"


def test_a_commented_out_mode_stays_and_the_mode_is_added_to_the_runtime_table():
    commented = PACKAGE_CONFIG.replace('mode = "auto"', '#mode = "auto"')
    edited = with_runtime_mode(commented, "legacy")
    assert '#mode = "auto"' in edited
    assert tomllib.loads(edited)["nvidia-container-runtime"]["mode"] == "legacy"
    assert (
        tomllib.loads(edited)["nvidia-container-runtime"]["modes"]
        == tomllib.loads(PACKAGE_CONFIG)["nvidia-container-runtime"]["modes"]
    )
    assert runtime_mode_of(commented) == "auto"  # the runtime's default when the file does not say


def test_no_file_gets_one_holding_only_the_mode_under_a_header():
    written = with_runtime_mode(None, "cdi")
    assert written.startswith("# Written by gpu-node (nvidia_runtime_mode)")
    assert tomllib.loads(written) == {"nvidia-container-runtime": {"mode": "cdi"}}


@pytest.mark.parametrize("text", ['[nvidia-container-runtime]\nmode = "auto\n', "mode = [\n"])
def test_a_file_that_is_not_toml_is_refused_in_one_line(text):
    with pytest.raises(ConfigError) as raised:
        with_runtime_mode(text, "cdi")
    assert str(raised.value).startswith(f"{RUNTIME_CONFIG} is not valid TOML: ")
    assert "\n" not in str(raised.value)


# --- containerd's nvidia runtime ----------------------------------------------------------------

CDI_WIRING = runtime_wiring(parse_settings({"nvidia_runtime_mode": "cdi"}))
V2_NVIDIA = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]'


def test_cdi_mode_adds_the_annotations_to_the_nvidia_runtime_only():
    merged = merge_containerd_config("version = 2\n", CDI_WIRING).text
    runtimes = tomllib.loads(merged)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["container_annotations"] == ["cdi.k8s.io/*"]
    assert "container_annotations" not in runtimes["runc"]
    assert merge_containerd_config(merged, CDI_WIRING).text == merged


def test_the_sites_own_annotations_and_their_comments_are_kept():
    text = f'version = 2\n{V2_NVIDIA}\n  container_annotations = [\n    "example.com/*",  # our tracer\n  ]\n'
    merged = merge_containerd_config(text, CDI_WIRING).text
    assert '"example.com/*",  # our tracer' in merged
    runtimes = tomllib.loads(merged)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["container_annotations"] == ["example.com/*", "cdi.k8s.io/*"]


def test_annotations_already_passed_leave_the_file_as_it_is_and_another_mode_removes_nothing():
    wired = merge_containerd_config("version = 2\n", CDI_WIRING).text
    assert merge_containerd_config(wired, CDI_WIRING).text == wired
    assert merge_containerd_config(wired, runtime_wiring(parse_settings({}))).text == wired


def test_containerd_dump_without_the_annotations_is_a_problem_named_by_the_setting():
    wired = merge_containerd_config("version = 2\n", runtime_wiring(parse_settings({}))).text
    where, problems = effective_problems(wired, CDI_WIRING)
    assert problems == ["runtimes.nvidia.container_annotations lacks 'cdi.k8s.io/*' (nvidia_runtime_mode=cdi)"]
    assert effective_problems(merge_containerd_config(wired, CDI_WIRING).text, CDI_WIRING)[1] == []


# --- the fact --------------------------------------------------------------------------------


def test_the_cdi_read_carries_the_runtime_config_text():
    command = CdiState().command(**state_read()[1])
    assert assigned(command, "runtime_config") == "/etc/nvidia-container-runtime/config.toml"
    assert 'echo "runtime_config $(read_base64 "$runtime_config")"' in command
    state = CdiState().process([f"runtime_config {b64(PACKAGE_CONFIG)}", "ctk /usr/bin/nvidia-ctk"])
    assert state["runtime_config"] == PACKAGE_CONFIG
    assert CdiState().process(["ctk /usr/bin/nvidia-ctk"])["runtime_config"] is None


# --- the cdi stage: plan and preflight ---------------------------------------------------------

# the cdi stage's plan tests' node readings, and a node without containerd
CONTAINERD = {**CDI_PLAN_CONTAINERD, "none": ""}
CURRENT = (
    "ctk /usr/bin/nvidia-ctk\ninputs_changed 200\nspec_changed 300\n"
    "refresh_unit /usr/lib/systemd/system/nvidia-cdi-refresh.path\n"
    "refresh_enabled enabled\nrefresh_active active"
)
SET_MODE = "Set the nvidia runtime's mode in /etc/nvidia-container-runtime/config.toml"


def plan_for(containerd: str, runtime_config: str | None, **data):
    state = CURRENT + (f"\nruntime_config {b64(runtime_config)}" if runtime_config is not None else "")
    return run_plan(
        cdi,
        settings_for(**data),
        PLAIN,
        facts=[(CONFIG, CONTAINERD[containerd]), (state_read(), state)],
        unstated=DEFAULT,
    )


def test_cdi_mode_on_containerd_2_writes_the_mode_keeping_the_package_file():
    plan = plan_for("2.1", PACKAGE_CONFIG, nvidia_runtime_mode="cdi")
    assert SET_MODE in " ".join(plan.op_names()) and not plan.failed
    assert plan.ran(f"mv -f {RUNTIME_CONFIG}"), plan.commands


def test_the_mode_already_in_the_file_makes_no_operation_and_unset_never_reads_it_for_a_change():
    assert not plan_for("2.1", with_runtime_mode(PACKAGE_CONFIG, "cdi"), nvidia_runtime_mode="cdi").op_names()
    assert not plan_for(
        "2.1",
        "not toml [",
    ).op_names()  # unset: the file is the site's


def test_a_runtime_config_that_cannot_be_edited_fails_the_host_in_one_line_and_is_left_alone():
    plan = plan_for("2.1", "mode = [\n", nvidia_runtime_mode="legacy")
    assert plan.failed and plan.refusal.startswith(f"{RUNTIME_CONFIG} is not valid TOML")
    assert not plan.ran(f"mv -f {RUNTIME_CONFIG}") and len(plan.commands) == 2  # its reads only


def check_with(containerd: str, runtime_config: str | None = PACKAGE_CONFIG, **data) -> list[str]:
    """tasks/cdi.py's preflight_check on a @fake node with this containerd."""
    errors: list[str] = []
    state = CURRENT + (f"\nruntime_config {b64(runtime_config)}" if runtime_config is not None else "")

    @deploy("check")
    def check(settings):
        errors.extend(preflight_check(settings, None, {}, wired_runtimes(settings)).errors)
        host.noop("checked")

    installation = "binary /usr/bin/containerd" if containerd != "none" else ""
    run_plan(
        check,
        settings_for(**data),
        facts=[(ContainerdInstallations, installation), (CONFIG, CONTAINERD[containerd]), (state_read(), state)],
        unstated=DEFAULT,
    )
    return errors


def test_preflight_refuses_cdi_mode_where_auto_leaves_cdi_off_in_one_line():
    (error,) = check_with("1.6", nvidia_runtime_mode="cdi")
    assert error.startswith("nvidia_runtime_mode=cdi, but CDI is off on this node (cdi=auto, and no wired runtime")
    assert check_with("2.1", nvidia_runtime_mode="cdi") == []
    assert check_with("1.6", nvidia_runtime_mode="legacy") == []


def test_preflight_leaves_a_containerd_this_run_installs_to_the_operation_but_refuses_a_broken_file():
    assert check_with("none", nvidia_runtime_mode="cdi") == []
    (error,) = check_with("2.1", "mode = [\n", nvidia_runtime_mode="cdi")
    assert error.startswith(f"{RUNTIME_CONFIG} is not valid TOML")


# --- verify's runtime_mode step -------------------------------------------------------------------


def options(**data) -> VerifyOptions:
    return VerifyOptions.from_settings(parse_settings(data))


@pytest.mark.parametrize(
    "text, asked, status, reason",
    [
        (PACKAGE_CONFIG, None, "skip", f"nvidia_runtime_mode is unset: {RUNTIME_CONFIG} is left as it is"),
        (with_runtime_mode(PACKAGE_CONFIG, "cdi"), "cdi", "pass", f"{RUNTIME_CONFIG}: mode 'cdi'"),
        (
            PACKAGE_CONFIG,
            "cdi",
            "fail",
            f"{RUNTIME_CONFIG}: mode 'auto', not 'cdi' (nvidia_runtime_mode): run the deploy",
        ),
        (None, "auto", "pass", f"no {RUNTIME_CONFIG}, so the runtime's default: mode 'auto'"),
        ("mode = [\n", "legacy", "fail", f"{RUNTIME_CONFIG} is not valid TOML: "),
    ],
)
def test_verify_checks_the_mode_in_the_file_is_the_one_asked(text, asked, status, reason):
    step = runtime_mode_step(
        {"cdi": {"runtime_config": text}}, options(**({"nvidia_runtime_mode": asked} if asked else {}))
    )
    assert step.status == status and step.reason.startswith(reason), step


# --- verify's CRI probe with a CDI device -----------------------------------------------------

UUID0, UUID1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-1111-4111-8111-111111111111"
SPEC = f"""\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits: {{deviceNodes: [{{path: /dev/nvidia0}}]}}
- name: "{UUID0}"
  containerEdits: {{deviceNodes: [{{path: /dev/nvidia0}}]}}
- name: all
  containerEdits: {{deviceNodes: [{{path: /dev/nvidia0}}, {{path: /dev/nvidia1}}]}}
containerEdits:
  deviceNodes: [{{path: /dev/nvidiactl}}]
"""


def cdi_readout(spec: str | None = SPEC, uuids=(UUID0,), gpus: int = 1) -> dict:
    return {
        "node": {"gpus": [{"slot": "0000:01:00.0", "device": "0x20b0"}] * gpus},
        "smi": {"exit_code": 0, "gpus": [{"uuid": uuid} for uuid in uuids]},
        "containerd": {"path": "/usr/bin/containerd", "major": 2, "minor": 1, "version": "2.1.9"},
        "cdi": {"spec": spec},
    }


def test_the_probe_asks_for_the_first_gpu_by_uuid_and_expects_its_nodes_and_the_specs_common_ones():
    probe = cri_cdi_probe(cdi_readout(), options())
    assert probe == CdiProbe(f"nvidia.com/gpu={UUID0}", ("/dev/nvidia0", "/dev/nvidiactl"))


def test_a_gpu_the_spec_does_not_name_by_uuid_makes_the_probe_ask_for_all():
    probe = cri_cdi_probe(cdi_readout(uuids=(UUID1,)), options())
    assert probe == CdiProbe("nvidia.com/gpu=all", ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"))


@pytest.mark.parametrize(
    "readout, data",
    [
        (cdi_readout(), {"cdi": "false"}),
        (cdi_readout(spec=None), {}),
        (cdi_readout(gpus=0), {}),
        (cdi_readout(spec="not: [a spec"), {}),
    ],
)
def test_no_cdi_container_without_cdi_a_spec_or_a_usable_gpu(readout, data):
    assert cri_cdi_probe(readout, options(**data)) is None


def test_the_probes_cdi_container_asks_through_cdi_devices_with_the_runtimes_own_injection_off():
    probe = CdiProbe(f"nvidia.com/gpu={UUID0}", ("/dev/nvidia0", "/dev/nvidiactl"))
    script = CrictlRun().command(uid="u1", image="registry/cuda:1", cdi=probe)
    config = json.loads(assigned(script, "cdi_json"))
    assert config["CDI_devices"] == [{"name": f"nvidia.com/gpu={UUID0}"}]
    assert config["envs"] == [{"key": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert config["image"] == {"image": "registry/cuda:1"}
    assert config["command"][:2] == ["sh", "-c"] and "/dev/nvidia0 /dev/nvidiactl" in config["command"][2]
    assert assigned(script, "run_cdi") == "1"
    assert assigned(CrictlRun().command(uid="u1", image="registry/cuda:1"), "run_cdi") == "0"


def cdi_result(logs: str, code: int = 0, state: str = "CONTAINER_EXITED 0") -> dict:
    steps = {
        "runp": (0, SANDBOX_ID),
        "create": (0, "c1"),
        "start": (0, "c1"),
        "state": (0, "CONTAINER_EXITED 0"),
        "logs": (0, NVIDIA_SMI_L),
        "rm": (0, "c1"),
        "cdi_create": (code, "c2"),
        "cdi_start": (0, "c2"),
        "cdi_state": (0, state),
        "cdi_logs": (0, logs),
        "cdi_rm": (0, "c2"),
        "stopp": (0, ""),
        "rmp": (0, ""),
    }
    return {name: {"exit_code": rc, "output": text} for name, (rc, text) in steps.items()}


PROBE = CdiProbe(f"nvidia.com/gpu={UUID0}", ("/dev/nvidia0", "/dev/nvidiactl"))


def test_the_cri_step_passes_when_every_device_node_is_in_the_cdi_container():
    step = cri_step(cdi_result("device /dev/nvidia0\ndevice /dev/nvidiactl"), True, "img", PROBE)
    assert step.status == "pass", step
    assert step.reason.endswith(
        f"CDI device nvidia.com/gpu={UUID0} through the CRI: /dev/nvidia0, /dev/nvidiactl in the container"
    )


@pytest.mark.parametrize(
    "result, reason",
    [
        (
            cdi_result("device /dev/nvidiactl"),
            f"the container given CDI device nvidia.com/gpu={UUID0} through the CRI "
            "lacks /dev/nvidia0 (the spec gives them): containerd did not inject it",
        ),
        (cdi_result("", code=1), f"crictl create with CDI device nvidia.com/gpu={UUID0} failed: c2"),
        (
            cdi_result("", state="CONTAINER_EXITED 127"),
            f"the container given CDI device nvidia.com/gpu={UUID0}: CONTAINER_EXITED 127",
        ),
    ],
)
def test_the_cri_step_fails_naming_what_the_cdi_container_lacked(result, reason):
    step = cri_step(result, True, "img", PROBE)
    assert (step.status, step.reason) == ("fail", reason)
    assert cdi_container_problem(result, PROBE) == reason


def test_the_probe_script_runs_both_containers_in_the_sandbox_with_a_standin_crictl(tmp_path):
    """The script verify runs, by a real shell, against a STAND-IN crictl that answers only the exact
    calls of the sequence (tests/unit/test_verify_steps.py's): the CDI container after nvidia-smi's."""
    sequence = [
        (["runp", "--runtime", "nvidia", POD], 0, SANDBOX_ID),
        (["inspecti", "img"], 0, "{}"),
        (["create", SANDBOX_ID, "<container.json>", POD], 0, CONTAINER_ID),
        (["start", CONTAINER_ID], 0, CONTAINER_ID),
        ([*STATE_TEMPLATE, CONTAINER_ID], 0, "CONTAINER_EXITED 0"),
        (["logs", CONTAINER_ID], 0, NVIDIA_SMI_L),
        (["rm", "-f", CONTAINER_ID], 0, CONTAINER_ID),
        (["create", SANDBOX_ID, "<cdi.json>", POD], 0, "cdi-ctr"),
        (["start", "cdi-ctr"], 0, "cdi-ctr"),
        ([*STATE_TEMPLATE, "cdi-ctr"], 0, "CONTAINER_EXITED 0"),
        (["logs", "cdi-ctr"], 0, "device /dev/nvidia0\ndevice /dev/nvidiactl"),
        (["rm", "-f", "cdi-ctr"], 0, "cdi-ctr"),
        (["stopp", SANDBOX_ID], 0, "stopped"),
        (["rmp", SANDBOX_ID], 0, "removed"),
    ]
    run, log = crictl_standin(tmp_path, sequence)
    output = run(CrictlRun().command(uid="u1", image="img", cdi=PROBE))
    steps = CrictlRun().process(output.stdout)
    assert calls(log) == [call for call, _, _ in sequence]
    assert [name for name in steps if name.startswith("cdi_")] == [
        "cdi_create",
        "cdi_start",
        "cdi_state",
        "cdi_logs",
        "cdi_rm",
    ]
    assert cri_step(steps, True, "img", PROBE).status == "pass"


GPU_SMI = smi_output("one-gpu.txt")


def test_verify_on_a_cdi_gpu_node_asks_crictl_for_the_first_gpus_cdi_device(tmp_path):
    uuid = re.search(r"GPU-[0-9a-f-]+", GPU_SMI)[0]
    spec = SPEC.replace(UUID0, uuid)
    lines = node_lines(
        gpus=1,
        kmod="NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  x",
        smi=GPU_SMI,
        dump=containerd_dump(),
        crictl=True,
        ctrd_version="2.1.9",
    )
    lines += [f"spec {b64(spec)}", "spec_changed 300", "inputs_changed 200", "ctk /usr/bin/nvidia-ctk"]
    run, log = crictl_standin(tmp_path, [])
    plan, _, steps, _ = run_verify(tmp_path, lines, crictl=run)
    (script,) = plan.matching("runp --runtime")
    config = json.loads(assigned(script, "cdi_json"))
    assert config["CDI_devices"] == [{"name": f"nvidia.com/gpu={uuid}"}]


# --- the device plugin ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [None, "cdi", "auto"])
def test_the_device_plugin_keeps_cdi_cri_whatever_the_runtimes_mode(mode):
    data = {"cdi": "true", **({"nvidia_runtime_mode": mode} if mode else {})}
    config = SharingConfig.from_settings(parse_settings(data))
    assert config.document()["flags"]["plugin"]["deviceListStrategy"] == "cdi-cri"
    assert yaml.safe_load(config.text())["flags"]["plugin"]["deviceListStrategy"] == "cdi-cri"


def test_through_the_deploy_cdi_mode_where_the_runtime_has_cdi_off_is_refused_in_preflight_before_the_kernel_stage():
    """deploy/gpu_node.py with the kernel and runtimes stages on containerd 1.6 (cdi=auto: off there):
    nvidia_runtime_mode=cdi fails the host in preflight, so not even the kernel stage changes anything."""
    state = CURRENT + f"\nruntime_config {b64(PACKAGE_CONFIG)}"
    node = gpu_node(
        "debian-12",
        unstated=DEFAULT,
        facts=[
            (ContainerdInstallations, "binary /usr/bin/containerd"),
            (CONFIG, CONTAINERD["1.6"]),
            (state_read(), state),
        ],
    )
    run = run_deploy(node, data={"stages": "kernel,runtimes", "nvidia_runtime_mode": "cdi"})
    assert run.refusal.startswith("nvidia_runtime_mode=cdi, but CDI is off on this node"), run.failures
    assert [name for name in run.op_names() if not name.startswith(("Preflight", "Refuse this host"))] == []
