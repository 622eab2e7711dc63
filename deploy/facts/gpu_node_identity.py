"""
What a GPU node says about itself, for its Kubernetes labels (``GpuNodeIdentity``: its hostname, the
GPUs on its PCI bus and their product names, whether it has NVIDIA's CDI spec), and the GPU node as
the control plane sees it (``GpuNode``: its node name, its accelerator label, its own settings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyinfra.api import QuoteString, StringCommand

from ..runtimes.cdi import SPEC_PATH as CDI_SPEC
from .base import NodeFact

# Label values: at most 63 characters, alphanumeric at both ends, '-', '_', '.' inside.
LABEL_VALUE_MAX = 63


# Reads the GPUs' product names through NVML itself, for a driver root with a libnvidia-ml but no
# nvidia-smi (NVIDIA's mock NVML has none; a driver container keeps nvidia-smi off the host's PATH).
# python3's ctypes is the only NVML client such a host reliably has; without python3 the fact says so.
NVML_PRODUCTS_PY = """\
import ctypes, sys
try:
    nvml = ctypes.CDLL(sys.argv[1])
    nvml.nvmlErrorString.restype = ctypes.c_char_p
except (OSError, AttributeError) as error:
    print("nvml failed cannot load NVML from " + sys.argv[1] + ": " + str(error)); sys.exit(0)
def check(code, call):
    if code:
        print("nvml failed " + call + ": " + nvml.nvmlErrorString(code).decode(errors="replace")); sys.exit(0)
