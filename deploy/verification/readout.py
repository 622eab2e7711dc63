"""
Reading what verify read on a node (deploy/facts/verification.py) for every subject's steps: the
GPUs, the driver's version, containerd's parsed dump, the configured runtime binaries, what crictl
said. Pure.
"""

from __future__ import annotations

import json
import re

from ..foundations import node_text, redact
from ..runtimes.containerd.cri import dump_cri_plugin
from ..foundations.toml_layout import tomllib
from .options import HANDLER


def gpus_on_pci(readout: dict) -> list[dict]:
    return readout["node"]["gpus"]


def gpu_usable(readout: dict) -> bool:
    """A GPU is there and nvidia-smi talks to it: the runs with --gpus make sense."""
    return bool(gpus_on_pci(readout)) and readout["smi"]["exit_code"] == 0 and bool(readout["smi"]["gpus"])


def kernel_module_version(text: str | None) -> str | None:
    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", (text or "") + " ")
    return match[1] if match else None


def driver_version(readout: dict) -> str | None:
    versions = [gpu["driver_version"] for gpu in readout["smi"]["gpus"] if gpu["driver_version"]]
    return versions[0] if versions else kernel_module_version(readout["kernel_module"])


def parse_cri_runtimes(dump: str) -> dict:
    """``containerd config dump`` -> the CRI plugin's runtimes and default runtime name."""
    # Read only: the standard library's reader, not tomlkit's round-trip parser (about ten times
    # slower, and a fleet's verification parses one dump per node on the controller).
    config = node_text.parsed(tomllib.loads, dump, "`containerd config dump`")
    containerd = config.get("plugins", {}).get(dump_cri_plugin(config), {}).get("containerd", {})
    return {
        "default_runtime": containerd.get("default_runtime_name"),
        "runtimes": containerd.get("runtimes", {}) or {},
        "imports": [path for path in config.get("imports", []) if isinstance(path, str)],
    }


def read_cri(readout: dict) -> tuple[dict | None, str | None]:
    """The one reading of ``containerd config dump``: (the CRI runtimes, None) or (None, why not)."""
    dump = readout["containerd"]["dump"]
    if readout["containerd"]["dump_exit_code"] == 0 and dump:
        try:
            return parse_cri_runtimes(dump), None
        except Exception as error:  # a TOML error or an unexpected shape; the reason is what matters
            return None, f"cannot parse its output: {error}"
    if readout["containerd"]["path"]:
        return None, short(redact.daemon_output(dump or "no output"))
    return None, None


def configured_binaries(readout: dict, cri: dict | None) -> set[str]:
    """The nvidia runtime's binary as containerd's parsed dump and ``docker info`` name it."""
    binaries = set()
    if cri:
        binary = ((cri["runtimes"].get(HANDLER) or {}).get("options") or {}).get("BinaryName")
        if binary:
            binaries.add(binary)
    if readout["docker"]["runtimes"].get(HANDLER):
        binaries.add(readout["docker"]["runtimes"][HANDLER])
    return binaries


def short(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# crictl logs through logrus (`time=... level=fatal msg="..."`) and klog (`E1123 14:34:14 ...`);
# its fatal line carries the error, the rest repeats it or warns about a missing /etc/crictl.yaml.
LOGRUS_LINE = re.compile(r'level=(\w+) msg="((?:[^"\\]|\\.)*)"')
KLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


def crictl_message(text: str) -> str:
    """What crictl said went wrong: the messages of its error and fatal lines, unquoted."""
    messages = []
    for line in text.splitlines():
        logged = LOGRUS_LINE.search(line)
        if logged:
            if logged[1] in ("error", "fatal"):
                try:
                    messages.append(json.loads(f'"{logged[2]}"'))
                except ValueError:
                    messages.append(logged[2])
        elif line.strip() and not KLOG_LINE.match(line):
            messages.append(line.strip())
    return "; ".join(messages) or text


def without_crictl_warnings(text: str) -> str:
    """A container's logs as ``crictl logs`` printed them, without crictl's own warnings (every call
    warns when /etc/crictl.yaml is missing)."""
    return "\n".join(line for line in text.splitlines()
                     if not ((logged := LOGRUS_LINE.search(line)) and line.startswith("time=")
                             and logged[1] == "warning"))


def cleaned_up(step: dict) -> bool:
    """Done, or the sandbox is gone already: on a kubelet node the kubelet may remove it first."""
    output = step.get("output", "")
    return step.get("exit_code", 1) == 0 or "code = NotFound" in output or "not found" in output
