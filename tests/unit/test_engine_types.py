"""
The runtime engines' conformance to RuntimeEngine (deploy/runtimes/engine.py), as the type checker
scripts/lint.sh runs reads it: each engine module assigns an instance to a ``RuntimeEngine`` variable,
which mypy (strict, pyproject.toml's [tool.mypy]) accepts for the real engines and refuses for one
that breaks the contract. mypy runs in this process, on the checkout's cache (.mypy_cache): seconds
once scripts/lint.sh has run.
"""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("deploy/runtimes/containerd/cri.py", "deploy/runtimes/docker/daemon_json.py")

# An engine whose render returns bytes, not the text the Protocol asks for; everything else as containerd's.
BROKEN_ENGINE = """
from deploy.runtimes.containerd.cri import ContainerdConfig, ContainerdEngine
from deploy.runtimes.engine import RuntimeEngine


class BytesEngine(ContainerdEngine):
    def render(self, document: ContainerdConfig) -> bytes:  # type: ignore[override]
        return super().render(document).encode()


_: RuntimeEngine[ContainerdConfig, str] = BytesEngine()
"""


def mypy(*paths: str) -> tuple[str, int]:
    """mypy's report and exit status on ``paths``, with the project's settings, from the checkout's root."""
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache"), *paths]
    )
    return stdout + stderr, status


def test_the_engines_are_runtime_engines_to_the_type_checker(monkeypatch):
    monkeypatch.chdir(ROOT)
    report, status = mypy(*ENGINES)
    assert status == 0, report


def test_an_engine_that_breaks_the_contract_fails_the_check(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    broken = tmp_path / "broken_engine.py"
    broken.write_text(BROKEN_ENGINE)
    report, status = mypy(str(broken))
    assert status == 1
    assert 'variable has type "RuntimeEngine[ContainerdConfig, str]"' in report, report
    assert 'Following member(s) of "BytesEngine" have conflicts' in report, report
