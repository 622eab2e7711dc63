"""
Reading what verify read on a node (deploy/facts/verification.py) for every subject's steps: the
GPUs, the driver's version, each runtime's reading prepared once (deploy/runtimes/registry.py), the
configured runtime binaries, what crictl said. Pure.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..runtimes import registry


def gpus_on_pci(readout: dict[str, Any]) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = readout["node"]["gpus"]
    return gpus


def gpu_usable(readout: dict[str, Any]) -> bool:
    """A GPU is there and nvidia-smi talks to it: the runs with --gpus make sense."""
    return bool(gpus_on_pci(readout)) and readout["smi"]["exit_code"] == 0 and bool(readout["smi"]["gpus"])


def kernel_module_version(text: str | None) -> str | None:
    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", (text or "") + " ")
    return match[1] if match else None


def driver_version(readout: dict[str, Any]) -> str | None:
    versions = [gpu["driver_version"] for gpu in readout["smi"]["gpus"] if gpu["driver_version"]]
    return versions[0] if versions else kernel_module_version(readout["kernel_module"])


def prepared(readout: dict[str, Any]) -> dict[str, Any]:
    """The readout with each runtime's reading prepared for its steps, once (containerd's dump parsed)."""
    return {**readout, **{runtime.name: runtime.prepared(readout[runtime.name]) for runtime in registry.RUNTIMES}}


def configured_binaries(readout: dict[str, Any]) -> set[str]:
    """The nvidia runtime's binary as each runtime's (prepared) reading names it: containerd's parsed
    dump, ``docker info``."""
    return {binary for runtime in registry.RUNTIMES if (binary := runtime.configured_binary(readout[runtime.name]))}


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
    return "\n".join(
        line
        for line in text.splitlines()
        if not ((logged := LOGRUS_LINE.search(line)) and line.startswith("time=") and logged[1] == "warning")
    )


def cleaned_up(step: dict[str, Any]) -> bool:
    """Done, or the sandbox is gone already: on a kubelet node the kubelet may remove it first."""
    output = step.get("output", "")
    return step.get("exit_code", 1) == 0 or "code = NotFound" in output or "not found" in output
