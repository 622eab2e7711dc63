"""
Whether CUDA starts on the node: ``cuInit`` called through the driver's own ``libcuda.so.1`` (no
CUDA toolkit, no compiler on the node: the node's python3 loads the library with ctypes). It only
reads: ``cuInit`` initialises the driver API in the reading process and creates no context, and the
process ends with the read. A failure is named by the library itself (``cuGetErrorName`` /
``cuGetErrorString``), so a code this deploy has never seen is still named.
"""

from __future__ import annotations

from typing import Any

from ..foundations import shell_scripts
from .base import NodeFact

# Python 3.6 (RHEL 8's platform-python) and newer; every line is "<kind> <value>".
CUDA_INIT_SCRIPT = r"""
import ctypes, sys

def say(kind, value=""):
    print(kind, " ".join(str(value).split()))

def named(call, code):
    text = ctypes.c_char_p()
    if call(code, ctypes.byref(text)) == 0 and text.value:
        return text.value.decode("utf-8", "replace")
    return None

try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    say("cuda_load_error", error)
    sys.exit(0)
with open("/proc/self/maps") as maps:
    paths = [line.split(None, 5)[-1].strip() for line in maps if "libcuda.so" in line]
say("cuda_library", paths[0] if paths else "libcuda.so.1")
calls = {}
for symbol, argtypes in (("cuInit", [ctypes.c_uint]),
                         ("cuDriverGetVersion", [ctypes.POINTER(ctypes.c_int)]),
                         ("cuDeviceGetCount", [ctypes.POINTER(ctypes.c_int)]),
                         ("cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
                         ("cuGetErrorString", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])):
    try:
        calls[symbol] = getattr(cuda, symbol)
    except AttributeError:
        say("cuda_missing", symbol)
        continue
    calls[symbol].argtypes = argtypes
    calls[symbol].restype = ctypes.c_int
if "cuDriverGetVersion" in calls:
    version = ctypes.c_int(0)
    if calls["cuDriverGetVersion"](ctypes.byref(version)) == 0:
        say("cuda_driver_version", version.value)
if "cuInit" not in calls:
    sys.exit(0)
code = calls["cuInit"](0)
say("cuda_init", code)
if code == 0 and "cuDeviceGetCount" in calls:
    count = ctypes.c_int(0)
    result = calls["cuDeviceGetCount"](ctypes.byref(count))
    say("cuda_device_count", "%d %d" % (result, count.value))
elif code != 0:
    for symbol, kind in (("cuGetErrorName", "cuda_error_name"), ("cuGetErrorString", "cuda_error_string")):
        if symbol in calls:
            text = named(calls[symbol], code)
            if text:
                say(kind, text)
"""

# cuInit on a real GPU takes seconds; a driver that hangs must not hang the read.
TIMEOUT_SECONDS = 60
TIMED_OUT = 124  # coreutils' timeout


def cuda_command() -> str:
    """CudaInit's command (deploy/shell/cuda_init.sh), the Python script given to it as a value."""
    return shell_scripts.script("cuda_init", timeout_seconds=TIMEOUT_SECONDS, cuda_init=CUDA_INIT_SCRIPT.strip())


def cuda_version(number: int) -> str:
    """cuDriverGetVersion's 12020 -> "12.2" (1000 * major + 10 * minor)."""
    return f"{number // 1000}.{number % 1000 // 10}"


class CudaInit(NodeFact[dict[str, Any]]):
    """
    ``cuInit(0)`` through the driver's ``libcuda.so.1``, by the node's python3 (or RHEL's
    ``/usr/libexec/platform-python``) with ctypes: the library the loader found, the CUDA version
    the driver supports, cuInit's result, the library's own name and text for a failure, and the
    devices CUDA counts after a success.

    .. code:: python

        {
            "python": "/usr/bin/python3",       # None: no python on the node, CUDA not checked
            "exit_code": 0,                     # the python's (124: timed out; None: not run)
            "library": "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.216.03",
            "load_error": None,                 # why libcuda.so.1 did not load
            "missing": [],                      # driver-API calls the library does not export
            "driver_version": "12.2",
            "init_result": 100,                 # None: cuInit was not called
            "error_name": "CUDA_ERROR_NO_DEVICE",
            "error_string": "no CUDA-capable device is detected",
            "device_count": None,               # after a successful cuInit
        }
    """

    def command(self) -> str:
        return cuda_command().strip()

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "python": None,
            "exit_code": None,
            "library": None,
            "load_error": None,
            "missing": [],
            "driver_version": None,
            "init_result": None,
            "error_name": None,
            "error_string": None,
            "device_count": None,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind == "cuda_python":
                state["python"] = rest or None
            elif kind == "cuda_exit" and rest.isdigit():
                state["exit_code"] = int(rest)
            elif kind == "cuda_library":
                state["library"] = rest or None
            elif kind == "cuda_load_error":
                state["load_error"] = rest or "libcuda.so.1 did not load"
            elif kind == "cuda_missing" and rest:
                state["missing"].append(rest)
            elif kind == "cuda_driver_version" and rest.isdigit():
                state["driver_version"] = cuda_version(int(rest))
            elif kind == "cuda_init" and rest.lstrip("-").isdigit():
                state["init_result"] = int(rest)
            elif kind == "cuda_error_name":
                state["error_name"] = rest or None
            elif kind == "cuda_error_string":
                state["error_string"] = rest or None
            elif kind == "cuda_device_count":
                result, _, count = rest.partition(" ")
                if result == "0" and count.isdigit():
                    state["device_count"] = int(count)
        return state
