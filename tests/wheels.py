"""
gpu-node's wheel and its dependencies' wheels, built once and shared by the e2e tests that install
gpu-node (tests/e2e/test_package.py, pull mode in tests/e2e/test_without_controller_e2e.py), cached
under .cache/wheels: the wheel keyed by a hash of everything that goes into it, the dependencies'
wheels (PyPI's, by name) by pyproject.toml's hash. One build at a time across pytest processes
(tests/build_lock.py); a build that fails leaves nothing in the cache.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from build_lock import built_once
from harness import CACHE, REPO, run

FOLDER = CACHE / "wheels"
# docs/without-controller.md's recipe, word for word: requirements.txt of the wheels given as its
# arguments, each pinned by its version and SHA-256 (pip install --require-hashes), run by the pull
# e2e test over the wheels built here.
REQUIREMENTS_RECIPE = """\
for wheel in "$@"; do
    file=${wheel##*/} && version=${file#*-}
    echo "${file%%-*}==${version%%-*} --hash=sha256:$(sha256sum <"$wheel" | cut -c1-64)"
done >requirements.txt"""
# What the wheel is built from (pyproject.toml's package-dir, readme and license files).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "deploy", "templates")


def digest(paths) -> str:
    sha = hashlib.sha256()
    for path in sorted(paths):
        sha.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def source_files() -> list[Path]:
    files = []
    for name in SOURCES:
        path = REPO / name
        files += (
            [path]
            if path.is_file()
            else [file for file in path.rglob("*") if file.is_file() and "__pycache__" not in file.parts]
        )
    return files


def _built(name: str, build) -> Path:
    """``FOLDER/name``, made by ``build(folder)`` unless there already: in a folder beside it, renamed
    once whole."""
    final = FOLDER / name
    with built_once(f"wheels-{name}"):
        if not final.is_dir():
            FOLDER.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=FOLDER))
            try:
                build(partial)
                for path in [partial, *partial.iterdir()]:
                    path.chmod(0o755 if path.is_dir() else 0o644)  # a node's pip reads them as another user
                partial.rename(final)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    return final


def gpu_node_wheel() -> Path:
    """The wheel built from this checkout (its folder holds it alone)."""
    folder = _built(
        f"gpu-node-{digest(source_files())}",
        lambda into: run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(into), str(REPO)], timeout=600
        ),
    )
    (wheel,) = folder.glob("gpu_node-*.whl")
    return wheel


def dependency_wheels() -> Path:
    """A folder of the wheels gpu-node's dependencies install from, with no index."""
    wheel = gpu_node_wheel()

    def build(into: Path) -> None:
        run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(into), str(wheel)], timeout=900)
        for own in into.glob("gpu_node-*.whl"):
            own.unlink()

    return _built(f"dependencies-{digest([REPO / 'pyproject.toml'])}", build)
