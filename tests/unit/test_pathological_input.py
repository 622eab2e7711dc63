"""
Pathological input to every parser of text gpu-node did not write itself (deploy/foundations/node_text.py):
values nested 3,000 deep (100,000 for JSON), a 50 MB file (as the node's read cuts it: the first
1 MiB and one byte), a number of 5,000 digits, bytes that are not UTF-8, and a file cut short.
The host fails in one line naming the file (and the line, where there is one) through the
project's one way to fail a host (deploy/operations/failure.py); a file an edit was planned for is
left as it was; nothing raises past the host, so the rest of a fleet goes on (the last tests here,
and tests/e2e/test_fleet_report.py on real nodes).
"""

from __future__ import annotations

import base64
import json
import subprocess

import pytest
import tomllib
import yaml
from plan import (
    DEFAULT,
    REPO,
    Node,
    gpu_node,
    node_lines,
    os_release,
    run_deploy,
    run_inventory,
    run_plan,
    settings_for,
    staged_uploads,
)
from pyinfra import host
from pyinfra.api import Inventory, deploy
from pyinfra.api.exceptions import FactProcessError
from pyinfra.facts.server import LinuxDistribution
from test_cdi_plan import CONFIG as CDI_CONTAINERD_READ
from test_cdi_plan import CONTAINERD as CDI_CONTAINERD
from test_cdi_plan import PLAIN as CDI_PLAIN
from test_gpushare_plan import DATA as GPUSHARE_DATA
from test_gpushare_plan import GPU as GPUSHARE_GPU
from test_gpushare_plan import MANIFEST, cluster  # noqa: F401 - the fixture
from test_gpushare_plan import run_plan as run_k8s_plan
from test_verify_steps import containerd_dump, run_verify
from test_verify_steps import node_lines as verify_lines

from deploy.distros.families import detect_platform
from deploy.facts.apt import AptSourceFiles
from deploy.facts.cdi import CdiState
from deploy.facts.containerd import ContainerdConfig, ContainerdImports, ContainerdInstallations, config_read
from deploy.facts.docker import DockerState
from deploy.facts.drain import KubeNodeSchedule
from deploy.facts.files import FileText
from deploy.facts.k8s import HelmRelease, KubeCluster, KubeLiveObjects, KubeNodes
from deploy.facts.nvidia import NodeSurvey
from deploy.facts.verification import KUBELET_CONFIG
from deploy.foundations import node_text
from deploy.operations.cdi import state_read as cdi_state_read
from deploy.operations.docker import state_read as docker_state_read
from deploy.runtimes.cdi import RUNTIME_CONFIG, SPEC_PATH
from deploy.runtimes.containerd.cri import effective_problems
from deploy.runtimes.containerd.verify import read_cri
from deploy.runtimes.docker.unit import UnitParseError, parse_docker_unit
from deploy.runtimes.docker.verify import parse_docker_info
from deploy.runtimes.wiring import runtime_wiring
from deploy.settings import parse_settings
from deploy.tasks.cdi import cdi
from deploy.tasks.containerd import containerd_runtime
from deploy.tasks.docker import docker_runtime
from deploy.verification.cdi import cdi_spec_names

MIB = 1024 * 1024
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DAEMON_JSON = "/etc/docker/daemon.json"
DEBIAN = detect_platform({"name": "debian", "major": None, "release_meta": {"ID": "debian"}}, "x86_64").family
PLAIN_CONTAINERD = {
    "paths": [],
    "units": {},
    "generated_versions": {},
    "binary": "/usr/bin/containerd",
    "installation": {"name": "plain", "service": "containerd"},
}

