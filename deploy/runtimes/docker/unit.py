"""
The dockerd command line systemd will start, read from ``systemctl cat docker.service`` and its
EnvironmentFile=s: the flags that give a daemon.json key (dockerd refuses a directive given both
ways) and decide what dockerd runs. Pure: text in, flags out.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...foundations import node_text


class UnitParseError(ValueError):
    """A docker.service the flag check cannot read; the message names the file and the problem."""


# dockerd flags whose daemon.json key differs from the flag's name: moby's NamedOption values
# (opts.NewNamedListOptsRef & co. in cmd/dockerd/config*.go, daemon/command/config*.go).
FLAG_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "exec-opt": ("exec-opts",),
    "add-runtime": ("runtimes",),
    "storage-opt": ("storage-opts",),
    "authorization-plugin": ("authorization-plugins",),
    "dns-opt": ("dns-opts",),
    "label": ("labels",),
    "log-opt": ("log-opts",),
    "cluster-store-opt": ("cluster-store-opts",),
    "node-generic-resource": ("node-generic-resources",),
    "registry-mirror": ("registry-mirrors",),
    "insecure-registry": ("insecure-registries",),
    "default-ulimit": ("default-ulimits",),
    "host": ("hosts",),
    "feature": ("features",),
    "default-network-opt": ("default-network-opts",),
    "host-gateway-ip": ("host-gateway-ip", "host-gateway-ips"),
    "cdi-spec-dir": ("cdi-spec-dirs",),
    "default-address-pool": ("default-address-pools",),
}
SHORTHAND_FLAGS = {
    "H": "host",
    "D": "debug",
    "l": "log-level",
    "G": "group",
    "p": "pidfile",
    "b": "bridge",
    "s": "storage-driver",
    "g": "graph",
    "r": "restart",
    "v": "version",
    "h": "help",
}
# dockerd's boolean flags (flags.BoolVar*): a bare `--iptables` takes no value.
BOOLEAN_FLAGS = frozenset(
    {
        "allow-direct-routing",
        "cri-containerd",
        "debug",
        "experimental",
        "help",
        "icc",
        "init",
        "ip-forward",
        "ip-forward-no-drop",
        "ip-masq",
        "ip6tables",
        "iptables",
        "ipv6",
        "live-restore",
        "no-new-privileges",
        "raw-logs",
        "restart",
        "rootless",
        "selinux-enabled",
        "tls",
        "tlsverify",
        "userland-proxy",
        "validate",
        "version",
    }
)


@dataclass(frozen=True)
class DockerdFlag:
    """One flag of the dockerd command line systemd runs, after Environment expansion."""

    name: str  # long name without dashes: "exec-opt"
    value: str  # "true" for a bare boolean flag
    written: str  # as the unit gives it: "--exec-opt native.cgroupdriver=systemd"
    origin: str  # "/etc/systemd/system/docker.service.d/docker-options.conf (DOCKER_OPTS)"

    @property
    def config_keys(self) -> tuple[str, ...]:
        return FLAG_CONFIG_KEYS.get(self.name, (self.name,))

    def describe(self) -> str:
        return f"{self.written} (from {self.origin})"


@dataclass
class DockerdCommandLine:
    """The effective ExecStart of docker.service: where it comes from and dockerd's flags."""

    exec_start_file: str | None = None
    runs_dockerd: bool = False
    flags: list[DockerdFlag] = field(default_factory=list)


def split_systemctl_cat(text: str) -> list[tuple[str, str]]:
    """`systemctl cat` output as (file, text) fragments: each one opens with a `# /path` line."""
    fragments: list[tuple[str, list[str]]] = []
    previous_blank = True
    for line in text.splitlines():
        if line.startswith("# /") and previous_blank:
            fragments.append((line[2:].strip(), []))
        elif fragments:
            fragments[-1][1].append(line)
        previous_blank = not line.strip()
    return [(path, "\n".join(lines)) for path, lines in fragments]


def unit_directives(text: str) -> Iterator[tuple[str | None, str, str]]:
    """(section, key, value) of a unit file: comments skipped, backslash continuations joined."""
    section, pending = None, None
    for raw in text.splitlines():
        line = raw.strip()
        if line[:1] in ("#", ";"):
            continue
        if pending is not None:
            line = pending + " " + line
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        pending = None
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            yield section, key.strip(), value.strip()
    if pending is not None and "=" in pending:
        key, _, value = pending.partition("=")
        yield section, key.strip(), value.strip()


