"""
Several facts read with one remote command, and facts read ahead for later operations.

A no-op re-run (cron, drift checks, rollouts that find most nodes done) pays one round trip per
remote command on every node, so preflight reads up front, in its one command, the facts the
later stages would each read alone (``read_ahead``). A stage and its operations ask
``known_fact`` instead of ``host.get_fact``: they get the value read earlier in the run while no
operation has changed anything on the host since, else it is read again, so a value is never
older than the last change. (pyinfra itself caches no fact: each get_fact is a remote command.)
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pyinfra.api import FactBase, StringCommand
from pyinfra.api.arguments import pop_global_arguments
from pyinfra.api.exceptions import FactProcessError

from ..foundations import node_text
from ..foundations.pyinfra_api import while_reading
from ..foundations.run_state import per_run
from .base import NodeFact, UnreadableOutput, unreadable
from .files import FileDigest, FileDigests

if TYPE_CHECKING:
    from pyinfra.api import Host

MARKER = "@@gpu-node-fact "


class KnownFacts(dict[str, dict[tuple[str, str], tuple[Any, int]]]):
    """This run's facts by host: host name -> (fact name, its arguments as JSON) -> (value, the
    host's changes when it was read) (deploy/foundations/run_state.py)."""


# (fact class, its keyword arguments): a fact to read ahead
FactCall = tuple[type[FactBase[Any]], dict[str, Any]]
Reading = TypeVar("Reading")


@dataclass(frozen=True)
class ReadThrough:
    """
    A fact whose calls in one read are read as one call of a ``wider`` fact: its list argument
    ``argument`` takes every name the calls give in their own ``own_argument`` (one name, or a
    list when ``one`` is false), and each call's value is its names' part of the wider value.
    """

    wider: type[FactBase[Any]]
    argument: str
    own_argument: str
    one: bool

    def names(self, kwargs: dict[str, Any]) -> list[Any]:
        return [kwargs[self.own_argument]] if self.one else list(kwargs[self.own_argument])

    def part(self, value: dict[Any, Any], kwargs: dict[str, Any]) -> Any:
        missing = [name for name in self.names(kwargs) if name not in value]
        if missing:
            raise UnreadableOutput(f"the node's answer to {self.wider.__name__} names no {missing[0]!r}")
        if self.one:
            return value[kwargs[self.own_argument]]
        return {name: value[name] for name in self.names(kwargs)}


# Facts read through a wider one: every file digest of a read is one stat and one sha256sum over
# all the files, not two processes per file.
READ_THROUGH: dict[type[FactBase[Any]], ReadThrough] = {
    FileDigest: ReadThrough(FileDigests, "paths", "path", one=True),
    FileDigests: ReadThrough(FileDigests, "paths", "paths", one=False),
}


def read_through(calls: Sequence[FactCall]) -> tuple[list[FactCall], list[tuple[int, ReadThrough | None]]]:
    """
    The calls a read sends for ``calls``: those of a fact read through a wider one gathered into
    one call of it. With them, for each of ``calls``, the index of the sent call its value comes
    from and how (None: it is that call's own value).
    """
    sent: list[FactCall] = []
    wider_calls: dict[type[FactBase[Any]], int] = {}
    sources: list[tuple[int, ReadThrough | None]] = []
    for fact, kwargs in calls:
        through = READ_THROUGH.get(fact)
        if through is None or set(kwargs) != {through.own_argument}:
            sources.append((len(sent), None))
            sent.append((fact, kwargs))
            continue
        if through.wider not in wider_calls:
            wider_calls[through.wider] = len(sent)
            sent.append((through.wider, {through.argument: []}))
        index = wider_calls[through.wider]
        names = sent[index][1][through.argument]
        names += [name for name in through.names(kwargs) if name not in names]
        sources.append((index, through))
    return sent, sources


def section_name(fact: type[FactBase[Any]], index: int | None) -> str:
    """The marker name of one fact's section in CombinedOutput's output."""
    return fact.__name__ if index is None else f"{fact.__name__}#{index}"


