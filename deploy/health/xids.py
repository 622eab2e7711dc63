"""
The NVIDIA driver's Xid events (its ``NVRM: Xid (PCI:<address>): <number>, ...`` kernel lines), each
number classified by what it asks of the node. The numbers and what each means are facts from
NVIDIA's published Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
for Ampere and newer GPUs, https://docs.nvidia.com/deploy/xid-errors/index.html for the older
ones), in our own words; the severities are gpu-node's reading of the catalogue's resolution for
each (a node reboot: fatal; a GPU reset: needs reset; the application's own or a record of an event:
informational). docs/health.md shows the table. Standard library only: the health archive carries it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..reports.health_report import FATAL, INFORMATIONAL, NEEDS_ATTENTION, NEEDS_RESET


@dataclass(frozen=True)
class XidClass:
    severity: str
    meaning: str  # short, our words: the problem line says it after the number


XIDS: dict[int, XidClass] = {
    8: XidClass(INFORMATIONAL, "a GPU engine stopped processing (the application's channel)"),
    13: XidClass(INFORMATIONAL, "graphics engine exception (usually the application's)"),
    31: XidClass(INFORMATIONAL, "GPU memory page fault (usually the application's)"),
    43: XidClass(INFORMATIONAL, "GPU stopped processing an application's work"),
    45: XidClass(INFORMATIONAL, "work cleaned up after an earlier error or a stopped process"),
    48: XidClass(NEEDS_RESET, "uncorrectable (double-bit) ECC error"),
    61: XidClass(NEEDS_RESET, "internal micro-controller breakpoint"),
    62: XidClass(NEEDS_RESET, "internal micro-controller halted"),
    63: XidClass(INFORMATIONAL, "ECC page retirement or row remap recorded (active after a reset)"),
    64: XidClass(NEEDS_RESET, "ECC page retirement or row remap could not be recorded"),
    69: XidClass(INFORMATIONAL, "graphics engine class error (usually the application's)"),
    74: XidClass(NEEDS_RESET, "NVLink error"),
    79: XidClass(FATAL, "GPU fallen off the bus"),
    92: XidClass(INFORMATIONAL, "high single-bit ECC error rate"),
    94: XidClass(NEEDS_RESET, "contained ECC error (its row is remapped at the next reset)"),
    95: XidClass(NEEDS_RESET, "uncontained ECC error"),
    109: XidClass(INFORMATIONAL, "context switch timeout (usually the application's)"),
    119: XidClass(NEEDS_RESET, "GSP did not answer in time"),
    120: XidClass(NEEDS_RESET, "GSP error"),
    121: XidClass(NEEDS_RESET, "C2C link error"),
    140: XidClass(NEEDS_RESET, "unrecovered ECC error"),
}
# Xid 154 names the recovery the driver asks for, in its own words after "to 0x<n> (...)".
RECOVERY_XID = 154
RECOVERY = {
    "node reboot required": XidClass(FATAL, "the driver asks for a node reboot"),
    "gpu reset required": XidClass(NEEDS_RESET, "the driver asks for a GPU reset"),
    "drain p2p": XidClass(NEEDS_ATTENTION, "the driver asks to drain peer-to-peer work"),
    "drain and reset": XidClass(NEEDS_RESET, "the driver asks to drain and reset the GPU"),
    "none": XidClass(INFORMATIONAL, "the driver asks for no recovery"),
}
UNLISTED = "not in gpu-node's Xid table (see NVIDIA's Xid catalogue)"

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." (older drivers: no "PCI:")
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.([0-7]))?\): "
    r"(\d{1,5})\b(.*)",
    re.ASCII,  # \d is any script's digits otherwise: "٧٩" is no Xid 79
)
RECOVERY_TEXT = re.compile(r"to 0x[0-9A-Fa-f]+ \(([^)]{1,40})\)")


@dataclass(frozen=True)
class XidEvent:
    xid: int
    gpu: str  # the PCI address as sysfs names it: 0000:3b:00.0
    severity: str
    meaning: str

    @property
    def line(self) -> str:
        return f"Xid {self.xid} on {self.gpu}: {self.meaning}"


def pci_address(domain_bus_device: str, function: str | None) -> str:
    """An Xid line's GPU as sysfs names it: a four-digit domain (nvidia-smi prints eight), lower case,
    function 0 where the line names none."""
    domain, bus, device = domain_bus_device.lower().split(":")
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{device}.{function or '0'}"


def classify(xid: int, rest: str) -> XidClass:
    """What Xid ``xid`` asks of the node; ``rest``: the text after its number (read for Xid 154)."""
    if xid == RECOVERY_XID:
        named = RECOVERY_TEXT.search(rest)
        recovery = RECOVERY.get(named[1].strip().lower()) if named else None
        return recovery or XidClass(NEEDS_ATTENTION, "the driver asks for a recovery gpu-node does not know")
    return XIDS.get(xid) or XidClass(INFORMATIONAL, UNLISTED)


def xid_event(message: str) -> XidEvent | None:
    """The Xid event a kernel message reports; None for any other message."""
    match = XID_LINE.search(message)
    if match is None:
        return None
    found = classify(int(match[3]), match[4])
    return XidEvent(int(match[3]), pci_address(match[1], match[2]), found.severity, found.meaning)