# (content, what the one line says): a TOML file, a JSON file, a YAML file of each kind
TOML = {
    "nested 3,000 deep": (
        b"version = 2\nx = " + b"[" * 3000 + b"]" * 3000 + b"\n",
        "nests values deeper than gpu-node reads (64 levels)",
    ),
    "tables 3,000 deep": (
        b"version = 2\n[" + b".".join([b"t"] * 3000) + b"]\nx = 1\n",
        "nests values deeper than gpu-node reads (64 levels)",
    ),
    "50 MB": (b"version = 2\n# " + b"x" * (50 * MIB) + b"\n", "is larger than gpu-node reads (1024 KiB)"),
    "a number of 5,000 digits": (b"version = 2\nx = " + b"1" * 5000 + b"\n", "holds a number of more than 4300 digits"),
    "not UTF-8": (b"version = 2\n# the site's M\xfcller\n", "is not UTF-8 text: byte 0xfc on line 2"),
    "cut short": (
        b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "ru',
        "line 3",
    ),
}
JSON = {
    "nested 100,000 deep": (
        b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nests values deeper than gpu-node reads (64 levels)",
    ),
    "50 MB": (b'{"log-driver": "' + b"x" * (50 * MIB) + b'"}', "is larger than gpu-node reads (1024 KiB)"),
    "a number of 5,000 digits": (b'{"a": ' + b"1" * 5000 + b"}", "holds a number of more than 4300 digits"),
    "not UTF-8": (b'{\n  "log-driver": "M\xfcller"\n}\n', "is not UTF-8 text: byte 0xfc on line 2"),
    "cut short": (b'{\n  "runtimes": {\n    "nvidia": {"path": "/usr/bin/nvi', "line 3"),
}
YAML = {
    "nested 3,000 deep": (
        b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n",
        "nests values deeper than gpu-node reads (64 levels)",
    ),
    "aliases that expand to a billion values": (
        b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + b"".join(
            b"%s: &%s [%s]\n" % (name, name, b", ".join([b"*" + previous] * 10))
            for previous, name in zip(
                [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"], [b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i"]
            )
        ),
        "repeats values through aliases into more than its text holds",
    ),
    "50 MB": (b"a: " + b"x" * (50 * MIB) + b"\n", "is larger than gpu-node reads (1024 KiB)"),
    "a number of 5,000 digits": (b"a: " + b"1" * 5000 + b"\n", "holds a number of more than 4300 digits"),
    "not UTF-8": (b"kind: Pod\n# M\xfcller\n", "is not UTF-8 text: byte 0xfc on line 2"),
    "cut short": (b"apiVersion: v1\nkind: Pod\nspec: {containers: [{name: x", "line 3"),
}


def node_read(content: bytes) -> str:
    """What the node's read of a file holding ``content`` prints: its first 1 MiB and one byte, in
    base64 (``node_text.base64_read``; ``test_the_nodes_read_of_a_50_mb_file_...`` runs it)."""
    return base64.b64encode(content[: MIB + 1]).decode()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def one_line(plan, names: str, says: str) -> str:
    """The one line the host failed with: it names ``names`` and says ``says``; nothing raised past the host."""
    assert plan.error is None or "No hosts remaining" in str(plan.error), plan.error
    assert plan.failed, plan.commands
    [line] = plan.failures
    assert names in line and says in line, line
    assert "\n" not in line and "Traceback" not in line
    return line


def assert_untouched(plan, path: str) -> None:
    """No command wrote ``path``: no upload, no candidate, no swap, no restart."""
    writes = [
        command
        for _, command in plan.timeline
        if path in command and any(word in command for word in ("upload", "mv ", "cp ", "gpu-node-candidate"))
    ]
    assert not writes, writes
    assert not [command for _, command in plan.timeline if "systemctl restart" in command]


# --- the guard itself, under each parser -----------------------------------------------------

PARSERS = {"TOML": (TOML, tomllib.loads), "JSON": (JSON, json.loads), "YAML": (YAML, yaml.safe_load)}


@pytest.mark.parametrize(("kind", "case"), [(kind, case) for kind, (cases, _) in PARSERS.items() for case in cases])
def test_the_guard_refuses_each_pathological_text_in_one_line_naming_it(kind, case):
    cases, parse = PARSERS[kind]
    content, says = cases[case]
    text = node_text.decode(content[: MIB + 1])
    with pytest.raises((ValueError, yaml.YAMLError)) as raised:
        node_text.parsed(parse, text, "/etc/x.conf")
    message = str(raised.value)
    if case == "cut short":  # the parser's own error, which the call site words with the file's name and line
        assert not isinstance(raised.value, node_text.UnreadableText)
        assert says in node_text.syntax_error(raised.value, text)
    else:
        assert message.startswith("/etc/x.conf ") and says in message and "\n" not in message, message


