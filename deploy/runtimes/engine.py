"""
What every container runtime engine does with its config, whatever the runtime (containerd and
Docker implement it; CRI-O, whose crio.conf is TOML with drop-ins, would be a third): read the
runtime's config text, wire the NVIDIA runtime in (and the systemd cgroup driver, the default
runtime and CDI as ``RuntimeWiring`` asks), render it back with the file's own layout, and say what
the runtime will really run once the other files and flags it reads have their say. Pure: no host,
no facts; the operations read the node and hand the engine its texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ..foundations.toml_layout import ConfigError
from ..runtimes.wiring import RuntimeWiring

__all__ = ["ConfigError", "Effective", "JSON", "RuntimeEngine", "TOML", "Wired"]

# The formats of the runtimes' configs (RuntimeEngine.file_format): how a diff is masked, and how the
# undo run takes the wiring back out of a changed file (deploy/node/records.py keeps it per file).
TOML, JSON = "toml", "json"

Document = TypeVar("Document")
# What the runtime runs with, as the engine reads it: the daemon's own dump (containerd), or the
# config and the flags its unit passes (Docker).
Running = TypeVar("Running", contravariant=True)


@dataclass
class Wired(Generic[Document]):
    """A config with the wiring in: the document, and what the engine changed beyond setting values."""

    document: Document
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Effective:
    """What the runtime will run, against the wiring: where it reads its runtimes from (as messages
    name it) and each difference; none: the runtime runs the wiring."""

    where: str
    problems: tuple[str, ...] = ()


class RuntimeEngine(Protocol[Document, Running]):
    """A container runtime's config, as gpu-node edits it. Each method raises ``ConfigError`` (one
    line naming the file) for a config it cannot edit safely, which is then left as it is."""

    @property
    def file_format(self) -> str:
        """The format of its config file (TOML, JSON: how a diff is masked, how the undo run reads it); read-only,
        as the engines are frozen."""
        ...

    def parse(self, text: str, source: str) -> Document:
        """The config ``text`` (``source`` names it in messages), checked for what the engine edits."""
        ...

    def wire(self, document: Document, wiring: RuntimeWiring, source: str) -> Wired[Document]:
        """``document`` with the NVIDIA runtime wired in; every other key, and its place, kept."""
        ...

    def render(self, document: Document) -> str:
        """The text to write, in the file's own layout."""
        ...

    def effective(self, running: Running, wiring: RuntimeWiring) -> Effective:
        """What the runtime will run (after drop-ins, imports, flags), against ``wiring``."""
        ...
