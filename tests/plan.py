"""
Plan tests: deploy tasks and deploy files run through pyinfra's API against its ``@fake``
connector, on nodes a test states as fact answers, and the commands the deploy ran are read back.

A node's facts are keyed by the fact class and its keyword arguments, the way pyinfra's own fact
and operation tests state them; an answer is what the fact's command prints, so each fact's own
``process`` parses it::

    node = Node(facts=[
        (LinuxDistribution, os_release("debian-12")),             # a class alone: read without arguments
        (files.digest_read("/etc/x.conf"), ["absent"]),           # a (fact, arguments) call, as the code reads it
        (every(PackagesAvailable), carrying("linux-headers-6.1.0-18-amd64")),  # any arguments: a function of them
    ], commands={"config dump; status=$?": wired_dump()})
    plan = run_deploy(node)                         # deploy/gpu_node.py on it
    plan = run_plan(task, settings, platform, facts=[...], commands={...})  # one @deploy

Every fact read goes to that table (``pyinfra.api.facts._get_fact`` notes which fact a command
reads; the connector answers it), preflight's one combined command included: each section it asks
for is answered from the same table (its one FileDigests of every file, read_ahead.READ_THROUGH,
from each file's FileDigest answer where the test states no such FileDigests). A fact the node does
not state fails the test naming the fact and its arguments, unless the node says ``unstated=DEFAULT`` (the fact's command then prints
nothing: the fact's default). Commands that are not fact reads (operations, probes, the candidate
check) are answered from ``commands``: the first key that is a substring of the command, or a
``re.Pattern`` that matches it, as pyinfra's ``fake_responses``; a callable value is called with
the command. A node can instead be a ``stand_in``: a program answering every command itself (a
cluster's kubectl on a control plane).

``run_pyinfra`` is the one place a test sets up pyinfra's State, as ``pyinfra -y`` does; the
``both_modes`` fixture runs a test also in the CLI's default mode (change detection first).
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import json
import logging
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
from pyinfra.api import Config, FactBase, Inventory, State
from pyinfra.api import facts as pyinfra_facts
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.connectors.fake import FakeConnector
from pyinfra.connectors.util import CommandOutput, OutputLine
from pyinfra.context import ctx_config, ctx_inventory, ctx_state
from pyinfra.facts.server import Arch, LinuxDistribution
from pyinfra_cli.util import load_deploy_file

from deploy.distros.families import detect_platform
from deploy.facts.access import HostAccess
from deploy.facts.containerd import ContainerdInstallations
from deploy.facts.files import FileDigest, FileDigests
from deploy.facts.module_signing import ModuleSigningState
from deploy.facts.nvidia import NodeSurvey, PackagesAvailable
from deploy.facts.read_ahead import MARKER, CombinedOutput, FactCall, section_name
from deploy.facts.recovery import PackageManagerState, PendingRestarts
from deploy.settings import Settings, parse_settings

REPO = Path(__file__).resolve().parents[1]
GPU_NODE = str(REPO / "deploy" / "gpu_node.py")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia"

# The CLI mode the plan helpers run in when a test names none: ``-y`` unless ``both_modes`` runs it.
_mode = {"yes": True}


@pytest.fixture(params=[True, False], ids=["-y", "default-mode"])
def both_modes(request):
    """
    Runs a plan test twice: as ``pyinfra -y`` (no change detection) and in the CLI's default mode,
    what the README's main command runs: every operation's commands generated first to detect
    changes, then again to execute them. Yields ``yes``.
    """
    _mode["yes"] = request.param
    yield request.param
    _mode["yes"] = True


# A site's pin for NVIDIA's SUSE driver repository key, which NVIDIA publishes no fingerprint for
# (the SUSE driver plan is refused without one): tests/fixtures/gpg's first key.
SITE_DRIVER_KEY = {"nvidia_driver_gpgkey_fingerprint": "A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699"}


def settings_for(**data: Any) -> Settings:
    return parse_settings({key: value for key, value in data.items()})


# --- what a node answers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """A command's whole answer, when a list of stdout lines is not enough."""

    stdout: Sequence[str] = ()
    stderr: Sequence[str] = ()
    success: bool = True