def test_kubectls_answers_are_not_bounded_in_size():
    """A large cluster's `kubectl get nodes` is tens of MB: read, not refused (max_bytes=None)."""
    text = '{"items": [], "padding": "' + "x" * (50 * MIB) + '"}'
    assert node_text.parsed(json.loads, text, "kubectl", max_bytes=None)["items"] == []


# --- the node's read of a file -------------------------------------------------------------------


def run(command) -> str:
    text = command if isinstance(command, str) else command.get_raw_value()
    return subprocess.run(["sh", "-c", text], capture_output=True, text=True, check=True).stdout


def test_the_nodes_read_of_a_50_mb_file_sends_one_byte_more_than_gpu_node_reads(tmp_path):
    """Each fact that reads a file whole, run for real in a shell on a 50 MB file: it prints the
    file's first 1 MiB and one byte, so a larger file costs no more than that to refuse."""
    big = tmp_path / "big.conf"
    big.write_bytes(b"# " + b"x" * (50 * MIB))
    path = str(big)
    printed = {
        "ContainerdConfig": ContainerdConfig().process(run(ContainerdConfig().command(path)).splitlines())["config"],
        "ContainerdImports": ContainerdImports().process(
            run(ContainerdImports().command(str(tmp_path), ["*.conf"])).splitlines()
        )[0]["text"],
        "DockerState": DockerState().process(run(DockerState().command(path)).splitlines())["config"],
        "CdiState": CdiState().process(run(CdiState().command(path, path, path)).splitlines())["runtime_config"],
        "FileText": FileText().process(run(FileText().command(path)).splitlines()),
    }
    for fact, text in printed.items():
        assert len(text.encode()) == node_text.MAX_FILE_BYTES + 1, fact
        assert text == "# " + "x" * (node_text.MAX_FILE_BYTES - 1), fact


def test_a_files_bytes_that_are_not_utf8_survive_the_read_and_are_named_by_line(tmp_path):
    """The read keeps every byte (base64, then surrogateescape): the text can be written back as it
    was, and the guard names the line of the first byte that is not UTF-8."""
    content = b"a = 1\r\nb = 'caf\xe9'\r\n"
    (tmp_path / "latin1.toml").write_bytes(content)
    text = FileText().process(run(FileText().command(str(tmp_path / "latin1.toml"))).splitlines())
    assert text.encode("utf-8", "surrogateescape") == content
    with pytest.raises(node_text.UnreadableText, match=r"^x is not UTF-8 text: byte 0xe9 on line 2$"):
        node_text.checked(text, "x")


# --- containerd: config.toml, a drop-in it imports, its config dump, a k3s generated config ------


def containerd_plan(config: bytes, facts=()):
    answer = f"binary_path /usr/bin/containerd\nversion containerd 1.6.20~ds1\nconfig {node_read(config)}"
    return run_plan(
        containerd_runtime,
        settings_for(),
        DEBIAN,
        PLAIN_CONTAINERD,
        facts=[(config_read(CONTAINERD_CONFIG, None, "containerd"), answer), *facts],
    )


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("case", TOML)
def test_containerds_config_toml_fails_the_host_in_one_line_naming_it_and_is_left_as_it_was(case):
    content, says = TOML[case]
    plan = containerd_plan(content)
    line = one_line(plan, CONTAINERD_CONFIG, says)
    assert line.endswith("it was left as it is")
    assert_untouched(plan, CONTAINERD_CONFIG)


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("case", TOML)
def test_a_drop_in_containerd_imports_fails_the_host_in_one_line_naming_the_drop_in(case):
    content, says = TOML[case]
    drop_in = "/etc/containerd/conf.d/10-site.toml"
    main = b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    plan = containerd_plan(
        main,
        facts=[
            (
                (ContainerdImports, {"directory": "/etc/containerd", "patterns": ["/etc/containerd/conf.d/*.toml"]}),
                f"file {node_read(drop_in.encode())} {node_read(content)}",
            ),
        ],
    )
    one_line(plan, drop_in, says)
    assert_untouched(plan, CONTAINERD_CONFIG)
    assert_untouched(plan, drop_in)


