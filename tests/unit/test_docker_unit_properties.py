"""
Property tests (Hypothesis) of reading dockerd's command line from docker.service: the same flags
come out whichever way a unit passes them, and no text at all makes the reader fail other than
with its one-line UnitParseError.
"""

from __future__ import annotations

import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from deploy.runtimes.docker.unit import BOOLEAN_FLAGS, UnitParseError, parse_docker_unit

UNIT = "/lib/systemd/system/docker.service"
DROP_IN = "/etc/systemd/system/docker.service.d/50-options.conf"
ENV_FILE = "/etc/default/docker"

VALUE_FLAGS = [
    "exec-opt",
    "default-runtime",
    "add-runtime",
    "log-opt",
    "dns",
    "data-root",
    "label",
    "storage-driver",
    "insecure-registry",
    "registry-mirror",
    "containerd",
    "host",
]
values = st.text(st.sampled_from("abcxyz019=._:/-, "), min_size=1, max_size=20).filter(lambda v: v.strip() == v)
flag = st.one_of(
    st.tuples(st.sampled_from(VALUE_FLAGS), values, st.sampled_from(["=", " "])),
    st.tuples(
        st.sampled_from(sorted(BOOLEAN_FLAGS - {"help", "version", "validate"})),
        st.sampled_from(["true", "false", None]),
        st.just("="),
    ),
)


def spelled(name, value, separator) -> list[str]:
    if value is None:
        return [f"--{name}"]
    return [f"--{name}={value}"] if separator == "=" else [f"--{name}", value]


def expected(flags) -> list[tuple[str, str]]:
    return [(name, "true" if value is None else value) for name, value, _ in flags]


def cat(*fragments) -> str:
    return "\n".join(f"# {path}\n{text}\n" for path, text in fragments)


def parsed(text: str, files=None) -> list[tuple[str, str]]:
    return [(f.name, f.value) for f in parse_docker_unit(text, files or {}).flags]


@settings(max_examples=150, deadline=None)
@given(st.lists(flag, max_size=8), st.integers(min_value=1, max_value=3))
def test_the_same_flags_from_exec_start_environment_environment_file_and_continuations(flags, width):
    words = [word for name, value, sep in flags for word in spelled(name, value, sep)]
    quoted = [shlex.quote(word) for word in words]
    # Literal, a few words per continuation line.
    lines = [" ".join(quoted[i : i + width]) for i in range(0, len(quoted), width)] or [""]
    literal = "[Service]\nExecStart=/usr/sbin/dockerd \\\n" + " \\\n".join(lines) + "\n"
    assert parsed(cat((UNIT, literal))) == expected(flags)
    # $DOCKER_OPTS from a drop-in's Environment= (systemd splits the value at whitespace).
    opts = " ".join(quoted)
    base = "[Service]\nEnvironmentFile=-/etc/default/docker\nExecStart=/usr/sbin/dockerd $DOCKER_OPTS\n"
    environment = f"[Service]\nEnvironment={shlex.quote('DOCKER_OPTS=' + opts)}\n"
    assert parsed(cat((UNIT, base), (DROP_IN, environment))) == expected(flags)
    # ... and from the EnvironmentFile, which overrides Environment=.
    assert parsed(
        cat((UNIT, base), (DROP_IN, "[Service]\nEnvironment=DOCKER_OPTS=--debug\n")),
        {ENV_FILE: f"# site options\nDOCKER_OPTS={shlex.quote(opts)}\n"},
    ) == expected(flags)
    # An ExecStart= reset in a drop-in replaces the unit's command.
    reset = "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd " + opts + "\n"
    assert parsed(
        cat((UNIT, "[Service]\nExecStart=/usr/sbin/dockerd --iptables=false\n"), (DROP_IN, reset))
    ) == expected(flags)


noise = st.text(st.sampled_from("ab$={}'\"\\ -#;%\t\r\u2028é"), max_size=30)
unit_line = st.one_of(
    noise,
    st.just("[Service]"),
    st.just("ExecStart="),
    st.just("Environment="),
    noise.map(lambda text: "ExecStart=/usr/bin/dockerd " + text),
    noise.map(lambda text: "Environment=" + text),
    noise.map(lambda text: "EnvironmentFile=" + text),
    noise.map(lambda text: "ExecStart=/usr/bin/dockerd $A ${B} " + text + " \\"),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(unit_line, max_size=12).map("\n".join),
    st.text(max_size=200),
    st.lists(noise.map(lambda text: "DOCKER_OPTS=" + text), max_size=3).map("\n".join),
)
def test_any_unit_text_reads_or_fails_with_one_line_naming_a_file(unit, anything, environment_file):
    text = cat((UNIT, unit), (DROP_IN, "[Service]\nEnvironmentFile=/etc/default/docker\n" + anything + "\n" + unit))
    try:
        parse_docker_unit(text, {ENV_FILE: environment_file})
    except UnitParseError as error:
        message = str(error)
        assert "\n" not in message and message.startswith((UNIT, DROP_IN, ENV_FILE)), message
