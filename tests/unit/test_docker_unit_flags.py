"""
dockerd's command line read from docker.service the way systemd builds it, and what dockerd
does with flags next to daemon.json: units in the shapes packages and cluster installers use
(written for these tests: tests/fixtures/docker/units/README.md) in, flags and verdicts out.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from deploy.facts.docker import DockerState
from deploy.runtimes.docker.daemon_json import (
    DaemonConfigError,
    check_schema,
    effective_problems,
    effective_settings,
    flag_conflicts,
    is_containerd_shim_name,
    leave_to_flags,
    merge_daemon_config,
)
from deploy.runtimes.docker.unit import UnitParseError, parse_docker_unit
from deploy.runtimes.wiring import RuntimeWiring

UNITS = Path(__file__).resolve().parents[1] / "fixtures" / "docker" / "units"
DAEMON_JSON = "/etc/docker/daemon.json"
PACKAGED_UNIT = "/lib/systemd/system/docker.service"
DROP_INS = "/etc/systemd/system/docker.service.d"
OPTIONS_DROP_IN = f"{DROP_INS}/docker-options.conf"


def fixture(name: str) -> str:
    return (UNITS / name).read_text()


def systemctl_cat(*fragments: tuple[str, str]) -> str:
    """What `systemctl cat docker.service` prints: each file under a `# path` line, a blank line between."""
    return "\n".join(f"# {path}\n{text.rstrip(chr(10))}\n" for path, text in fragments)


def flags_of(*fragments, environment_files=None):
    return parse_docker_unit(systemctl_cat(*fragments), environment_files or {}).flags


def written(flags):
    return [flag.written for flag in flags]


def packaged_with(*drop_ins, default_docker=None):
    """The packaged unit (EnvironmentFile=-/etc/default/docker, $DOCKER_OPTS), that file, and drop-ins."""
    if default_docker is None:
        default_docker = fixture("packaged/default-docker")
    files = {"/etc/default/docker": default_docker}
    return parse_docker_unit(systemctl_cat((PACKAGED_UNIT, fixture("packaged/docker.service")), *drop_ins), files)


# --- reading the unit -------------------------------------------------------------------------


def test_packaged_unit_with_its_comment_only_environment_file_runs_dockerd_with_two_flags():
    command_line = packaged_with()
    assert command_line.runs_dockerd and command_line.exec_start_file == PACKAGED_UNIT
    assert written(command_line.flags) == ["-H fd://", "--containerd=/run/containerd/containerd.sock"]
    assert [(flag.name, flag.value, flag.config_keys) for flag in command_line.flags] == [
        ("host", "fd://", ("hosts",)),
        ("containerd", "/run/containerd/containerd.sock", ("containerd",)),
    ]


def test_environment_file_docker_opts_expand_into_flags_naming_that_file():
    default = fixture("packaged/default-docker") + 'DOCKER_OPTS="--dns 10.0.0.2 --dns 10.0.0.3"\n'
    flags = packaged_with(default_docker=default).flags
    assert written(flags)[2:] == ["--dns 10.0.0.2", "--dns 10.0.0.3"]
    assert flags[2].origin == "/etc/default/docker (DOCKER_OPTS)"
    assert flags[0].origin == PACKAGED_UNIT


def test_installer_unit_of_variables_and_its_drop_ins_give_every_flag_of_their_environment():
    """An ExecStart of only variables over continued lines (one never set), and drop-ins that set
    them with continued, partly empty lines, as some cluster installers write them."""
    command_line = parse_docker_unit(
        systemctl_cat(
            ("/etc/systemd/system/docker.service", fixture("installer/docker.service")),
            (f"{DROP_INS}/docker-dns.conf", fixture("installer/dns.conf")),
            (OPTIONS_DROP_IN, fixture("installer/options-systemd.conf")),
        ),
        {},
    )
    assert command_line.exec_start_file == "/etc/systemd/system/docker.service"
    assert written(command_line.flags) == [
        "--iptables=false",
        "--exec-opt native.cgroupdriver=systemd",
        "--data-root=/var/lib/docker",
        "--log-opt max-size=20m",
        "--log-opt max-file=3",
        "--dns 10.96.0.10",
        "--dns-search cluster.local",
        "--dns-search example.internal",
        "--dns-opt ndots:5",
        "--dns-opt timeout:1",
    ]
    origins = {flag.written: flag.origin for flag in command_line.flags}
    assert origins["--exec-opt native.cgroupdriver=systemd"] == f"{OPTIONS_DROP_IN} (DOCKER_OPTS)"
    assert origins["--dns 10.96.0.10"] == f"{DROP_INS}/docker-dns.conf (DOCKER_DNS_OPTIONS)"
    keys = {key for flag in command_line.flags for key in flag.config_keys}
    assert keys == {"iptables", "exec-opts", "data-root", "log-opts", "dns", "dns-search", "dns-opts"}


def test_options_drop_in_on_the_packaged_unit_adds_its_flags_after_the_units():
    flags = packaged_with((OPTIONS_DROP_IN, fixture("installer/options-systemd.conf"))).flags
    assert written(flags)[:3] == ["-H fd://", "--containerd=/run/containerd/containerd.sock", "--iptables=false"]
    assert flags[3].written == "--exec-opt native.cgroupdriver=systemd"


def test_environment_file_values_override_environment_lines():
    drop_in = '[Service]\nEnvironment="DOCKER_OPTS=--default-runtime=nvidia"\n'
    flags = packaged_with((f"{DROP_INS}/gpu.conf", drop_in), default_docker='DOCKER_OPTS="--debug"\n').flags
    assert written(flags)[2:] == ["--debug"]


def test_an_empty_exec_start_resets_and_the_drop_in_command_wins():
    drop_in = (
        "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd --default-runtime=nvidia "
        "--add-runtime nvidia=/usr/bin/nvidia-container-runtime\n"
    )
    command_line = parse_docker_unit(
        systemctl_cat(
            ("/lib/systemd/system/docker.service", fixture("plain/docker.service")),
            (f"{DROP_INS}/override.conf", drop_in),
        ),
        {},
    )
    assert command_line.exec_start_file == f"{DROP_INS}/override.conf"
    assert [(flag.name, flag.value) for flag in command_line.flags] == [
        ("default-runtime", "nvidia"),
        ("add-runtime", "nvidia=/usr/bin/nvidia-container-runtime"),
    ]


def test_plain_unit_flags():
    flags = flags_of(("/lib/systemd/system/docker.service", fixture("plain/docker.service")))
    assert written(flags) == ["-H fd://", "--containerd=/run/containerd/containerd.sock"]


def test_dollar_var_splits_braced_var_stays_one_word_and_double_dollar_is_literal():
    unit = (
        '[Service]\nEnvironment="LABELS=--label a=1 --label b=2" "ONE=x y"\n'
        "ExecStart=/usr/bin/dockerd $LABELS --label=site=${ONE} --label=cost=$$5 $UNSET\n"
    )
    flags = flags_of(("/etc/systemd/system/docker.service", unit))
    assert [(flag.name, flag.value) for flag in flags] == [
        ("label", "a=1"),
        ("label", "b=2"),
        ("label", "site=x y"),
        ("label", "cost=$5"),
    ]
    assert flags[2].origin == "/etc/systemd/system/docker.service (ONE)"
    assert flags[3].origin == "/etc/systemd/system/docker.service"


def test_pflag_forms_shorthands_and_booleans():
    unit = (
        "[Service]\nExecStart=-/usr/bin/dockerd -H=unix:///run/d.sock -Htcp://127.0.0.1:2375 -D "
        "--iptables false --debug=false -s overlay2 -- --not-a-flag\n"
    )
    flags = flags_of(("/etc/systemd/system/docker.service", unit))
    assert [(flag.name, flag.value) for flag in flags] == [
        ("host", "unix:///run/d.sock"),
        ("host", "tcp://127.0.0.1:2375"),
        ("debug", "true"),
        ("iptables", "true"),
        ("debug", "false"),
        ("storage-driver", "overlay2"),
    ]


def test_a_command_that_is_not_dockerd_is_reported_as_such():
    unit = "[Service]\nExecStart=/usr/local/bin/start-docker.sh --exec-opt native.cgroupdriver=cgroupfs\n"
    command_line = parse_docker_unit(systemctl_cat(("/etc/systemd/system/docker.service", unit)), {})
    assert not command_line.runs_dockerd and command_line.flags == []


def test_no_unit_no_flags():
    assert parse_docker_unit("", {}).flags == []


@pytest.mark.parametrize(
    "unit, expected",
    [
        (
            '[Service]\nExecStart=/usr/bin/dockerd --label "a=1\n',
            '/etc/systemd/system/docker.service: cannot read ExecStart=/usr/bin/dockerd --label "a=1: No closing quotation: '
            "fix its quoting (systemd drops such a line; gpu-node cannot tell dockerd's flags from it)",
        ),
        (
            '[Service]\nEnvironment="DOCKER_OPTS=--debug\nExecStart=/usr/bin/dockerd\n',
            '/etc/systemd/system/docker.service: cannot read Environment="DOCKER_OPTS=--debug: No closing quotation: '
            "fix its quoting (systemd drops such a line; gpu-node cannot tell dockerd's flags from it)",
        ),
    ],
)
def test_unreadable_quoting_is_one_line_naming_the_file(unit, expected):
    with pytest.raises(UnitParseError) as error:
        parse_docker_unit(systemctl_cat(("/etc/systemd/system/docker.service", unit)), {})
    assert str(error.value) == expected and "\n" not in str(error.value)


def test_unreadable_environment_file_names_it():
    with pytest.raises(UnitParseError, match="^/etc/default/docker: cannot read DOCKER_OPTS="):
        packaged_with(default_docker="DOCKER_OPTS='--debug\n")


def test_fact_reads_unit_and_environment_files_in_its_one_command():
    unit = systemctl_cat((PACKAGED_UNIT, fixture("packaged/docker.service")))
    default = fixture("packaged/default-docker")

    def b64(text):
        return base64.b64encode(text.encode()).decode()

    state = DockerState().process(
        [
            "dockerd /usr/sbin/dockerd",
            "version Docker version 20.10.24+dfsg1, build 297e128",
            f"unit {b64(unit)}",
            f"envfile {b64('/etc/default/docker')} {b64(default)}",
            f"envfile {b64('/etc/empty')} ",
        ]
    )
    assert state["unit"] == unit
    assert state["environment_files"] == {"/etc/default/docker": default, "/etc/empty": ""}
    command = DockerState().command("/etc/docker/daemon.json").get_raw_value()
    assert command.count("systemctl cat docker.service") == 1 and "EnvironmentFile" in command


# --- what dockerd does with flags next to daemon.json ----------------------------------------


def options_drop_in_on_packaged_unit(options="installer/options-systemd.conf"):
    return packaged_with((OPTIONS_DROP_IN, fixture(options))).flags


def candidate_for(existing: dict, flags, wiring=RuntimeWiring()):
    merged = merge_daemon_config(existing, wiring)
    return leave_to_flags(merged.config, existing, flags)


def test_a_drop_ins_systemd_cgroup_flag_the_exec_opts_are_left_to_the_flag_and_everything_is_as_meant():
    flags = options_drop_in_on_packaged_unit()
    existing = {"bridge": "none"}
    assert flag_conflicts(existing, flags, DAEMON_JSON) == []
    candidate = candidate_for(existing, flags)
    assert candidate == {
        "bridge": "none",
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
        "default-runtime": "nvidia",
    }
    assert flag_conflicts(candidate, flags, DAEMON_JSON) == []
    effective = effective_settings(candidate, flags, DAEMON_JSON)
    assert effective["cgroup driver"].value == "systemd"
    assert effective["cgroup driver"].source == (
        f"--exec-opt native.cgroupdriver=systemd (from {OPTIONS_DROP_IN} (DOCKER_OPTS))"
    )
    assert effective_problems(effective, RuntimeWiring()) == []
    assert candidate_for(candidate, flags) == candidate  # a second run changes nothing


def test_a_drop_ins_cgroupfs_flag_is_refused_naming_flag_value_file_and_what_to_do():
    flags = options_drop_in_on_packaged_unit("installer/options-cgroupfs.conf")
    candidate = candidate_for({"bridge": "none"}, flags)
    problems = effective_problems(effective_settings(candidate, flags, DAEMON_JSON), RuntimeWiring())
    assert problems == [
        "dockerd would run with cgroup driver cgroupfs, decided by --exec-opt native.cgroupdriver=cgroupfs "
        f"(from {OPTIONS_DROP_IN} (DOCKER_OPTS)); systemd_cgroup=true needs systemd: make that flag "
        "--exec-opt native.cgroupdriver=systemd or remove the unit's --exec-opt flags (daemon.json then sets it), "
        "or set systemd_cgroup=false"
    ]
    assert (
        effective_problems(effective_settings(candidate, flags, DAEMON_JSON), RuntimeWiring(systemd_cgroup=False)) == []
    )


def test_a_daemon_json_already_conflicting_with_the_flags_is_named():
    flags = options_drop_in_on_packaged_unit()
    conflicts = flag_conflicts(
        {"bridge": "none", "iptables": False, "exec-opts": ["native.cgroupdriver=systemd"]}, flags, DAEMON_JSON
    )
    assert conflicts == [
        f"{DAEMON_JSON} sets 'iptables' and --iptables=false (from {OPTIONS_DROP_IN} (DOCKER_OPTS)) sets it too",
        f"{DAEMON_JSON} sets 'exec-opts' and --exec-opt native.cgroupdriver=systemd "
        f"(from {OPTIONS_DROP_IN} (DOCKER_OPTS)) sets it too",
    ]


def test_hosts_in_daemon_json_conflicts_with_the_units_dash_h():
    flags = flags_of(("/lib/systemd/system/docker.service", fixture("plain/docker.service")))
    assert flag_conflicts({"hosts": ["unix:///var/run/docker.sock"]}, flags, DAEMON_JSON) == [
        f"{DAEMON_JSON} sets 'hosts' and -H fd:// (from /lib/systemd/system/docker.service) sets it too"
    ]


def test_add_runtime_flags_merge_with_the_files_runtimes_as_dockerd_does():
    flags = flags_of(
        (
            "/etc/systemd/system/docker.service",
            "[Service]\nExecStart=/usr/bin/dockerd --add-runtime crun=/usr/bin/crun\n",
        )
    )
    existing = {"runtimes": {"runsc": {"path": "/usr/local/bin/runsc"}}}
    assert flag_conflicts(existing, flags, DAEMON_JSON) == []
    candidate = candidate_for(existing, flags)
    assert set(candidate["runtimes"]) == {"runsc", "nvidia"}
    check_schema({**candidate, "default-runtime": "crun"}, DAEMON_JSON, 20, flag_runtimes=["crun"])


@pytest.mark.parametrize("path", ["/usr/bin/nvidia-container-runtime", "/opt/nvidia/runtime"])
def test_an_add_runtime_nvidia_flag_is_outweighed_by_the_files_runtimes_nvidia(path):
    # dockerd keeps the file's definition of a runtime the flags also name (moby's
    # MergeDaemonConfigurations; measured on dockerd 20.10); the default runtime is the flag's.
    drop_in = (
        f"[Service]\nExecStart=\nExecStart=/usr/bin/dockerd --add-runtime nvidia={path} --default-runtime nvidia\n"
    )
    flags = flags_of(
        ("/lib/systemd/system/docker.service", fixture("plain/docker.service")), (f"{DROP_INS}/gpu.conf", drop_in)
    )
    candidate = candidate_for({}, flags)
    assert candidate == {
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
        "exec-opts": ["native.cgroupdriver=systemd"],
    }
    effective = effective_settings(candidate, flags, DAEMON_JSON)
    assert (effective["nvidia runtime"].value, effective["nvidia runtime"].source) == (
        "/usr/bin/nvidia-container-runtime",
        f"{DAEMON_JSON} runtimes.nvidia",
    )
    assert effective_problems(effective, RuntimeWiring()) == []


def test_an_add_runtime_nvidia_flag_alone_is_what_dockerd_runs():
    flags = flags_of(
        (
            "/etc/systemd/system/docker.service",
            "[Service]\nExecStart=/usr/bin/dockerd --add-runtime nvidia=/opt/nvidia/runtime\n",
        )
    )
    problems = effective_problems(effective_settings({}, flags, DAEMON_JSON), RuntimeWiring())
    assert problems[2] == (
        "dockerd's nvidia runtime would be /opt/nvidia/runtime, from --add-runtime nvidia=/opt/nvidia/runtime "
        "(from /etc/systemd/system/docker.service); gpu-node wires /usr/bin/nvidia-container-runtime: point it there"
    )


def test_default_runtime_flag_that_is_not_nvidia_is_refused_and_nvidia_with_default_false_too():
    unit = "[Service]\nExecStart=/usr/bin/dockerd --default-runtime=runc\n"
    flags = flags_of(("/etc/systemd/system/docker.service", unit))
    candidate = candidate_for({}, flags)
    assert "default-runtime" not in candidate
    assert effective_problems(effective_settings(candidate, flags, DAEMON_JSON), RuntimeWiring()) == [
        "dockerd's default runtime would be runc, set by --default-runtime=runc (from "
        "/etc/systemd/system/docker.service); nvidia_runtime_default=true needs nvidia: make that flag "
        "--default-runtime=nvidia or remove it, or set nvidia_runtime_default=false"
    ]
    nvidia = flags_of(("/etc/systemd/system/docker.service", unit.replace("runc", "nvidia")))
    wiring = RuntimeWiring(make_default=False)
    problems = effective_problems(effective_settings(candidate_for({}, nvidia, wiring), nvidia, DAEMON_JSON), wiring)
    assert problems and problems[0].startswith("dockerd's default runtime would be nvidia")


def test_exec_opt_flags_without_a_cgroup_driver_leave_it_unset_and_are_refused():
    flags = flags_of(
        ("/etc/systemd/system/docker.service", "[Service]\nExecStart=/usr/bin/dockerd --exec-opt native.umask=normal\n")
    )
    problems = effective_problems(effective_settings(candidate_for({}, flags), flags, DAEMON_JSON), RuntimeWiring())
    assert problems[0].startswith(
        "dockerd would run with cgroup driver (not set), decided by --exec-opt "
        "native.umask=normal (from /etc/systemd/system/docker.service), whose --exec-opt "
        "flags replace /etc/docker/daemon.json's exec-opts"
    )


def test_cdi_feature_flag():
    flags = flags_of(
        ("/etc/systemd/system/docker.service", "[Service]\nExecStart=/usr/bin/dockerd --feature cdi=false\n")
    )
    wiring = RuntimeWiring(enable_cdi=True)
    problems = effective_problems(effective_settings(candidate_for({}, flags, wiring), flags, DAEMON_JSON), wiring)
    assert problems == [
        "CDI would stay off, decided by --feature cdi=false (from /etc/systemd/system/docker.service); "
        "cdi needs it on: make that flag --feature cdi=true or remove it, or set cdi=false"
    ]


# --- default-runtime: a containerd shim name (moby daemon/runtime_unix.go, isPermissibleC8dRuntimeName) ---


# Each kind of name the rule tells apart: a dot and no path separator makes a shim name.
@pytest.mark.parametrize(
    "name, is_shim",
    [
        ("io.containerd.kata.v2", True),  # versioned shim name
        ("io.containerd.example", True),  # no version part: still a shim name
        ("io.containerd.runsc.v1", True),  # gVisor's shim, Docker's docs
        ("crun", False),  # no dot: a runtime's name, not a shim
        ("/usr/local/bin/crun", False),  # a path
        ("/opt/shims/io.containerd.kata.v2", False),  # a path ending in a shim name
        ("shims/io.containerd.kata.v2", False),  # a relative path
        (".io.containerd.kata.v2", False),  # empty part before the first dot
    ],
)
def test_containerd_shim_names_as_moby_decides(name, is_shim):
    assert is_containerd_shim_name(name) is is_shim


def test_shim_name_default_runtime_is_accepted_on_docker_23_and_later():
    for major in (23, 26, None):
        check_schema({"default-runtime": "io.containerd.runsc.v1"}, DAEMON_JSON, major)


def test_shim_name_default_runtime_on_docker_20_says_it_needs_23():
    with pytest.raises(DaemonConfigError) as error:
        check_schema({"default-runtime": "io.containerd.runsc.v1"}, DAEMON_JSON, 20)
    assert str(error.value) == (
        f"{DAEMON_JSON}: default-runtime 'io.containerd.runsc.v1' is a containerd shim name, which dockerd "
        'accepts from Docker 23 on; this dockerd is 20: name a runtime from "runtimes" or upgrade Docker'
    )


@pytest.mark.parametrize("name", ["runc", "io.containerd.runc.v2"])
def test_builtin_runtimes_are_accepted_on_docker_20(name):
    check_schema({"default-runtime": name}, DAEMON_JSON, 20)


@pytest.mark.parametrize("name", ["crun", "/opt/shims/io.containerd.kata.v2", "shims/io.containerd.kata.v2"])
def test_names_that_are_neither_configured_nor_shims_are_refused(name):
    with pytest.raises(DaemonConfigError, match="is not a configured runtime"):
        check_schema({"default-runtime": name}, DAEMON_JSON, 27)


def test_merge_keeps_a_shim_default_runtime_when_nvidia_is_not_the_default():
    existing = {"default-runtime": "io.containerd.runsc.v1"}
    merged = merge_daemon_config(existing, RuntimeWiring(make_default=False))
    assert merged.config["default-runtime"] == "io.containerd.runsc.v1"
    check_schema(merged.config, DAEMON_JSON, 27)