@pytest.mark.parametrize("case", TOML)
def test_containerds_config_dump_is_a_problem_in_one_line_for_the_wiring_check_and_for_verify(case):
    content, says = TOML[case]
    dump = node_text.decode(content[: MIB + 1])
    wiring = runtime_wiring(parse_settings({}))
    where, problems = effective_problems(dump, wiring)
    [problem] = problems
    assert "\n" not in problem and (says in problem or case == "cut short"), problem
    _, reason = read_cri({"dump": dump, "dump_exit_code": 0, "path": "/usr/bin/containerd"})
    assert reason.startswith("cannot parse its output") and "\n" not in reason, reason


@pytest.mark.parametrize("case", TOML)
def test_a_k3s_generated_config_that_cannot_be_read_leaves_its_version_unknown(case):
    """k3s writes its config.toml from its template at each start: only its version is read (to pick
    the template), and a file it cannot read leaves that to the default, without failing the read."""
    content, _ = TOML[case]
    path = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    found = ContainerdInstallations().process([f"generated {path} {node_read(content)}", "binary /usr/bin/containerd"])
    assert path not in found["generated_versions"]


# --- the nvidia runtime's config.toml ----------------------------------------------------------


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("case", TOML)
def test_the_nvidia_runtimes_config_fails_the_host_in_one_line_and_is_left_as_it_was(case):
    content, says = TOML[case]
    state = (
        "ctk /usr/bin/nvidia-ctk\ninputs_changed 200\nspec_changed 300\n"
        "refresh_unit /usr/lib/systemd/system/nvidia-cdi-refresh.path\nrefresh_enabled enabled\n"
        f"refresh_active active\nruntime_config {node_read(content)}"
    )
    plan = run_plan(
        cdi,
        settings_for(nvidia_runtime_mode="legacy"),
        CDI_PLAIN,
        facts=[(CDI_CONTAINERD_READ, CDI_CONTAINERD["2.1"]), (cdi_state_read(), state)],
        unstated=DEFAULT,
    )
    one_line(plan, RUNTIME_CONFIG, says)
    assert_untouched(plan, RUNTIME_CONFIG)


# --- Docker: daemon.json, its unit and environment files, docker info --------------------------


def docker_plan(config: bytes | None = None, unit: bytes | None = None, envfile: bytes | None = None):
    lines = ["dockerd /usr/sbin/dockerd", "version Docker version 20.10.24+dfsg1, build 297e128"]
    if unit is not None:
        lines.append(f"unit {base64.b64encode(unit).decode()}")
    if envfile is not None:
        lines.append(f"envfile {b64('/etc/default/docker')} {node_read(envfile)}")
    if config is not None:
        lines.append(f"config {node_read(config)}")
    return run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker"),
        DEBIAN,
        facts=[(docker_state_read(DAEMON_JSON), "\n".join(lines))],
    )


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("case", [*JSON, "a number too large for a float"])
def test_daemon_json_fails_the_host_in_one_line_naming_it_and_is_left_as_it_was(case):
    content, says = JSON.get(case) or (b'{"a": 1e999}', "too large for a 64-bit float")
    plan = docker_plan(config=content)
    one_line(plan, DAEMON_JSON, says)
    assert_untouched(plan, DAEMON_JSON)


# `systemctl cat` prints each unit file after a "# <path>" line of its own; lines are the file's.
UNIT_HEADER = b"# /lib/systemd/system/docker.service\n"
UNIT = b"[Service]\nEnvironmentFile=-/etc/default/docker\nExecStart=/usr/bin/dockerd $DOCKER_OPTS\n"
LINE_CASES = {  # units and environment files are read line by line: no nesting, no numbers
    "50 MB": (b"# " + b"x" * (50 * MIB) + b"\n", "is larger than gpu-node reads (1024 KiB)"),
    "not UTF-8": (b"# M\xfcller\n", "is not UTF-8 text: byte 0xfc on line 4"),
    "cut short": (b"DOCKER_OPTS='--label a\n", "No closing quotation"),
}


