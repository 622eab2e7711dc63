"""Verify's reading of the real `nvidia-ctk --version` (tests/fixtures/nvidia-container-toolkit)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from deploy.facts.verification import VERIFY_SCRIPT, VerifyReadout

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-container-toolkit"
FIXTURE = FIXTURES / "nvidia-ctk-version-1.20.0.txt"


def toolkit_lines_of_the_script() -> str:
    """The verify script's own two toolkit lines (find nvidia-ctk, print its first version line)."""
    lines = [line for line in VERIFY_SCRIPT.splitlines() if "$ctk" in line or line.startswith("ctk=")]
    assert len(lines) == 2, lines
    return "\n".join(lines)


def test_real_nvidia_ctk_1_20_version_output_gives_toolkit_version_1_20_0(tmp_path):
    """The script's lines run by a real shell against an nvidia-ctk that prints the recorded output."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    ctk = fake_bin / "nvidia-ctk"
    ctk.write_text(f"#!/bin/sh\ncat {FIXTURE}\n")
    ctk.chmod(0o755)
    out = subprocess.run(
        ["/bin/sh", "-c", toolkit_lines_of_the_script()],
        env={"PATH": f"{fake_bin}:/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out == "ctk_version NVIDIA Container Toolkit CLI version 1.20.0\n"
    assert VerifyReadout().process(out.splitlines())["toolkit_version"] == "1.20.0"


def test_no_nvidia_ctk_gives_no_toolkit_version(tmp_path):
    # The script's `[ -n "$ctk" ] && ...` is false here (the whole script ends in `true`).
    out = subprocess.run(
        ["/bin/sh", "-c", toolkit_lines_of_the_script()],
        env={"PATH": str(tmp_path)},
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    assert out == ""
    assert VerifyReadout().process(out.splitlines())["toolkit_version"] is None
