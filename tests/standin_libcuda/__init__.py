"""
STAND-IN driver libraries (libcuda.so.1) for verify's CUDA check, compiled with gcc from our own
C source (standin_libcuda.c) in a temporary folder, once per test session. Each is named for what
its cuInit answers; no GPU is behind any of them. Debian's real libcuda1 is the e2e test's other
library (tests/e2e/test_verify_cuda.py).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().with_name("standin_libcuda.c")
# Where Debian's libcuda1 (and NVIDIA's own packages) put the library the loader finds.
DRIVER_LIBRARY = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


@dataclass(frozen=True)
class StandIn:
    name: str
    init_result: int
    device_count: int = 0
    driver_version: int = 12020


STANDINS = {
    standin.name: standin
    for standin in (
        StandIn("standin-cuda-ok-2-devices", init_result=0, device_count=2),
        StandIn("standin-cuda-system-not-ready-802", init_result=802),
        StandIn("standin-cuda-no-device-100", init_result=100),
    )
}


def build(standin: StandIn, folder: Path) -> Path:
    """``folder/<name>/libcuda.so.1``, compiled from the C source with the stand-in's answers."""
    target = folder / standin.name / "libcuda.so.1"
    if target.exists():
        return target
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the stand-in libcuda.so.1 (apt-get install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-O2",
            "-Wall",
            "-Werror",
            "-Wl,-soname,libcuda.so.1",
            f"-DSTANDIN_INIT_RESULT={standin.init_result}",
            f"-DSTANDIN_DEVICE_COUNT={standin.device_count}",
            f"-DSTANDIN_DRIVER_VERSION={standin.driver_version}",
            "-o",
            str(target),
            str(SOURCE),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


@pytest.fixture(scope="session")
def standin_libcuda(tmp_path_factory):
    """A function: stand-in name (STANDINS) -> the path of its compiled libcuda.so.1 (built once
    per session)."""
    folder = tmp_path_factory.mktemp("standin-libcuda")
    return lambda name: build(STANDINS[name], folder)