def unit_output(unit: bytes) -> str:
    """The DockerState line of `systemctl cat docker.service`'s output (not cut: systemd's own)."""
    return base64.b64encode(UNIT_HEADER + unit).decode()


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("case", LINE_CASES)
def test_dockers_unit_fails_the_host_in_one_line_naming_the_unit_file(case):
    content, says = LINE_CASES[case]
    lines = [
        "dockerd /usr/sbin/dockerd",
        "version Docker version 20.10.24+dfsg1, build 297e128",
        f"unit {unit_output(UNIT + content.replace(b'DOCKER_OPTS=', b'ExecStart=/usr/bin/dockerd '))}",
        f"config {node_read(b'{}')}",
    ]
    plan = run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker"),
        DEBIAN,
        facts=[(docker_state_read(DAEMON_JSON), "\n".join(lines))],
    )
    one_line(plan, "/lib/systemd/system/docker.service", says)
    assert_untouched(plan, DAEMON_JSON)


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("case", LINE_CASES)
def test_dockers_environment_file_fails_the_host_in_one_line_naming_it(case):
    content, says = LINE_CASES[case]
    envfile = b"# Docker's options\n#\nDOCKER_OPTS=\n" + content
    plan = docker_plan(config=b"{}", unit=UNIT_HEADER + UNIT, envfile=envfile)
    one_line(plan, "/etc/default/docker", says)
    assert_untouched(plan, DAEMON_JSON)


def test_the_unit_parser_names_a_file_whose_own_path_is_not_utf8():
    with pytest.raises(UnitParseError, match="^`systemctl cat docker.service` is not UTF-8 text: byte 0xff on line 1$"):
        parse_docker_unit(node_text.decode(b"# /etc/systemd/system/docker\xff.service\n[Service]\n"), {})


@pytest.mark.parametrize("case", JSON)
def test_docker_info_that_cannot_be_read_is_an_info_error_not_a_failed_read(case):
    content, _ = JSON[case]
    found = parse_docker_info(node_text.decode(content[: MIB + 1]) + "|runc|systemd")
    assert found["runtimes"] == {} and found["info_error"]


# --- kubectl and helm's answers (facts on the control plane) -----------------------------------


def captured(out: str, prefix: str = "") -> list[str]:
    return [f"{prefix}rc 0", *(f"{prefix}out {line}" for line in out.split("\n"))]


KUBE_FACTS = {
    "KubeCluster": (KubeCluster, lambda out: ["kubeconfig-ok", *captured(out)]),
    "KubeNodes": (KubeNodes, captured),
    "KubeLiveObjects": (KubeLiveObjects, captured),
    "KubeNodeSchedule": (KubeNodeSchedule, captured),
    "HelmRelease": (HelmRelease, lambda out: ["helm-ok", *captured(out, "list-")]),
}


@pytest.mark.parametrize("fact", KUBE_FACTS)
@pytest.mark.parametrize("case", [case for case in JSON if case not in ("50 MB", "not UTF-8")])
def test_kubectl_and_helm_answers_fail_the_read_in_one_line_never_another_exception(fact, case):
    """A fact error is pyinfra's way to fail a host from a fact (that host alone). kubectl's JSON is
    Go's, which never prints bytes that are not UTF-8, and its size is not bounded (see above)."""
    cls, lines = KUBE_FACTS[fact]
    content, says = JSON[case]
    with pytest.raises(FactProcessError) as raised:
        cls().process(lines(content.decode()))
    message = str(raised.value)
    assert "\n" not in message and (says in message or case == "cut short"), message


# --- CDI spec and the kubelet's config (verify) ---------------------------------------------------


@pytest.mark.parametrize("case", YAML)
def test_a_cdi_spec_that_cannot_be_read_is_named_in_one_line(case):
    content, says = YAML[case]
    with pytest.raises(ValueError) as raised:
        cdi_spec_names(node_text.decode(content[: MIB + 1]))
    message = str(raised.value)
    assert message.startswith(SPEC_PATH) and "\n" not in message, message
    assert says in message or case == "cut short", message


@pytest.mark.parametrize("case", YAML)
def test_the_kubelets_config_that_cannot_be_read_fails_the_cgroup_step_in_one_line(tmp_path, case):
    content, says = YAML[case]
    lines = [line for line in verify_lines(dump=containerd_dump(), kubelet="") if not line.startswith("kubelet_config")]
    lines.append(f"kubelet_config {node_read(content)}")
    _, _, steps, failed = run_verify(tmp_path, lines)
    step = steps["cgroup_driver"]
    assert failed and step["status"] == "fail" and "\n" not in step["reason"], step
    assert KUBELET_CONFIG in step["reason"] and (says in step["reason"] or case == "cut short"), step