@dataclass(frozen=True)
class Every:
    """Every read of ``fact``, whatever its arguments: one answer for all, or a function of them."""

    fact: type[FactBase]


def every(fact: type[FactBase]) -> Every:
    return Every(fact)


# A fact read: a class alone (read without arguments), a (fact, arguments) call, or every read of a class
FactKey = type[FactBase] | FactCall | Every
# What a command prints: its stdout (a str or lines), or an Output
Answer = str | Sequence[str] | Output

FAIL = "fail"  # a fact the node does not state fails the test
DEFAULT = "default"  # it prints nothing: the fact's default


def _jsonable(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, type):
        return value.__name__
    return list(value) if isinstance(value, Iterable) else repr(value)


def _arguments(fact: type[FactBase], kwargs: Mapping) -> dict:
    """The fact's command arguments with its defaults filled in, as pyinfra calls it."""
    kwargs = {key: value for key, value in kwargs.items() if key != "self"}
    command = fact().command
    if not callable(command):
        return kwargs
    bound = inspect.signature(command).bind(**kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _identity(fact: type[FactBase], kwargs: Mapping) -> tuple[type[FactBase], str]:
    return fact, json.dumps(_arguments(fact, kwargs), sort_keys=True, default=_jsonable)


def describe(fact: type[FactBase], kwargs: Mapping) -> str:
    """One line naming a fact read: ``KernelState(modules=['overlay'], sysctls=[])``."""
    shown = []
    for key, value in _arguments(fact, kwargs).items():
        text = repr(value)
        shown.append(f"{key}={text if len(text) <= 120 else text[:117] + '...'}")
    return f"{fact.__name__}({', '.join(shown)})"


def _output(answer: Answer) -> Output:
    if isinstance(answer, Output):
        return answer
    if isinstance(answer, str):
        return Output(stdout=answer.splitlines())
    if isinstance(answer, Mapping):  # pyinfra's fake_responses form
        return Output(
            stdout=_output(answer.get("stdout") or []).stdout,
            stderr=_output(answer.get("stderr") or []).stdout,
            success=bool(answer.get("success", True)),
        )
    if isinstance(answer, tuple) and answer and isinstance(answer[0], bool):  # (success, stdout[, stderr])
        success, stdout, *stderr = answer
        return Output(
            stdout=_output(stdout).stdout, stderr=_output(stderr[0] if stderr else []).stdout, success=success
        )
    return Output(stdout=[str(line) for line in answer])


def _command_output(output: Output) -> CommandOutput:
    lines = [OutputLine("stdout", line) for line in output.stdout]
    lines += [OutputLine("stderr", line) for line in output.stderr]
    return CommandOutput(lines)


_UNSTATED = object()


class Facts:
    """A node's fact table: (fact class, its arguments) -> answer, from ``(key, answer)`` pairs;
    a later pair replaces an earlier one for the same read. An answer that is a function is called
    with the read's arguments each time the fact is read."""

    def __init__(self, pairs: Iterable[tuple[FactKey, Any]] = ()):
        self.exact: dict[tuple[type[FactBase], str], Answer] = {}
        self.any_arguments: dict[type[FactBase], Answer | Callable[..., Answer]] = {}
        for key, answer in pairs:
            if isinstance(key, Every):
                self.any_arguments[key.fact] = answer
            elif isinstance(key, tuple):
                fact, kwargs = key
                self.exact[_identity(fact, kwargs)] = answer
            elif isinstance(key, type) and issubclass(key, FactBase):
                self.exact[_identity(key, {})] = answer
            else:
                raise TypeError(f"a fact key is a fact class, a (fact, arguments) call or every(fact), not {key!r}")

    def answer(self, fact: type[FactBase], kwargs: Mapping):
        found = self.exact.get(_identity(fact, kwargs), _UNSTATED)
        if found is _UNSTATED:
            found = self.any_arguments.get(fact, _UNSTATED)
        # An answer computed when the fact is read, from its arguments
        return found(**_arguments(fact, kwargs)) if callable(found) else found


def _answers_commands(commands, command: str) -> Output:
    """pyinfra's fake_responses semantics (first matching key wins), plus callable answers."""
    if callable(commands):
        return _output(commands(command))
    for matcher, answer in commands.items():
        if isinstance(matcher, re.Pattern):
            if not matcher.search(command):
                continue
        elif matcher not in command:
            continue
        return _output(answer(command) if callable(answer) else answer)
    return Output()


@dataclass
class Node:
    """
    One @fake host as a test states it: ``facts`` as (key, answer) pairs (see the module),
    ``commands`` for what is not a fact read, ``unstated`` FAIL or DEFAULT. A ``stand_in``
    (command -> answer) answers every command itself, fact reads included, and nothing else does.
    """

    facts: Iterable[tuple[FactKey, Any]] = ()
    commands: Mapping[str | re.Pattern, Any] | Callable[[str], Any] = field(default_factory=dict)
    unstated: str = FAIL
    stand_in: Callable[[str], Any] | None = None

    def __post_init__(self) -> None:
        self.facts = tuple(self.facts)
        self.table = Facts(self.facts)

    def answer_fact(self, fact: type[FactBase], kwargs: Mapping, unstated: list[str]) -> Output:
        if fact is CombinedOutput:
            return Output(stdout=self._combined(kwargs, unstated))
        found = self.table.answer(fact, kwargs)
        if found is _UNSTATED and fact is FileDigests:
            paths = _arguments(fact, kwargs)["paths"]
            return Output(stdout=_digests_output({path: self._file_digest(path, unstated) for path in paths}))
        if found is _UNSTATED:
            if self.unstated != DEFAULT:
                unstated.append(describe(fact, kwargs))
            return Output()
        return _output(found)

    def _file_digest(self, path: str, unstated: list[str]) -> dict | None:
        """A file's digest as this node states it: its FileDigest answer, else its part of a
        FileDigests answer the test states (None, absent, where neither does and unstated is DEFAULT)."""
        for fact, kwargs in [(FileDigest, {"path": path}), *self._stated_digests(path)]:
            found = self.table.answer(fact, kwargs)
            if found is not _UNSTATED:
                lines = list(_output(found).stdout)
                value = fact().process(lines) if lines else fact().default()
                return value if fact is FileDigest else value[path]
        if self.unstated != DEFAULT:
            unstated.append(describe(FileDigest, {"path": path}))
        return None

    def _stated_digests(self, path: str) -> list[FactCall]:
        stated = [(fact, json.loads(arguments)) for fact, arguments in self.table.exact if fact is FileDigests]
        return [(fact, kwargs) for fact, kwargs in stated if path in kwargs["paths"]]

    def _combined(self, kwargs: Mapping, unstated: list[str]) -> list[str]:
        """Preflight's one command: each section it asks for, from this node's own answers, in one
        base64 line as the command prints them (a byte that is not UTF-8: a lone surrogate, "\udcff")."""
        entries = [(fact, {}, None) for fact in kwargs.get("facts", ())]
        entries += [(fact, call_kwargs, index) for index, (fact, call_kwargs) in enumerate(kwargs.get("calls", ()))]
        lines: list[str] = []
        for fact, call_kwargs, index in entries:
            # Each section's command runs in a subshell whose stderr is dropped: only its stdout shows.
            lines += [f"{MARKER}{section_name(fact, index)}", *self.answer_fact(fact, call_kwargs, unstated).stdout]
        text = "".join(f"{line}\n" for line in lines)
        return [base64.b64encode(text.encode("utf-8", "surrogateescape")).decode()]


# --- stated nodes and their facts' output ----------------------------------------------------


def file_digests_lines(answers: Mapping[str, Answer]) -> list[str]:
    """``FileDigests``' output for files stated as FileDigest answers, by path ("absent", or the
    mode and owner line and sha256sum's)."""
    values = {}
    for path, answer in answers.items():
        lines = list(_output(answer).stdout)
        values[path] = FileDigest().process(lines) if lines else None
    return _digests_output(values)


def _digests_output(digests: Mapping[str, dict | None]) -> list[str]:
    """What deploy/shell/file_digests.sh prints for files with these digests (None: absent)."""
    present = {path: digest for path, digest in digests.items() if digest is not None}
    lines = [f"{'absent' if digest is None else 'present'} {path}" for path, digest in digests.items()]
    lines += [f"stat {digest['mode']} {digest['owner']}" for digest in present.values()]
    for path, digest in present.items():
        # sha256sum's escape of a name holding a backslash or a line break
        escaped = "\\" in path or "\n" in path
        name = path.replace("\\", "\\\\").replace("\n", "\\n") if escaped else path
        lines.append(("\\" if escaped else "") + f"{digest['sha256']}  {name}")
    return lines


# The runtimes stage's check of a new containerd config (``config dump`` of the candidate):
# answered with what containerd 1.6 dumps for a wired config, unless a test states another.
CANDIDATE_CHECK = "config dump; status=$?"


def wired_dump() -> list[str]:
    return (FIXTURES.parent / "containerd" / "dump-1.6.20-wired.toml").read_text().splitlines()


# sysfs lines for one NVIDIA GPU (an A100 with its audio function) and a non-NVIDIA device
PCI_WITH_GPU = ["pci 0000:3b:00.0 0x20b0 0x030200", "pci 0000:3b:00.1 0x1aef 0x040300"]


def os_release(name: str) -> list[str]:
    """The ``LinuxDistribution`` fact's output for a stored os-release file."""
    return ["/etc/os-release", *(FIXTURES / "os-release" / name).read_text().splitlines(), "---"]


def host_access(distro: str, uid: int = 0, systemd: bool = True) -> list[str]:
    """``HostAccess``'s output on a Linux node of ``distro`` (an os-release fixture) with its family's
    package manager installed: root (``uid``), systemd as PID 1 unless ``systemd`` is false."""
    manager = detect_platform({"release_meta": {"ID": distro.split("-")[0]}}, "x86_64").family.package_manager
    lines = [
        f"uid {uid}",
        f"user {'root' if uid == 0 else 'ubuntu'}",
        "kernel Linux",
        f"init {'systemd' if systemd else 'bash'}",
        f"manager {manager.name}",
    ]
    return lines + (["systemd"] if systemd else [])


def node_lines(
    kernel: str,
    pci=(),
    modules=(),
    secure_boot=None,
    free_mb=80000,
    pkgbases=(),
    loaded=None,
    built=None,
    reboot_packages=(),
) -> list[str]:
    """The ``NodeSurvey`` fact's output."""
    lines = list(pci)
    if secure_boot is not None:
        lines.append(f"secureboot mokutil SecureBoot {'enabled' if secure_boot else 'disabled'}")
    lines += [f"module {module}" for module in modules]
    if loaded:
        lines.append(f"loaded_version {loaded}")
    lines.append(f"built_version {built or ''}")
    lines.append(f"kernel {kernel}")
    lines += [f"disk / {free_mb}", f"disk /var {free_mb}"]
    lines += [f"kernel_pkgbase {base}" for base in pkgbases]
    if reboot_packages:
        lines.append("reboot_required")
        lines += [f"reboot_package {name}" for name in reboot_packages]
    return lines


def carrying(*carried: str) -> Callable[..., list[str]]:
    """``PackagesAvailable``'s output on a node whose package lists carry ``carried``, for any query."""

    def output(check: str, packages=()) -> list[str]:
        return [f"{'yes' if name in carried else 'no'} {name}" for name in packages]

    return output


def gpu_node(
    distro: str = "debian-12",
    *,
    arch: str = "x86_64",
    node_survey: list[str] | None = None,
    facts: Iterable[tuple[FactKey, Any]] = (),
    commands: Mapping | None = None,
    unstated: str = FAIL,
) -> Node:
    """
    A node for deploy/gpu_node.py: its os-release (tests/fixtures/nvidia/os-release/<distro>), arch,
    ``node_survey`` (NodeSurvey's output; a node without a GPU on Debian's 6.1 kernel unless given),
    no containerd of a Kubernetes distribution, an idle package manager, no restart left pending,
    package lists carrying the running kernel's headers (Debian/Ubuntu and RPM names); reached as
    root, booted with systemd, its family's package manager installed; then ``facts``.
    """
    node_survey = node_survey if node_survey is not None else node_lines("6.1.0-18-amd64")
    kernel = next(line.split(" ", 1)[1] for line in node_survey if line.startswith("kernel "))
    baseline = [
        (HostAccess, host_access(distro)),
        (LinuxDistribution, os_release(distro)),
        (Arch, arch),
        (NodeSurvey, node_survey),
        (ContainerdInstallations, []),
        (PackageManagerState, []),
        (PendingRestarts, []),
        (every(PackagesAvailable), carrying(f"linux-headers-{kernel}", f"kernel-devel-{kernel}")),
        # no NVIDIA module built, no module signing key (verify reads it; the driver stage where it signs)
        (every(ModuleSigningState), []),
    ]
    return Node(facts=[*baseline, *facts], commands=_with_candidate_check(commands), unstated=unstated)


def _with_candidate_check(commands: Mapping | None) -> dict:
    merged = dict(commands or {})  # the test's own keys first: the first match wins
    merged.setdefault(CANDIDATE_CHECK, wired_dump())
    return merged


# --- running -----------------------------------------------------------------------------------

FAILURE_PREFIX = "gpu-node: "  # deploy/operations/failure.py's line


class FailureLines(logging.Handler):
    """The problems hosts failed with, as logged (one line each, without "[host] gpu-node: ")."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(level=logging.ERROR)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        line = click.unstyle(record.getMessage())
        if FAILURE_PREFIX in line:
            self.lines.append(line.split(FAILURE_PREFIX, 1)[1])


@dataclass
class _Answering:
    """One run's nodes by host name, what is being read on each host now, and every command of every
    host in the order they ran (uploads as ``upload PATH``, their bytes in ``uploads`` by place in it)."""

    nodes: Mapping[str, Node]
    timeline: list[tuple[str, str]] = field(default_factory=list)
    uploads: dict[int, bytes] = field(default_factory=dict)
    reading: dict[str, list[tuple[type[FactBase], dict]]] = field(default_factory=dict)
    unstated: list[str] = field(default_factory=list)

    def node(self, host) -> Node:
        return self.nodes.get(host.name) or _NOTHING_STATED

    def respond(self, connector: FakeConnector, command: str) -> tuple[bool, CommandOutput]:
        host = connector.host
        self.timeline.append((host.name, command))
        node = self.node(host)
        reading = self.reading.get(host.name)
        if node.stand_in is not None:
            output = _output(node.stand_in(command))
        elif reading:
            fact, kwargs = reading[-1]
            found: list[str] = []
            output = node.answer_fact(fact, kwargs, found)
            self.unstated += [f"{host.name}: {line}" for line in found]
        else:
            output = _answers_commands(node.commands, command)
        return output.success, _command_output(output)

    @contextlib.contextmanager
    def installed(self):
        """pyinfra's fact reads noted per host, and the @fake connector answering from the nodes."""
        get_fact, lookup, put_file = pyinfra_facts._get_fact, FakeConnector._lookup_response, FakeConnector.put_file
        answering = self

        def noting_the_read(state, host, cls, args=None, kwargs=None, *rest, **more):
            fact_kwargs, _ = pyinfra_facts._handle_fact_kwargs(state, host, cls, args, kwargs)
            stack = answering.reading.setdefault(host.name, [])
            stack.append((cls, fact_kwargs))
            try:
                return get_fact(state, host, cls, args, kwargs, *rest, **more)
            finally:
                stack.pop()

        def recording_upload(connector, filename_or_io, remote_filename, *args, **kwargs):
            answering.uploads[len(answering.timeline)] = uploaded_bytes(filename_or_io)
            answering.timeline.append((connector.host.name, f"upload {remote_filename}"))
            return put_file(connector, filename_or_io, remote_filename, *args, **kwargs)

        pyinfra_facts._get_fact = noting_the_read
        FakeConnector._lookup_response = lambda connector, command: answering.respond(connector, command)
        FakeConnector.put_file = recording_upload
        try:
            yield self
        finally:
            pyinfra_facts._get_fact, FakeConnector._lookup_response, FakeConnector.put_file = get_fact, lookup, put_file


_NOTHING_STATED = Node()


def uploaded_bytes(filename_or_io) -> bytes:
    if isinstance(filename_or_io, str):
        return Path(filename_or_io).read_bytes()
    content = filename_or_io.getvalue()
    return content.encode() if isinstance(content, str) else content


def run_pyinfra(
    inventory: Inventory,
    prepare: Callable[[State], None],
    execute: bool = True,
    failures: list[str] | None = None,
    nodes: Mapping[str, Node] | None = None,
    timeline: list[tuple[str, str]] | None = None,
    uploads: dict[int, bytes] | None = None,
    diff: bool = False,
) -> tuple[State, Exception | None]:
    """
    Connect ``inventory`` (its hosts answering as ``nodes`` states them, by host name), ``prepare(state)``
    (load a deploy file or add a @deploy), then run the operations unless ``execute`` is false, as the
    CLI does with ``-y`` or, under ``both_modes``, also in its default mode. A raised error is returned
    for the test to judge; the lines hosts failed with are appended to ``failures``, every command of
    every host to ``timeline`` (the bytes of each upload to ``uploads``). A fact read no node states fails the test.
    ``diff``: as ``pyinfra --diff``.
    """
    state = State(check_for_changes=not _mode["yes"])
    config = Config(DIFF=True) if diff else Config()
    error = None
    answering = _Answering(
        nodes or {}, timeline if timeline is not None else [], uploads if uploads is not None else {}
    )
    failure_lines = FailureLines(failures if failures is not None else [])
    logging.getLogger("pyinfra").addHandler(failure_lines)
    with answering.installed(), ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(config):
        state.init(inventory, config)
        state.set_stage(StateStage.Connect)
        connect_all(state)
        state.set_stage(StateStage.Prepare)
        try:
            prepare(state)
            if execute:
                state.set_stage(StateStage.Execute)
                run_ops(state)
        except Exception as exc:  # noqa: BLE001 - the test decides whether an error is expected
            error = exc
        finally:
            logging.getLogger("pyinfra").removeHandler(failure_lines)
    if answering.unstated:
        pytest.fail("facts the test did not state: " + "; ".join(dict.fromkeys(answering.unstated)), pytrace=False)
    return state, error


@dataclass
class Plan:
    """What a run did: the first host's commands (``host``), every host's in order (``timeline``)."""

    state: State
    error: Exception | None = None
    # The problems hosts failed with, as logged (one line each, without "[host] gpu-node: ")
    failures: list[str] = field(default_factory=list)
    timeline: list[tuple[str, str]] = field(default_factory=list)
    # the bytes of each upload, by its place in the timeline
    uploads: dict[int, bytes] = field(default_factory=dict)

    @property
    def host(self):
        return next(iter(self.state.inventory))

    @property
    def commands(self) -> list[str]:
        return list(self.host.connector.executed_commands)

    @property
    def failed(self) -> bool:
        return bool(self.state.failed_hosts)

    @property
    def refusal(self) -> str:
        """The line(s) the host failed with; empty when it did not fail."""
        return "; ".join(self.failures) if self.failed else ""

    def failed_with(self, text: str) -> list[str]:
        """The failure lines naming ``text``, when the host did fail."""
        return [line for line in self.failures if text in line] if self.failed else []

    def matching(self, text: str) -> list[str]:
        return [command for command in self.commands if text in command]

    def starting(self, prefix: str) -> list[str]:
        return [command for command in self.commands if command.startswith(prefix)]

    def ran(self, text: str) -> list[str]:
        return self.matching(text)

    def op_names(self) -> list[str]:
        return [", ".join(self.state.op_meta[op_hash].names) for op_hash in self.state.get_op_order()]


# deploy/operations/upload.py's staging folders: a random name each time an operation runs.
STAGING_FOLDER = re.compile(r"pyinfra-gpu-node-[0-9a-f]{32}")


def without_staging_names(commands: Iterable[str]) -> list[str]:
    """``commands`` with each staging folder's random name made the same, to compare two runs."""
    return [STAGING_FOLDER.sub("pyinfra-gpu-node-STAGING", command) for command in commands]


def placed_uploads(commands: Iterable[str], uploads: Mapping[str, bytes]) -> dict[str, bytes]:
    """
    What staged ``uploads`` ({staging path: bytes}, as a recording connector saw them) became: their
    bytes by the path each command's place script (deploy/shell/place_uploads.sh) copies them to.
    """
    placed = {}
    for command in commands:
        for staged, path, _live in staged_uploads(command):
            placed[path] = uploads[staged]
    return placed


def staged_uploads(command: str) -> list[tuple[str, str, str]]:
    """The (staged, path, live) words ``command``'s place script (deploy/shell/place_uploads.sh) is
    given as its positional parameters, as sh reads them; none without one."""
    start = command.find("(staging=")
    end = command.find("\nrefuse_link() {", start)
    if start < 0 or end < 0:
        return []
    given = (
        subprocess.run(
            ["sh", "-c", command[start + 1 : end] + '\nprintf "%s\\0" "$@"'], capture_output=True, check=True
        )
        .stdout.decode("utf-8", "surrogateescape")
        .split("\0")[:-1]
    )
    return list(zip(given[0::3], given[1::3], given[2::3]))


QUICK = {"fake_delay": 0, "fake_delay_jitter": 0}


def run_plan(
    task: Callable[..., Any],
    *args: Any,
    facts: Iterable[tuple[FactKey, Any]] = (),
    commands: Mapping | None = None,
    unstated: str = FAIL,
    data: dict | None = None,
    diff: bool = False,
    **kwargs: Any,
) -> Plan:
    """
    Prepare and execute ``task(*args, **kwargs)`` (a @deploy) on one @fake host stated by ``facts``,
    ``commands`` (and the candidate check's answer) and ``unstated`` (see ``Node``). An error the run
    raised is raised again, unless the host failed (pyinfra's "No hosts remaining"): what ran until
    then is the plan.
    """
    node = Node(facts=facts, commands=_with_candidate_check(commands), unstated=unstated)
    inventory = Inventory(([("@fake/node", {**QUICK, **(data or {})})], {}))
    failures: list[str] = []
    timeline: list[tuple[str, str]] = []
    uploads: dict[int, bytes] = {}
    state, error = run_pyinfra(
        inventory,
        lambda state: add_deploy(state, task, *args, **kwargs),
        failures=failures,
        nodes={"@fake/node": node},
        timeline=timeline,
        uploads=uploads,
        diff=diff,
    )
    if error is not None and not (isinstance(error, PyinfraError) and "No hosts remaining" in str(error)):
        raise error
    return Plan(state=state, error=error, failures=failures, timeline=timeline, uploads=uploads)


def run_deploy(node: Node, data: dict | None = None, deploy_file: str = GPU_NODE, execute: bool = True) -> Plan:
    """Run ``deploy_file`` on one ``@fake`` host, ``node``, as ``pyinfra -y`` would (see ``both_modes``);
    kernel and driver stages only unless ``data`` says otherwise. A raised error is kept in the plan."""
    host_data = {
        **QUICK,
        "kernel_modules_load": False,
        "reboot_allowed": False,
        "stages": "kernel,driver",
        **(data or {}),
    }
    inventory = Inventory((["@fake/node"], {}), override_data=host_data)
    return run_inventory(inventory, {"@fake/node": node}, deploy_file, execute)


def run_inventory(
    inventory: Inventory, nodes: Mapping[str, Node], deploy_file: str = GPU_NODE, execute: bool = True
) -> Plan:
    """
    Load ``deploy_file`` over ``inventory`` (its hosts stated by ``nodes``) as the CLI does, then run
    its operations unless ``execute`` is false; a raised error is kept in the plan.
    """
    failures: list[str] = []
    timeline: list[tuple[str, str]] = []
    uploads: dict[int, bytes] = {}
    state, error = run_pyinfra(
        inventory,
        lambda state: load_deploy_file(state, deploy_file),
        execute,
        failures,
        nodes,
        timeline,
        uploads=uploads,
    )
    return Plan(state=state, error=error, failures=failures, timeline=timeline, uploads=uploads)


def assigned(script: str, name: str) -> str:
    """The value ``script`` gives the variable ``name`` before its body (deploy/foundations/shell_scripts.py's
    quoted assignments, one line each), as sh reads it."""
    (line,) = [line for line in script.splitlines() if line.startswith(f"{name}=")]
    (value,) = shlex.split(line[len(name) + 1 :]) or [""]
    return value
