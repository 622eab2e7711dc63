"""
Why an apt-get install of the NVIDIA driver failed, in one line, from its output: DKMS's module
build (the kernel and the build's log on the node), else apt's last error. Pure.
"""

from __future__ import annotations

import re

DKMS_BUILD_FAILED = re.compile(r"Bad return status for module build on kernel: (\S+)")
DKMS_LOG = re.compile(r"Consult (/\S+/make\.log)")
DPKG_UNCONFIGURED = re.compile(r"dpkg: error processing package (\S+) \(--configure\)")


def install_failure(lines: list[str]) -> str:
    """One line naming why an apt-get install of the driver failed: DKMS's module build (the kernel
    and the build's log on the node, and the packages dpkg left unconfigured), else apt's last error."""
    text = "\n".join(lines)
    kernel, log = DKMS_BUILD_FAILED.search(text), DKMS_LOG.search(text)
    if kernel:
        left = sorted(set(DPKG_UNCONFIGURED.findall(text)))
        return (
            f"DKMS could not build the NVIDIA kernel module for kernel {kernel.group(1)}: see "
            f"{log.group(1) if log else '/var/lib/dkms/*/*/build/make.log'} on the node"
            + (f"; dpkg left {', '.join(left)} unconfigured" if left else "")
        )
    errors = [line.strip() for line in lines if line.strip().startswith(("E:", "dpkg: error"))]
    said = errors or [line.strip() for line in lines if line.strip()]
    return "apt-get install of the NVIDIA driver failed: " + (said[-1] if said else "no error output")
