"""
A sysfs-like PCI device folder (``<root>/<slot>/{vendor,device,class,vpd,physfn}``, what
``/sys/bus/pci/devices`` shows) written from a topology fixture in tests/fixtures/fabric/. The unit
tests run NodeSurvey's real command over it; the e2e tests bind-mount it read-only over a node
container's ``/sys/bus/pci/devices`` (a container cannot be given PCI devices).

A fixture's ``devices`` are ``{"slot", "vendor", "device", "class"}``, with ``"vpd"``
(``{"ident": ..., "fields": {keyword: value}}``, written in PCI's VPD format: the identifier
string, the read-only keywords with their checksum, the end tag) and ``"physfn"`` (the slot of
the physical function a virtual function belongs to) where the device has them.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fabric"


def topologies() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


def load(name_or_path: str | Path) -> dict:
    path = Path(name_or_path)
    if not path.suffix:
        path = FIXTURES / f"{name_or_path}.json"
    return json.loads(path.read_text())


def vpd_bytes(ident: str, fields: dict[str, str]) -> bytes:
    """PCI VPD: large resource 0x82 (identifier string), 0x90 (VPD-R keywords ending in RV, whose
    checksum makes the bytes up to it sum to zero), small end tag 0x78."""

    def large(tag: int, body: bytes) -> bytes:
        return bytes([tag, len(body) & 0xFF, len(body) >> 8]) + body

    keywords = b"".join(key.encode() + bytes([len(value)]) + value.encode() for key, value in fields.items())
    head = large(0x82, ident.encode()) + bytes([0x90, (len(keywords) + 4) & 0xFF, (len(keywords) + 4) >> 8])
    body = head + keywords + b"RV\x01"
    return body + bytes([(-sum(body)) & 0xFF]) + b"\x78"


def write(topology: dict, root: Path) -> Path:
    """Write the topology's devices under ``root`` (created); returns it."""
    root.mkdir(parents=True, exist_ok=True)
    for device in topology["devices"]:
        folder = root / device["slot"]
        folder.mkdir()
        for name in ("vendor", "device", "class"):
            (folder / name).write_text(device[name] + "\n")
        if "vpd" in device:
            (folder / "vpd").write_bytes(vpd_bytes(device["vpd"]["ident"], device["vpd"]["fields"]))
        if "physfn" in device:
            (folder / "physfn").symlink_to(f"../{device['physfn']}")
    return root