# --- the scheduler's static pod (control plane) --------------------------------------------------


@pytest.mark.parametrize("case", YAML)
def test_the_scheduler_manifest_fails_the_host_in_one_line_and_is_left_byte_for_byte(
    monkeypatch,
    cluster,  # noqa: F811 - the fixture
    caplog,
    case,
):
    content, says = YAML[case]
    cluster.files[MANIFEST] = content
    run = run_k8s_plan(monkeypatch, cluster, GPUSHARE_GPU, data=GPUSHARE_DATA)
    assert run.failed
    [line] = [record.getMessage() for record in caplog.records if "gpu-node:" in record.getMessage()]
    assert f"{MANIFEST}: " in line and "(left unchanged)" in line and "\n" not in line, line
    assert says in line, line
    assert cluster.files[MANIFEST] == content
    assert not [name for name in cluster.files if "staging" in name]
    assert "Traceback" not in caplog.text


# --- apt's sources (the driver stage's components) -----------------------------------------------

SOURCES = "/etc/apt/sources.list.d/debian.sources"
DEB822 = b"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n"


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize(
    ("case", "content", "says"),
    [  # read line by line: no nesting, no numbers
        ("50 MB", DEB822 + b"# " + b"x" * (50 * MIB), "is larger than gpu-node reads"),
        ("not UTF-8", DEB822 + b"# M\xfcller\n", "is not UTF-8 text: byte 0xfc on line 5"),
    ],
)
def test_apt_sources_that_cannot_be_read_fail_the_host_in_one_line_and_are_left_as_they_were(case, content, says):
    node = gpu_node("debian-12", facts=[(AptSourceFiles, f"{SOURCES} {node_read(content)}")], unstated=DEFAULT)
    plan = run_deploy(node, data={"stages": "driver"})
    line = one_line(plan, SOURCES, says)
    assert line.endswith("apt's sources were left as they are")
    assert not [command for command in plan.commands if SOURCES in command]
    assert not plan.ran("apt-get")


# --- the node's own outputs: preflight's one read, and a fact read alone ---------------------------


@pytest.mark.usefixtures("both_modes")
def test_an_os_release_that_is_not_utf8_refuses_the_host_in_preflight_in_one_line():
    """pyinfra's connector takes a command's output as UTF-8 and stops reading at the first line that
    is not: preflight's one read comes in base64, and the fact whose part is not UTF-8 is named."""
    release = [line.replace("Debian", "D\udce9bian") for line in os_release("debian-12")]
    node = gpu_node(facts=[(LinuxDistribution, release)], unstated=DEFAULT)
    plan = run_deploy(node)
    line = one_line(plan, "the node's answer to LinuxDistribution", "is not UTF-8 text: byte 0xe9 on line")
    assert plan.op_names() == ["Refuse this host (preflight)"], line


@pytest.mark.usefixtures("both_modes")
def test_a_number_of_5000_digits_in_the_nodes_own_output_refuses_the_host_in_preflight_in_one_line():
    lines = [
        line if not line.startswith("disk /var") else "disk /var " + "9" * 5000 for line in node_lines("6.1.0-18-amd64")
    ]
    plan = run_deploy(gpu_node(node_survey=lines, unstated=DEFAULT))
    line = one_line(
        plan, "the node's answer to NodeSurvey cannot be read", "ValueError: Exceeds the limit (4300 digits)"
    )
    assert line.count("cannot be read") == 1, line
    assert plan.op_names() == ["Refuse this host (preflight)"]


@pytest.mark.usefixtures("both_modes")
def test_deploy_verify_refuses_a_host_whose_read_cannot_be_read_in_one_line():
    lines = [
        line if not line.startswith("disk /var") else "disk /var " + "9" * 5000 for line in node_lines("6.1.0-18-amd64")
    ]
    plan = run_deploy(gpu_node(node_survey=lines, unstated=DEFAULT), deploy_file=str(REPO / "deploy" / "verify.py"))
    one_line(plan, "the node's answer to NodeSurvey cannot be read", "ValueError: Exceeds the limit (4300 digits)")
    assert plan.op_names() == ["Refuse this host (its read)"]


