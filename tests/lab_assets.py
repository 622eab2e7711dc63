"""
The lab folder: real upstream programs the e2e tests use where no reachable registry has them
(crictl, kubectl-inspect-gpushare, the pause image...). Its place is one setting, env
``GPU_NODE_LAB``, default ``../shared/lab`` relative to the repository. Each file is checked
against the folder's ``SHA256SUMS`` (sums of the uncompressed files) and unpacked once under
``.cache/lab/``.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
from pathlib import Path

import pytest

from harness import CACHE, REPO

ENV = "GPU_NODE_LAB"


def lab_dir() -> Path:
    return Path(os.environ.get(ENV) or (REPO.parent / "shared" / "lab")).resolve()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def expected_sha256(relative: str) -> str:
    """The pinned sum of ``relative`` (an uncompressed name such as ``bin/crictl-v1.36.0``)."""
    folder, name = lab_dir() / Path(relative).parent, Path(relative).name
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == name:
            return parts[0]
    raise AssertionError(f"{name} has no line in {folder / 'SHA256SUMS'}")


def lab_file(relative: str) -> Path:
    """
    ``relative`` (e.g. ``bin/crictl-v1.36.0``, ``images/pause-3.9.tar``) unpacked and checked:
    the lab holds it as is or as ``.xz``. Skips the test, naming what to provide, when the lab
    folder or the file is missing; fails on a sum mismatch.
    """
    source = lab_dir() / relative
    packed = source.with_name(source.name + ".xz")
    if not source.exists() and not packed.exists():
        pytest.skip(f"lab file {relative}(.xz) not found under {lab_dir()}: set {ENV} to the lab folder "
                    "(real upstream binaries and images, see the README's test section)")
    want = expected_sha256(relative)
    target = CACHE / "lab" / relative
    if target.exists() and _sha256(target) == want:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    if source.exists():
        shutil.copyfile(source, partial)
    else:
        with lzma.open(packed) as stream, partial.open("wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
    got = _sha256(partial)
    if got != want:
        partial.unlink()
        raise AssertionError(f"{relative}: SHA-256 {got}, SHA256SUMS says {want}")
    partial.rename(target)
    return target
