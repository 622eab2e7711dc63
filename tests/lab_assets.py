"""
Lab files the e2e tests install on nodes (crictl, kubectl-inspect-gpushare, image archives, the
Kubernetes binaries): the lab (tests/lab.py) keeps most of them xz-compressed with the SHA-256 of
the uncompressed file in its folder's SHA256SUMS. ``lab_file`` unpacks one once under
``.cache/lab/``, checks it against that sum, and skips the test, naming what to provide, when the
lab does not have it.
"""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import pytest

from harness import CACHE
from lab import LabMissing, expected_sums, lab_path, sha256


def lab_file(relative: str) -> Path:
    """``relative`` (e.g. ``bin/crictl-v1.36.0``, ``images/pause-3.9.tar``), held as is or as ``.xz``."""
    parts = Path(relative).parts
    try:
        folder = lab_path(*parts[:-1])
        want = expected_sums(folder).get(parts[-1])
        if want is None:
            raise LabMissing(f"{parts[-1]} is not listed in {folder / 'SHA256SUMS'}")
        source = folder / parts[-1]
        packed = folder / (parts[-1] + ".xz")
        if not source.exists() and not packed.exists():
            raise LabMissing(f"{source}(.xz) is missing from the test lab: provide {relative}")
    except LabMissing as missing:
        pytest.skip(f"lab file {relative} not available: {missing}")
    target = CACHE / "lab" / relative
    if target.exists() and sha256(target) == want:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    if source.exists():
        shutil.copyfile(source, partial)
    else:
        with lzma.open(packed) as stream, partial.open("wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
    got = sha256(partial)
    if got != want:
        partial.unlink()
        raise AssertionError(f"{relative}: SHA-256 {got}, but the lab's SHA256SUMS says {want}")
    partial.chmod(0o755)  # binaries run from here; archives do not mind
    partial.rename(target)
    return target
