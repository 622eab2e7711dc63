"""Operations on the running kernel: load a module, apply sysctl values."""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from ..facts.kernel_state import KernelState
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import Commands


def module_present(state: dict[str, Any], module: str, filesystem: str | None, sysctl: str | None) -> bool:
    """Loaded or built in: /sys/module, or the filesystem / sysctl the module provides."""
    if state["modules"].get(module):
        return True
    if filesystem and filesystem in state["filesystems"]:
        return True
    return bool(sysctl and state["sysctls"].get(sysctl) is not None)


def module_read(module: str, provides_sysctl: str | None) -> FactCall:
    """What ``load_module`` reads (a stage reads it ahead with the same call)."""
    return (KernelState, {"modules": [module], "sysctls": [provides_sysctl] if provides_sysctl else []})


def sysctls_read(values: dict[str, Any]) -> FactCall:
    """What ``apply_sysctls`` reads (a stage reads it ahead with the same call)."""
    return (KernelState, {"modules": [], "sysctls": sorted(values)})


@operation()
def load_module(module: str, provides_filesystem: str | None = None, provides_sysctl: str | None = None) -> Commands:
    """
    Load a kernel module unless it is already present; a built-in module (absent from
    lsmod, but its filesystem or sysctl exists) counts as present.
    """
    state = read(host, module_read(module, provides_sysctl))
    if module_present(state, module, provides_filesystem, provides_sysctl):
        host.noop(f"kernel module {module} is present")
        return
    yield StringCommand("modprobe", QuoteString(module))


def differing_sysctls(state: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    return {key: str(value) for key, value in values.items() if state["sysctls"].get(key) != str(value)}


@operation()
def apply_sysctls(values: dict[str, Any]) -> Commands:
    """Set sysctl values now, only those that differ from the running kernel's."""
    state = read(host, sysctls_read(values))
    differing = differing_sysctls(state, values)
    if not differing:
        host.noop("sysctl values are already applied")
        return
    for key, value in sorted(differing.items()):
        yield StringCommand("sysctl", "-w", QuoteString(f"{key}={value}"))


@operation(is_idempotent=False)
def rebuild_initramfs(command: str) -> Commands:
    """Rebuild the initramfs with the family's tool; a host without that tool has none to rebuild."""
    tool = command.split()[0]
    yield StringCommand(
        "if command -v",
        QuoteString(tool),
        ">/dev/null 2>&1; then",
        command,
        "; else echo",
        QuoteString(f"{tool} is not installed: no initramfs of it to rebuild"),
        "; fi",
    )
