"""
The real-world corpus: configs other projects wrote (containerd config.toml, Docker daemon.json),
NVIDIA's published toolkit repository files, with SOURCES.toml saying where most come from. It
lives beside the repository, never in it, and comes from one setting: env ``GPU_NODE_CORPUS``,
default ``../shared/corpus`` next to the repository. Tests that read it skip with one line naming
the setting when it is not there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
CORPUS_ENV = "GPU_NODE_CORPUS"
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"
MISSING = (
    f"real-world corpus not found: set {CORPUS_ENV} to a folder of other projects' configs (default ../shared/corpus)"
)


def corpus_root() -> Path:
    """Where the setting points, whether or not anything is there."""
    configured = os.environ.get(CORPUS_ENV)
    return Path(configured).expanduser() if configured else DEFAULT_CORPUS


def corpus_present() -> bool:
    root = corpus_root()
    return root.is_dir() and any(root.iterdir())


def corpus_folder() -> Path:
    """The corpus folder; skips the calling test, in one line naming the setting, when it is missing or empty."""
    if not corpus_present():
        pytest.skip(MISSING)
    return corpus_root()


def corpus_file(relative: str) -> Path:
    """One named file of the corpus (skips without a corpus; a corpus without the file fails the test)."""
    path = corpus_folder() / relative
    if not path.is_file():
        pytest.fail(f"{relative} is not in the corpus at {corpus_root()} ({CORPUS_ENV})")
    return path


def _listed(folder: str, pattern: str) -> list[Path]:
    if not corpus_present():
        return []
    return sorted((corpus_root() / folder).glob(pattern))


def containerd_configs() -> list[Path]:
    """Every containerd/*.toml of the corpus ([] without a corpus)."""
    return _listed("containerd", "*.toml")


def docker_configs() -> list[Path]:
    """Every docker/*.json of the corpus ([] without a corpus)."""
    return _listed("docker", "*.json")


def sources() -> dict[str, dict]:
    """SOURCES.toml's entries by path relative to the corpus ({} without a corpus or a SOURCES.toml)."""
    path = corpus_root() / "SOURCES.toml"
    if not corpus_present() or not path.is_file():
        return {}
    return tomllib.loads(path.read_text())["files"]


def file_params(paths: list[Path]) -> list:
    """pytest parameters, one per file (id: folder/name); without a corpus, one that skips with the line."""
    if not paths:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=MISSING))]
    return [pytest.param(path, id=f"{path.parent.name}/{path.name}") for path in paths]


def read_text(path: Path) -> str:
    """A corpus file's text as its project wrote it (CRLF kept: read_text would translate it)."""
    return path.read_bytes().decode("utf-8")