def test_a_fact_read_alone_fails_in_one_fact_error_never_another_exception():
    """Outside preflight's read, pyinfra runs the fact's process itself: it fails the host alone on a
    FactProcessError and stops every host on anything else."""
    lines = [*node_lines("6.1.0-18-amd64")[:-2], "disk / " + "9" * 5000]
    with pytest.raises(FactProcessError) as raised:
        NodeSurvey().process(lines)
    assert str(raised.value).startswith("the node's answer to NodeSurvey cannot be read: ValueError: Exceeds the limit")
    assert "\n" not in str(raised.value)


@pytest.mark.usefixtures("both_modes")
def test_a_fact_read_alone_that_cannot_be_read_fails_that_host_and_the_run_goes_on():
    @deploy("read alone")
    def read_alone():
        host.get_fact(NodeSurvey)
        host.noop("read")

    lines = [*node_lines("6.1.0-18-amd64")[:-2], "disk / " + "9" * 5000]
    plan = run_plan(read_alone, facts=[(NodeSurvey, lines)])
    assert plan.failed and plan.error is not None and "No hosts remaining" in str(plan.error)


# --- a fleet: one poisoned host among good ones ----------------------------------------------------


def containerd_node(config: bytes) -> Node:
    answer = f"binary_path /usr/bin/containerd\nversion containerd 1.6.20~ds1\nconfig {node_read(config)}"
    return gpu_node(facts=[(config_read(CONTAINERD_CONFIG, None, "containerd"), answer)], unstated=DEFAULT)


def docker_node(config: bytes) -> Node:
    answer = (
        f"dockerd /usr/sbin/dockerd\nversion Docker version 20.10.24+dfsg1, build 297e128\nconfig {node_read(config)}"
    )
    return gpu_node(facts=[(docker_state_read(DAEMON_JSON), answer)], unstated=DEFAULT)


FLEETS = {  # the runtime, its config, a node holding a config, and a good config
    "containerd": (
        "containerd",
        CONTAINERD_CONFIG,
        containerd_node,
        TOML,
        b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n',
    ),
    "docker": ("docker", DAEMON_JSON, docker_node, JSON, b'{\n  "log-driver": "journald"\n}\n'),
}


@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize("fleet", FLEETS)
@pytest.mark.parametrize("case", ["nested", "a number of 5,000 digits", "not UTF-8"])
def test_one_poisoned_host_fails_in_one_line_and_the_others_are_wired(fleet, case):
    """The issue's run: one host's daemon.json nested 100,000 deep stopped every host, after the
    others had swapped theirs in and restarted docker, with no host marked failed."""
    runtime, path, node, cases, good = FLEETS[fleet]
    content, says = next(value for name, value in cases.items() if name.startswith(case))
    names = ["@fake/good1", "@fake/poisoned", "@fake/good2"]
    nodes = dict(zip(names, [node(good), node(content), node(good)]))
    inventory = Inventory(
        (names, {}),
        override_data={
            "fake_delay": 0,
            "fake_delay_jitter": 0,
            "kernel_modules_load": False,
            "reboot_allowed": False,
            "stages": "runtimes",
            "container_runtimes": runtime,
        },
    )
    plan = run_inventory(inventory, nodes)
    assert plan.error is None, plan.error
    [line] = plan.failures
    assert path in line and says in line and "\n" not in line
    assert {host.name for host in plan.state.failed_hosts} == {"@fake/poisoned"}
    # the staged upload placed beside the live file (deploy/operations/upload.py's place script)
    wired = {
        host
        for host, command in plan.timeline
        if any(path in placed for _staged, placed, _live in staged_uploads(command))
    }
    assert wired == {"@fake/good1", "@fake/good2"}, plan.timeline
    restarted = {
        host
        for host, command in plan.timeline  # the safe install's swap and restart
        if f"unit={runtime}\n" in command and 'systemctl restart "$unit"' in command
    }
    assert restarted == {"@fake/good1", "@fake/good2"}, plan.timeline
    assert not [command for host, command in plan.timeline if host == "@fake/poisoned" and "upload" in command]
