"""
A STAND-IN kernel module file: a minimal ELF64 relocatable object whose only content is a
``.modinfo`` section (``key=value`` strings, NUL-separated, as the kernel's MODULE_INFO macros lay
them out), so that the real ``modinfo -F license|version FILE`` reads it as it reads the driver's
nvidia.ko. It cannot be loaded (no code, no symbols); tests never load a module anyway
(kernel_modules_load=false). Written here byte by byte, from the ELF format's published layout.
"""

from __future__ import annotations

import struct

OPEN_LICENSE, PROPRIETARY_LICENSE = "Dual MIT/GPL", "NVIDIA"


def module_bytes(fields: dict[str, str]) -> bytes:
    modinfo = b"".join(f"{key}={value}".encode() + b"\0" for key, value in fields.items())
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    header_size, section_header_size = 64, 64
    modinfo_offset = header_size
    shstrtab_offset = modinfo_offset + len(modinfo)
    sections_offset = (shstrtab_offset + len(shstrtab) + 7) & ~7
    # e_ident: ELF, 64-bit, little-endian, version 1, System V ABI; a relocatable (1) for x86-64 (62)
    header = struct.pack(
        "<4sBBBBB7sHHIQQQIHHHHHH",
        b"\x7fELF",
        2,
        1,
        1,
        0,
        0,
        b"\0" * 7,
        1,
        62,
        1,
        0,
        0,
        sections_offset,
        0,
        header_size,
        0,
        0,
        section_header_size,
        3,
        2,
    )

    def section(name: int, kind: int, flags: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, flags, 0, offset, size, 0, 0, 1, 0)

    body = header + modinfo + shstrtab
    body += b"\0" * (sections_offset - len(body))
    body += section(0, 0, 0, 0, 0)  # the null section
    body += section(1, 1, 2, modinfo_offset, len(modinfo))  # .modinfo: PROGBITS, ALLOC
    body += section(10, 3, 0, shstrtab_offset, len(shstrtab))  # .shstrtab: STRTAB
    return body


def nvidia_module(license_: str, version: str) -> bytes:
    return module_bytes({"version": version, "license": license_, "name": "nvidia"})
