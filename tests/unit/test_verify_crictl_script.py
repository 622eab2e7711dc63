"""
The crictl sequence of the verify step, run by a real shell. crictl is in no registry these
machines reach, so a recording `crictl` on the PATH stands in for it (named so): what is tested
is the script's own control flow (order, ids passed along, cleanup, temp files removed), and that
CrictlRun.process reads what it prints. The CRI path itself is proven in tests/e2e/test_verify.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from deploy.facts.verify import CrictlRun

SANDBOX = "3f1a8c2b7d9e4f60a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718"
CONTAINER = "9a8b7c6d5e4f30211a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"

RECORDING_CRICTL = f"""#!/bin/sh
# Recording stand-in for crictl (tests only): log the call, answer like crictl does.
echo "$*" >> "$CRICTL_CALLS"
for arg in "$@"; do
  case "$arg" in
    runp) [ -n "$FAIL_RUNP" ] && {{ echo 'rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" is configured, abcdef0123456789' >&2; exit 1; }}
          cp "$(eval echo \\${{$#}})" "$CRICTL_CALLS.pod.json"; echo {SANDBOX}; exit 0;;
    inspecti) [ -n "$NO_IMAGE" ] && exit 1; exit 0;;
    create) echo {CONTAINER}; exit 0;;
    start) echo {CONTAINER}; exit 0;;
    inspect) echo "CONTAINER_EXITED 0"; exit 0;;
    logs) echo "GPU 0: A100-SXM4-40GB (UUID: GPU-36c9561a-02ef-5c4d-3733-f0a56c42dc45)"; exit 0;;
    rm|stopp|rmp) exit 0;;
  esac
done
exit 2
"""


def run_script(tmp_path: Path, image: str | None, **env: str) -> tuple[dict, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    crictl = bin_dir / "crictl"
    crictl.write_text(RECORDING_CRICTL)
    crictl.chmod(0o755)
    calls = tmp_path / "calls"
    before = set(Path("/tmp").glob("gpu-node-verify.*"))
    script = CrictlRun().command(uid="u1", handler="nvidia", image=image, timeout=5)
    result = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CRICTL_CALLS": str(calls), **env},
    )
    assert result.returncode == 0, result.stderr
    assert set(Path("/tmp").glob("gpu-node-verify.*")) == before, "the script removes its temp files"
    lines = calls.read_text().splitlines() if calls.exists() else []
    return CrictlRun().process(result.stdout.splitlines()), lines


def verbs(calls: list[str]) -> list[str]:
    known = ("runp", "inspecti", "create", "start", "inspect", "logs", "rm", "stopp", "rmp")
    return [next(word for word in call.split() if word in known) for call in calls]


def test_with_an_image_the_sequence_is_runp_create_start_logs_rm_stopp_rmp(tmp_path):
    steps, calls = run_script(tmp_path, "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04")
    assert verbs(calls) == ["runp", "inspecti", "create", "start", "inspect", "logs", "rm", "stopp", "rmp"]
    assert calls[0].startswith("--runtime-endpoint unix:///run/containerd/containerd.sock")
    assert "runp --runtime nvidia" in calls[0]
    assert f"create {SANDBOX} " in calls[2] and calls[3].endswith(f"start {CONTAINER}")
    assert calls[-2].endswith(f"stopp {SANDBOX}") and calls[-1].endswith(f"rmp {SANDBOX}")
    assert steps["runp"] == {"exit_code": 0, "output": SANDBOX}
    assert steps["state"]["output"] == "CONTAINER_EXITED 0"
    assert "GPU-36c9561a" in steps["logs"]["output"]
    pod = json.loads((tmp_path / "calls.pod.json").read_text())
    assert pod["linux"]["security_context"]["namespace_options"]["network"] == 2


def test_without_an_image_only_the_sandbox_runs_and_is_removed(tmp_path):
    steps, calls = run_script(tmp_path, None)
    assert verbs(calls) == ["runp", "stopp", "rmp"]
    assert set(steps) == {"runp", "stopp", "rmp"}


def test_a_missing_image_skips_the_container_but_still_removes_the_sandbox(tmp_path):
    steps, calls = run_script(tmp_path, "x/y:1", NO_IMAGE="1")
    assert verbs(calls) == ["runp", "inspecti", "stopp", "rmp"]
    assert steps["image"]["exit_code"] == 1


def test_a_failed_runp_reports_crictls_message_and_removes_nothing(tmp_path):
    steps, calls = run_script(tmp_path, "x/y:1", FAIL_RUNP="1")
    assert verbs(calls) == ["runp"]
    assert steps["runp"]["exit_code"] == 1
    assert 'no runtime for "nvidia" is configured' in steps["runp"]["output"]
