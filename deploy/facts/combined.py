"""Several facts read with one remote command."""

from __future__ import annotations

from pyinfra.api import FactBase, StringCommand

MARKER = "@@gpu-node-fact "


class CombinedOutput(FactBase):
    """
    The output lines of several argument-less facts' commands run in one remote command, each
    in a subshell of its own after a marker line; ``read_facts`` hands each its own lines.
    """

    def command(self, facts=()):
        parts = []
        for fact in facts:
            parts += ["echo", f"'{MARKER}{fact.__name__}';", "(", fact().command(), ") 2>/dev/null;"]
        parts.append("true")
        return StringCommand(*parts)

    @staticmethod
    def default():
        return []

    def process(self, output):
        return list(output)


def split_sections(lines: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith(MARKER):
            current = line[len(MARKER):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def read_facts(host, *facts: type[FactBase]) -> dict:
    """
    Read argument-less ``facts`` from ``host`` in one remote command: {class name: value}.
    Each value is what the fact alone gives (its default when its command printed nothing).
    """
    sections = split_sections(host.get_fact(CombinedOutput, facts=facts))
    values = {}
    for fact in facts:
        instance = fact()
        lines = sections.get(fact.__name__) or []
        if lines:
            values[fact.__name__] = instance.process(lines)
        else:
            default = instance.default
            values[fact.__name__] = default() if callable(default) else default
    return values
