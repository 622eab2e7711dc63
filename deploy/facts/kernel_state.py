"""Kernel facts: which modules are present (loaded or built in) and sysctl values."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyinfra.api import QuoteString, StringCommand

from .base import NodeFact


class KernelState(NodeFact[dict[str, Any]]):
    """
    Modules present under ``/sys/module`` (loaded or built in), filesystems the kernel
    knows, and the current value of each sysctl asked for (None when it does not exist).
    One command for all of them.

    .. code:: python

        {
            "modules": {"overlay": True, "br_netfilter": False},
            "filesystems": ["ext4", "overlay", ...],
            "sysctls": {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": None},
        }
    """

    def command(self, modules: Iterable[str] = (), sysctls: Iterable[str] = ()) -> StringCommand:
        parts: list[str | StringCommand] = []
        for module in modules:
            path = QuoteString(f"/sys/module/{module}")
            parts.append(
                StringCommand(
                    "if [ -d",
                    path,
                    "]; then echo",
                    QuoteString(f"module {module} 1"),
                    "; else echo",
                    QuoteString(f"module {module} 0"),
                    "; fi;",
                )
            )
        parts.append(StringCommand("echo filesystems $(awk '{print $NF}' /proc/filesystems 2>/dev/null);"))
        for key in sysctls:
            path = QuoteString("/proc/sys/" + key.replace(".", "/"))
            parts.append(
                StringCommand(
                    "if [ -r",
                    path,
                    "]; then echo",
                    QuoteString(f"sysctl {key}"),
                    "$(cat",
                    path,
                    "); else echo",
                    QuoteString(f"sysctl {key}"),
                    "; fi;",
                )
            )
        parts.append("true")
        return StringCommand(*parts)

    @staticmethod
    def default() -> dict[str, Any]:
        return {"modules": {}, "filesystems": [], "sysctls": {}}

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.partition(" ")
            if kind == "module":
                name, _, present = rest.partition(" ")
                state["modules"][name] = present.strip() == "1"
            elif kind == "filesystems":
                state["filesystems"] = rest.split()
            elif kind == "sysctl":
                key, _, value = rest.partition(" ")
                state["sysctls"][key] = value.strip() or None
        return state
