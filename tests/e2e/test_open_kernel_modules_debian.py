"""
The open kernel modules on a real bookworm node container, from Debian's real archive.

bookworm's security archive has nvidia-driver 535.309.01 while contrib's nvidia-open-kernel-dkms
exists only at 535.261.03, so the open flavour pins the driver and the open module to 535.261.03
together. That open module does not build against bookworm's current kernel (6.1.0-56): the
kernel's pci_resize_resource() gained an argument in a stable update, and only 535.309.01's
conftest knows it (the proprietary 535.261.03 module does not call it). So on bookworm the run
must fail with one line naming the DKMS build failure and its log, never leave the half-configured
packages behind silently. No GPU here, and nothing is loaded: DKMS only compiles.
"""

from __future__ import annotations

STAGES = {"stages": "kernel,driver"}


def versions(node, *packages: str) -> dict[str, str]:
    """package -> "version status" as dpkg has it (status: installed, half-configured, unpacked...)."""
    out = node.sh("dpkg-query -W -f '${Package}|${Version}|${db:Status-Status}\\n' " + " ".join(packages)
                  + " 2>/dev/null || true").stdout
    return {name: f"{version} {status}" for name, version, status in (line.split("|") for line in out.splitlines())
            if status != "not-installed"}


def test_open_flavour_on_bookworm_fails_with_one_line_naming_the_dkms_build_failure_and_its_log(node):
    result = node.deploy(data={**STAGES, "nvidia_kernel_modules": "open"}, json_output=False)
    assert result.returncode != 0
    assert "Traceback" not in result.output
    lines = [line.strip() for line in result.output.splitlines() if "gpu-node:" in line and "DKMS" in line]
    assert len(lines) == 1, result.output[-4000:]
    line = lines[0]
    assert "DKMS could not build the NVIDIA kernel module for kernel 6.1.0-" in line, line
    assert "nvidia-open-kernel-dkms" in line, line
    log = line.split(" see ", 1)[1].split(" on the node", 1)[0]
    assert log.startswith("/var/lib/dkms/nvidia-current-open/535.261.03/") and log.endswith("/make.log"), line
    # the log it names is there and holds the compiler's error
    assert "error:" in node.sh(f"cat {log}").stdout
    # the pinned version was the one both packages have: the driver was not taken from the security archive
    found = versions(node, "nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-kernel-dkms")
    assert found["nvidia-open-kernel-dkms"].startswith("535.261.03-1 ") and found["nvidia-driver"].startswith("535.261.03-1 ")
    assert "nvidia-kernel-dkms" not in found