def _split(value: str, what: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as error:
        raise UnitParseError(
            f"{what}: {error}: fix its quoting (systemd drops such a line; gpu-node cannot "
            "tell dockerd's flags from it)"
        ) from None


def _readable(text: str, source: str) -> str:
    try:
        return node_text.checked(text, source)
    except node_text.UnreadableText as error:
        raise UnitParseError(str(error)) from None


def parse_environment_file(text: str, path: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile= reads them (quotes removed, # and ; comments)."""
    _readable(text, path)
    values: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        pending = ""
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, sep, value = stripped.partition("=")
        if sep and key.strip():
            values[key.strip()] = " ".join(_split(value, f"{path}: cannot read {key.strip()}="))
    return values


_WHOLE_WORD_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_BRACED_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\$")


def parse_docker_unit(systemctl_cat: str, environment_files: dict[str, str]) -> DockerdCommandLine:
    """
    The dockerd command line systemd starts: the last ExecStart= after `ExecStart=` resets,
    `$VAR` (split at whitespace) and `${VAR}` (one word) expanded from Environment= and
    EnvironmentFile= (whose values override Environment=, as systemd does).
    """
    assignments: dict[str, tuple[str, str]] = {}
    files: list[str] = []
    exec_start: tuple[str, str] | None = None
    fragments = split_systemctl_cat(systemctl_cat)
    for path, text in fragments:
        _readable(text, path)  # names the unit file and the line
    _readable(systemctl_cat, "`systemctl cat docker.service`")  # all of them together, a file's path too
    for path, text in fragments:
        for section, key, value in unit_directives(text):
            if section != "Service":
                continue
            if key == "Environment":
                if not value:
                    assignments.clear()
                for item in _split(value, f"{path}: cannot read Environment={value}"):
                    name, sep, content = item.partition("=")
                    if sep and name:
                        assignments[name] = (content, path)
            elif key == "EnvironmentFile":
                if not value:
                    files.clear()
                else:
                    files.append(value[1:] if value.startswith("-") else value)
            elif key == "ExecStart":
                exec_start = (value, path) if value else None
    for file in files:
        for name, content in parse_environment_file(environment_files.get(file, ""), file).items():
            assignments[name] = (content, file)
    if exec_start is None:
        return DockerdCommandLine()

    command, path = exec_start
    command = command.lstrip("@-:+!")
    words: list[tuple[str, str]] = []
    for word in _split(command, f"{path}: cannot read ExecStart={command}"):
        whole = _WHOLE_WORD_VARIABLE.fullmatch(word)
        if whole:
            content, source = assignments.get(whole[1], ("", path))
            words += [
                (part, f"{source} ({whole[1]})") for part in _split(content, f"{source}: cannot split {whole[1]}")
            ]
            continue
        used: list[str] = []

        def expand(match: re.Match[str]) -> str:
            if match[0] == "$$":
                return "$"
            used.append(match[1])  # noqa: B023 - sub() calls it in this iteration
            return assignments.get(match[1], ("", path))[0]

        expanded = _BRACED_VARIABLE.sub(expand, word)
        origin = f"{assignments[used[0]][1]} ({used[0]})" if used and used[0] in assignments else path
        words.append((expanded, origin))

    start = next((index for index, (word, _) in enumerate(words) if os.path.basename(word) == "dockerd"), None)
    if start is None:
        return DockerdCommandLine(exec_start_file=path)
    return DockerdCommandLine(exec_start_file=path, runs_dockerd=True, flags=parse_dockerd_flags(words[start + 1 :]))


def parse_dockerd_flags(words: list[tuple[str, str]]) -> list[DockerdFlag]:
    """pflag's reading of dockerd's arguments: --name=value, --name value, -H value, -Hvalue, bare booleans."""
    flags: list[DockerdFlag] = []
    index = 0
    while index < len(words):
        word, origin = words[index]
        index += 1
        if word == "--":
            break
        if word.startswith("--") and len(word) > 2:
            name, sep, value = word[2:].partition("=")
            attached = bool(sep)
        elif word.startswith("-") and len(word) > 1:
            name = SHORTHAND_FLAGS.get(word[1], word[1])
            value = word[2:].removeprefix("=")
            attached = len(word) > 2
        else:
            continue  # dockerd takes no positional arguments
        written = word
        if not attached:
            if name in BOOLEAN_FLAGS:
                value = "true"
            elif index < len(words):
                value = words[index][0]
                written = f"{word} {value}"
                index += 1
        flags.append(DockerdFlag(name=name, value=value, written=written, origin=origin))
    return flags