class CombinedOutput(NodeFact[list[Any]]):
    """
    The output lines of several facts' commands run in one remote command, each in a subshell of
    its own after a marker line; ``read_facts`` hands each its own lines. ``facts`` are
    argument-less fact classes; ``calls`` are (fact class, keyword arguments) pairs.
    """

    def command(self, facts: Sequence[type[FactBase[Any]]] = (), calls: Sequence[FactCall] = ()) -> StringCommand:
        # The reads only read, so they run side by side, each into a file of its own (its marker
        # line first), printed in order by one cat once all are done: the node's wall time is the
        # slowest read's, not their sum, and the printing one process, not one per read.
        # Without a writable temporary directory the read fails aloud: empty sections would read as
        # facts' defaults (a missing config, no package), and the stages would act on them.
        parts: list[str | StringCommand] = [
            '_gn=$(mktemp -d 2>/dev/null || mktemp -d -p /dev/shm 2>/dev/null) || { echo "gpu-node:',
            'mktemp -d failed: no writable temporary directory for the node read" >&2; exit 1; };',
        ]
        entries: list[tuple[type[FactBase[Any]], dict[str, Any], int | None]] = [(fact, {}, None) for fact in facts]
        entries += [(fact, kwargs, index) for index, (fact, kwargs) in enumerate(calls)]
        for number, (fact, kwargs, index) in enumerate(entries):
            instance = fact()
            command = instance.command(**kwargs)
            requires = instance.requires_command(**kwargs) if callable(instance.requires_command) else None
            if requires:
                # As pyinfra runs it: nothing printed when the tool is missing (the fact's default).
                command = StringCommand("if command -v", requires, ">/dev/null 2>&1; then", command, "; fi")
            marker = f"'{MARKER}{section_name(fact, index)}'"
            parts += ["{ echo", marker, "; (", command, f'); }} >"$_gn/{number}" 2>/dev/null </dev/null &']
        # In base64: pyinfra's connector takes output as UTF-8 and stops at the first line that is not
        # (a file's Latin-1 comment, a process's command line), losing every section after it.
        parts += [
            "wait; cat",
            *(f'"$_gn/{number}"' for number in range(len(entries))),
            '| base64 -w0; echo; rm -rf "$_gn"; true',
        ]
        return StringCommand(*parts)

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        try:
            data = base64.b64decode("".join(line.strip() for line in output), validate=True)
        except binascii.Error as error:
            raise FactProcessError(f"could not decode the node's read: {error}") from None
        lines = node_text.decode(data).split("\n")
        return lines[:-1] if lines and not lines[-1] else lines