check(nvml.nvmlInit_v2(), "nvmlInit_v2")
count, names = ctypes.c_uint(), []
check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
for index in range(count.value):
    handle, name = ctypes.c_void_p(), ctypes.create_string_buffer(96)
    check(nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex_v2")
    check(nvml.nvmlDeviceGetName(handle, name, 96), "nvmlDeviceGetName")
    names.append(name.value.decode(errors="replace"))
nvml.nvmlShutdown()
print("nvml ok")
for name in names:
    print("product " + name)
"""
# Where driver installs and driver containers put libnvidia-ml, relative to the driver root.
NVML_LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
)


class GpuNodeIdentity(NodeFact[dict[str, Any]]):
    """
    What a GPU node says about itself, for its Kubernetes labels: its hostname (the kubelet's
    default node name), NVIDIA display/3D controllers on the PCI bus, and the GPUs' product names.
    The names come from nvidia-smi on PATH, else the one under ``driver_root`` (run with that
    root's libnvidia-ml); where neither answers with names, from NVML itself through the driver
    root's libnvidia-ml (a driver root without a working nvidia-smi, such as NVIDIA's mock NVML).

    .. code:: python

        {"hostname": "gpu1", "pci_gpus": 2, "products": ["NVIDIA A100-SXM4-40GB", ...],
         "nvidia_smi": "ok",     # or "missing", "exit 9", "unexpected output"
         "nvml": None,           # not needed; else "ok", "no library", "no python3", "failed <why>"
         "cdi_spec": True}       # the node has NVIDIA's CDI spec (the deploy's CDI stage wrote it)
    """

    def command(self, driver_root: str) -> StringCommand:
        root = driver_root.rstrip("/")
        library_dirs = " ".join(NVML_LIBRARY_DIRS)
        return StringCommand(
            'echo "hostname $(hostname 2>/dev/null || cat /etc/hostname)";',
            "n=0; for d in /sys/bus/pci/devices/*; do",
            '[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue;',
            'case "$(cat "$d/class" 2>/dev/null)" in 0x0300*|0x0302*) n=$((n+1));; esac; done;',
            'echo "pci_gpus $n";',
            "[ -f",
            QuoteString(CDI_SPEC),
            "] && echo 'cdi_spec 1';",
            StringCommand("_root=", QuoteString(root), ";", _separator=""),
            f"_lib=; for _d in {library_dirs}; do",
            '[ -e "$_root/$_d/libnvidia-ml.so.1" ] && { _lib="$_root/$_d/libnvidia-ml.so.1"; break; }; done;',
            "_path=; _ld=${LD_LIBRARY_PATH-}; _named=;",
            "if command -v nvidia-smi >/dev/null 2>&1; then _path=$PATH;",
            'elif [ -x "$_root/usr/bin/nvidia-smi" ]; then _path="$_root/usr/bin:$PATH"; _ld="${_lib%/*}"; fi;',
            "if [ -z \"$_path\" ]; then echo 'nvidia_smi missing';",
            'else _o=$(PATH="$_path" LD_LIBRARY_PATH="$_ld" nvidia-smi --query-gpu=name,index --format=csv,noheader',
            "2>/dev/null); _rc=$?;",
            'if [ $_rc -ne 0 ]; then echo "nvidia_smi exit $_rc";',
            # Only "<name>, <index>" lines answer the query: a mock driver's fallback nvidia-smi script
            # ignores its arguments and prints its version lines.
            "elif printf '%s\\n' \"$_o\" | grep -qv ', [0-9][0-9]*$' && [ -n \"$_o\" ]; then",
            "echo 'nvidia_smi unexpected output';",
            "else echo 'nvidia_smi ok'; _named=1;",
            "[ -n \"$_o\" ] && printf '%s\\n' \"$_o\" | sed 's/^\\(.*\\), [0-9][0-9]*$/product \\1/'; fi; fi;",
            'if [ -z "$_named" ]; then',
            "if [ -z \"$_lib\" ]; then echo 'nvml no library';",
            "elif ! command -v python3 >/dev/null 2>&1; then echo 'nvml no python3';",
            "else _n=$(python3 -c",
            QuoteString(NVML_PRODUCTS_PY),
            '"$_lib" 2>&1); _rc=$?;',
            'printf \'%s\\n\' "$_n"; [ $_rc -eq 0 ] || echo "nvml failed python3 exit $_rc"; fi; fi',
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "hostname": None,
            "pci_gpus": 0,
            "products": [],
            "nvidia_smi": "missing",
            "nvml": None,
            "cdi_spec": False,
        }

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            key, _, value = line.partition(" ")
            value = value.strip()
            if key == "hostname":
                state["hostname"] = value or None
            elif key == "pci_gpus":
                state["pci_gpus"] = int(value or 0)
            elif key == "nvidia_smi":
                state["nvidia_smi"] = value
            elif key == "nvml":
                state["nvml"] = value
            elif key == "cdi_spec":
                state["cdi_spec"] = value == "1"
            elif key == "product" and value:
                state["products"].append(value)
        if state["nvml"] not in (None, "ok"):
            state["products"] = []  # a failed NVML read names no product
        return state


def accelerator_label(product: str | None) -> str | None:
    """
    ``NVIDIA A100-SXM4-40GB`` -> ``nvidia-a100-sxm4-40gb``, ``Tesla T4`` -> ``nvidia-tesla-t4``
    (the seed's ``accelerator=nvidia-tesla-p100`` form); None when there is no product name.
    """
    if not product:
        return None
    value = re.sub(r"[^a-z0-9._]+", "-", product.strip().lower()).strip("-._")
    if not value.startswith("nvidia"):
        value = f"nvidia-{value}"
    value = value[:LABEL_VALUE_MAX].rstrip("-._")
    return value or None


def kube_node_name(node_names: dict[str, str], host_name: str, hostname: str | None) -> str:
    """
    The Kubernetes node name of an inventory host: the ``kube_node_names`` mapping first, else
    the host's own hostname lower-cased (what the kubelet registers by default), else the
    inventory name.
    """
    if host_name in node_names:
        return node_names[host_name]
    if hostname:
        return hostname.strip().lower()
    return host_name


@dataclass(frozen=True)
class GpuNode:
    """One host of the gpu_nodes group, as the control plane sees it."""

    host_name: str  # pyinfra inventory name
    node_name: str  # Kubernetes node name
    products: tuple[str, ...]  # product names (nvidia-smi or NVML), one per GPU; () when unknown
    pci_gpus: int  # NVIDIA GPUs on the PCI bus
    nvidia_smi: str  # "ok", "missing" or "exit N"
    gpu_sharing: str  # the node's own gpu_sharing setting
    nvidia_runtime_default: bool  # the node's own setting
    settings: Any  # the node's full deploy.settings.Settings
    nvml: str | None = None  # NVML read from the driver root when nvidia-smi is missing: "ok", or why not
    cdi_spec: bool = False  # the node has NVIDIA's CDI spec

    @property
    def cdi(self) -> bool:
        """Whether the device plugin hands this node's GPUs out by CDI name: cdi=true, or auto where the
        node's CDI stage wrote the spec (its runtime has CDI and its driver answers)."""
        return self.settings.cdi == "true" or (self.settings.cdi == "auto" and self.cdi_spec)

    @property
    def has_gpu(self) -> bool:
        return self.pci_gpus > 0 or bool(self.products)

    @property
    def accelerator(self) -> str | None:
        return accelerator_label(self.products[0]) if self.products else None
