"""
CudaInit's real command (python3 with ctypes calling cuInit) run by a real shell on this machine,
against the STAND-IN driver libraries (tests/standin_libcuda: our C source compiled with gcc,
found through LD_LIBRARY_PATH as the node's loader finds the driver's); and verify's reading of
the nvidia-persistenced / nvidia-fabricmanager units and the persistence mode.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest
from standin_libcuda import STANDINS, standin_libcuda  # noqa: F401 (the fixture)

from deploy.facts.cuda import CudaInit
from deploy.facts.verification import VerifyReadout, parse_smi_persistence, unit_state


def read_cuda(library_dir, path: str | None = None) -> dict:
    """The fact's command in a real shell; its output through the fact's own process."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(library_dir)}
    if path is not None:
        env["PATH"] = path
    result = subprocess.run(
        ["/bin/sh", "-c", CudaInit().command()], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return CudaInit().process(result.stdout.splitlines())


@pytest.mark.parametrize("name", sorted(STANDINS))
def test_cuinit_through_each_standin_library_gives_what_it_was_built_to_answer(standin_libcuda, name):  # noqa: F811
    standin = STANDINS[name]
    library = standin_libcuda(name)
    found = read_cuda(library.parent)
    assert found["python"] and found["exit_code"] == 0 and found["load_error"] is None
    assert found["library"] == str(library), "the library the loader found, from the process's own maps"
    assert found["init_result"] == standin.init_result
    assert found["driver_version"] == f"{standin.driver_version // 1000}.{standin.driver_version % 1000 // 10}"
    if standin.init_result == 0:
        assert found["device_count"] == standin.device_count
        assert (found["error_name"], found["error_string"]) == (None, None)
    else:
        assert found["device_count"] is None
        assert (found["error_name"], found["error_string"]) == {
            802: ("CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"),
            100: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
        }[standin.init_result]


@pytest.mark.skipif(bool(ctypes.util.find_library("cuda")), reason="this machine has a libcuda of its own")
def test_without_libcuda_the_loader_error_is_reported(tmp_path):
    found = read_cuda(tmp_path)
    assert found["load_error"] == "libcuda.so.1: cannot open shared object file: No such file or directory"
    assert found["init_result"] is None and found["exit_code"] == 0


@pytest.mark.skipif(os.path.exists("/usr/libexec/platform-python"), reason="this machine has platform-python")
def test_without_python_the_read_says_so_and_calls_nothing(tmp_path):
    found = read_cuda(tmp_path, path=str(tmp_path))
    assert found == {**CudaInit.default(), "python": None}


def test_the_python_found_on_the_path_is_the_one_that_runs(tmp_path, standin_libcuda):  # noqa: F811
    """Another python3 first on the PATH (this test's interpreter, linked as python3) is used."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    library = standin_libcuda("standin-cuda-ok-2-devices")
    found = read_cuda(library.parent, path=f"{bin_dir}:/usr/bin:/bin")
    assert found["python"] == str(bin_dir / "python3") and found["device_count"] == 2


def test_units_and_persistence_mode_as_systemctl_and_nvidia_smi_print_them():
    # `systemctl show UNIT -p LoadState -p ActiveState | tr '\n' ' '`, for a unit there and one not (the
    # real systemctl's answer: tests/e2e/test_verify_cuda.py, nvidia-fabricmanager "not installed")
    lines = [
        "unit nvidia-persistenced LoadState=loaded ActiveState=failed ",
        "unit nvidia-fabricmanager LoadState=not-found ActiveState=inactive ",
    ]
    readout = VerifyReadout().process(lines)
    assert unit_state(readout, "nvidia-persistenced") == "failed"
    assert unit_state(readout, "nvidia-fabricmanager") == "not installed"
    assert unit_state(VerifyReadout().process([]), "nvidia-persistenced") == "unknown"
    # nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader
    assert parse_smi_persistence("0, Enabled\n1, Disabled\n") == {0: "Enabled", 1: "Disabled"}
    assert parse_smi_persistence("No devices were found\n") == {}