def split_sections(lines: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith(MARKER):
            current = line[len(MARKER) :].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def _value(fact: type[FactBase[Reading]], lines: list[str] | None) -> Reading:
    """What ``fact`` reads from its section; UnreadableOutput, in one line, where it cannot."""
    instance = fact()
    if lines:
        try:
            node_text.checked("\n".join(lines), f"the node's answer to {fact.__name__}", max_bytes=None)
            return instance.process(lines)
        except (node_text.UnreadableText, FactProcessError) as error:  # one line naming it already
            raise UnreadableOutput(str(error)) from None
        except Exception as error:  # noqa: BLE001 - pyinfra's facts too: whatever reading it raises is about the output
            raise UnreadableOutput(unreadable(fact, error)) from None
    default = instance.default
    return default() if callable(default) else default


def _key(fact: type[FactBase[Any]], kwargs: dict[str, Any]) -> tuple[str, str]:
    return fact.__name__, json.dumps(kwargs, sort_keys=True, default=list)


class ReadNotRun(UnreadableOutput):
    """The node ran none of the read: the program pyinfra runs it through is missing, or sudo wants a
    password no one can type. The message names it and the fix, in one line."""


# The shell's "command not found". pyinfra puts sudo (su, doas, dzdo) in front of the read when the
# run asks for it; where that program is missing, the shell exits so before the read starts, and
# pyinfra would fail the host printing every argument of the read. Taken as an answer, that exit
# leaves the answer empty, which the read itself never is (its base64 line always comes): the line
# then names the program.
NOT_FOUND = 127
# pyinfra's global arguments that put a program in front of every command, and how a run sets them
ELEVATIONS = (
    ("_sudo", "sudo", "_sudo=True or --sudo"),
    ("_doas", "doas", "_doas=True"),
    ("_dzdo", "dzdo", "_dzdo=True or --dzdo"),
    ("_su_user", "su", "_su_user or --su-user"),
)


def missing_program(host: Host) -> str:
    """Why the read printed nothing, in one line: the program the run asks pyinfra to run it
    through (as pyinfra reads its global arguments for a fact) is not on the node."""
    arguments, _ = pop_global_arguments(host.state, host, dict(host.current_op_global_arguments or {}))
    for key, program, given in ELEVATIONS:
        if arguments.get(key):
            return (
                f"{program} is not installed on this node, and the run asks for it ({given}): install {program}, "
                f"or connect as root and leave {program} out"
            )
    return (
        f"the node ran none of gpu-node's read: its shell exited {NOT_FOUND} (a command not found) before it; "
        "check the shell pyinfra runs commands with (_shell_executable)"
    )


def read_facts(
    host: Host, *facts: type[FactBase[Any]], read_ahead: tuple[FactCall, ...] | list[FactCall] = ()
) -> dict[str, Any]:
    """
    Read argument-less ``facts`` from ``host`` in one remote command: {class name: value}.
    Each value is what the fact alone gives (its default when its command printed nothing).
    ``ReadNotRun`` (one line) where the node ran none of it.
    The same command reads the ``read_ahead`` facts for ``known_fact``; the argument-less
    facts are kept for it too.
    """
    calls: list[FactCall] = []
    for fact, kwargs in read_ahead:
        # An argument-less fact read here anyway, or a call listed twice, is read once.
        if (fact in facts and not kwargs) or (fact, dict(kwargs)) in calls:
            continue
        calls.append((fact, dict(kwargs)))
    sent, sources = read_through(calls)
    try:
        with while_reading():
            lines = host.get_fact(CombinedOutput, facts=facts, calls=tuple(sent), _success_exit_codes=(0, NOT_FOUND))
    except EOFError:
        # pyinfra asks for the sudo password when sudo wants one: without a terminal, the prompt
        # reads the end of the input, leaving its line open (getpass writes it to stderr then).
        sys.stderr.write("\n")
        user = host.data.get("ssh_user") or "the login user"
        raise ReadNotRun(
            f"sudo wants a password for {user} and there is no terminal to type it into: allow {user} "
            "sudo without a password, or run pyinfra from a terminal"
        ) from None
    if not lines:
        raise ReadNotRun(missing_program(host))
    sections = split_sections(lines)
    values = {fact.__name__: _value(fact, sections.get(fact.__name__)) for fact in facts}
    known, changes = _known(host), changes_so_far(host)
    for fact in facts:
        if fact.__name__ in sections:
            known[_key(fact, {})] = (values[fact.__name__], changes)
    # A section that is not there at all was not read (a scripted test host): read it later.
    sent_values = {
        index: _value(fact, sections[section_name(fact, index)])
        for index, (fact, _) in enumerate(sent)
        if section_name(fact, index) in sections
    }
    for (fact, kwargs), (index, through) in zip(calls, sources):
        if index in sent_values:
            value = sent_values[index] if through is None else through.part(sent_values[index], kwargs)
            known[_key(fact, kwargs)] = (value, changes)
    return values


def _known(host: Host) -> dict[tuple[str, str], tuple[Any, int]]:
    """(fact name, arguments) -> (value, changes_so_far when it was read), kept in the run's state"""
    return per_run(host.state, KnownFacts).setdefault(host.name, {})


def changes_so_far(host: Host) -> int:
    """How many operations have changed something on ``host`` in this run."""
    count = 0
    for op_data in host.state.ops.get(host, {}).values():
        meta = op_data.operation_meta
        if meta.is_complete() and meta.did_change():
            count += 1
    return count


def _current(host: Host, key: tuple[str, str]) -> tuple[Any] | None:
    """(value,) when ``key`` was read since the host's last change, else None."""
    known = _known(host).get(key)
    return (known[0],) if known is not None and known[1] == changes_so_far(host) else None


def read(host: Host, call: FactCall) -> Any:
    """``known_fact`` of a (fact, arguments) pair: the same pair a stage reads ahead
    (``Stage.reads``) and its operation then asks, so the two cannot drift apart."""
    fact, kwargs = call
    return known_fact(host, fact, **kwargs)


def read_together(host: Host, calls: list[FactCall]) -> list[Any]:
    """The values of ``calls``: those not known yet (read ahead, or read since the host's last
    change) read together in one remote command, the others reused."""
    unknown = [call for call in calls if _current(host, _key(*call)) is None]
    if len(unknown) > 1:
        read_facts(host, read_ahead=unknown)
    return [read(host, call) for call in calls]


def known_fact(host: Host, fact: type[FactBase[Reading]], **kwargs: Any) -> Reading:
    """
    ``host.get_fact(fact, **kwargs)``, answered from a value read earlier in this run (read ahead,
    or by an earlier call) when no operation changed anything on the host since that read. Call it
    before the operation's first command: an operation's own commands count once it completes.
    """
    key = _key(fact, kwargs)
    current = _current(host, key)
    if current is not None:
        known: Reading = current[0]
        return known
    value = host.get_fact(fact, **kwargs)
    _known(host)[key] = (value, changes_so_far(host))
    return value
