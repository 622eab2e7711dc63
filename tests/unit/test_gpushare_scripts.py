"""
The shell scripts the gpushare operations send, run for real here with bash in a temporary
folder: the static pod swap (backup, move in, bounded wait, restore) and the checked download
of kubectl-inspect-gpushare.

No cluster exists here: the swap talks to a kubectl stand-in that answers as a kubelet would
(the scheduler's mirror pod carries the annotations of whatever manifest is in place, Ready
or never Ready); everything else (files, checksums, moves, timing) is real.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
import standin_toolkit
from toolkit_repo import serve

from deploy.k8s.gpushare import edit_scheduler_manifest
from deploy.operations.download import checked_download_command
from deploy.operations.scheduler_manifest import staging_paths, swap_in_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpushare"
SCHEDULER_POD = (FIXTURES / "kube-scheduler-static-pod.yaml").read_text()
CONFIG = "/etc/kubernetes/gpushare/scheduler-config.yaml"
DIGEST = "0123456789abcdef" * 4

KUBECTL_STAND_IN = """#!/bin/bash
# kubectl stand-in: the kube-scheduler mirror pod as the kubelet would report it for the
# manifest now in $MANIFEST; $READY says whether the new scheduler ever becomes Ready.
echo "$*" >> "$KUBECTL_LOG"
if grep -q "$DIGEST" "$MANIFEST"; then
  echo "new-hash $DIGEST $READY"
else
  echo "old-hash <no value> True"
fi
"""


def run_script(command, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command.get_raw_value()],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


@pytest.fixture
def control_plane(tmp_path):
    """A manifests folder with the kube-scheduler static pod, a staging folder, a kubectl stand-in on PATH."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    manifest = manifests / "kube-scheduler.yaml"
    manifest.write_text(SCHEDULER_POD)
    manifest.chmod(0o600)
    work = tmp_path / "gpushare" / "staging"
    work.mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "kubectl"
    stand_in.write_text(KUBECTL_STAND_IN)
    stand_in.chmod(0o755)
    edited = edit_scheduler_manifest(SCHEDULER_POD, CONFIG, DIGEST)
    Path(staging_paths(str(work))["staged"]).write_text(edited)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MANIFEST": str(manifest),
        "DIGEST": DIGEST,
        "KUBECTL_LOG": str(tmp_path / "kubectl.log"),
    }
    return {"manifest": manifest, "work": work, "edited": edited, "env": env, "tmp": tmp_path}


def swap(
    control_plane, ready: str, timeout: int = 30, staged_sha256: str | None = None, config_path: str | None = None
):
    command = swap_in_command(
        manifest_path=str(control_plane["manifest"]),
        work_dir=str(control_plane["work"]),
        staged_sha256=staged_sha256 or hashlib.sha256(control_plane["edited"].encode()).hexdigest(),
        config_sha256=DIGEST,
        kubeconfig="/etc/kubernetes/admin.conf",
        pod_name="kube-scheduler-cp1",
        timeout=timeout,
        config_path=config_path,
    )
    return run_script(command, {**control_plane["env"], "READY": ready})


def test_swap_moves_the_validated_copy_in_and_reports_the_healthy_scheduler(control_plane):
    result = swap(control_plane, ready="True")
    assert result.returncode == 0, result.stderr
    assert "kube-scheduler-cp1 is Ready with the gpushare scheduler config" in result.stdout
    manifest = control_plane["manifest"]
    assert manifest.read_text() == control_plane["edited"]
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o600  # the manifest's own mode kept
    paths = staging_paths(str(control_plane["work"]))
    assert Path(paths["backup"]).read_text() == SCHEDULER_POD
    assert Path(paths["original"]).read_text() == SCHEDULER_POD
    assert not Path(paths["staged"]).exists()
    # Nothing was ever written into the manifests folder but the manifest itself.
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["kube-scheduler.yaml"]
    log = (control_plane["tmp"] / "kubectl.log").read_text()
    assert "-n kube-system get pod kube-scheduler-cp1" in log


def test_swap_restores_the_backup_when_the_scheduler_never_becomes_ready(control_plane):
    started = time.monotonic()
    result = swap(control_plane, ready="False", timeout=2)
    assert time.monotonic() - started < 20  # bounded
    assert result.returncode == 1
    assert "was not Ready with the new manifest within 2s: restored" in result.stderr
    assert control_plane["manifest"].read_text() == SCHEDULER_POD
    assert sorted(p.name for p in control_plane["manifest"].parent.iterdir()) == ["kube-scheduler.yaml"]


@pytest.mark.parametrize("ready", ["True", "False"])
def test_the_config_kept_before_a_new_one_goes_back_with_the_manifest_or_is_dropped(control_plane, ready):
    """The scheduler config the running scheduler loads was kept (keep_scheduler_config) before the
    new one was written: a rollback puts it back with the manifest, which loads it again (the real
    scheduler would otherwise restart on the refused config); a Ready scheduler drops the copy."""
    config = control_plane["tmp"] / "gpushare" / "scheduler-config.yaml"
    config.write_text("the new config\n")
    kept = Path(staging_paths(str(control_plane["work"]))["config_backup"])
    kept.write_text("the config the scheduler ran with\n")
    result = swap(control_plane, ready=ready, timeout=2, config_path=str(config))
    assert result.returncode == (0 if ready == "True" else 1), result.stderr
    assert config.read_text() == ("the new config\n" if ready == "True" else "the config the scheduler ran with\n")
    assert not kept.exists()
    assert sorted(p.name for p in control_plane["work"].iterdir() if "restore" in p.name) == []


def test_swap_refuses_a_staged_copy_that_is_not_the_validated_one(control_plane):
    result = swap(control_plane, ready="True", staged_sha256="f" * 64)
    assert result.returncode == 1
    assert "is not the validated copy: not moved in" in result.stderr
    assert control_plane["manifest"].read_text() == SCHEDULER_POD
    assert not (control_plane["tmp"] / "kubectl.log").exists()


@pytest.fixture
def release(tmp_path):
    """A local file standing in for the kubectl-inspect-gpushare release, served on 127.0.0.1;
    yields (its bytes, its URL)."""
    folder = tmp_path / "release"
    folder.mkdir()
    content = b"#!/bin/sh\necho inspect stand-in\n"
    (folder / "kubectl-inspect-gpushare").write_bytes(content)
    with serve(folder) as base:
        yield content, f"{base}/kubectl-inspect-gpushare"


def test_checked_download_installs_a_matching_file_executable(tmp_path, release):
    content, url = release
    dest = tmp_path / "bin" / "kubectl-inspect-gpushare"
    sha = hashlib.sha256(content).hexdigest()
    result = run_script(checked_download_command(url, str(dest), sha, 5), {})
    assert result.returncode == 0, result.stderr
    assert not dest.is_symlink() and dest.read_bytes() == content
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert sorted(p.name for p in dest.parent.iterdir()) == ["kubectl-inspect-gpushare"]


def test_checked_download_refuses_a_checksum_mismatch_and_installs_nothing(tmp_path, release):
    content, url = release
    dest = tmp_path / "bin" / "kubectl-inspect-gpushare"
    wrong = "0" * 64
    result = run_script(checked_download_command(url, str(dest), wrong, 5), {})
    assert result.returncode == 1
    actual = hashlib.sha256(content).hexdigest()
    assert f"the pinned SHA-256 is {wrong}, the download's is {actual}" in result.stderr
    assert list(dest.parent.iterdir()) == []  # no binary, no temporary file left


def test_checked_download_keeps_an_installed_file_when_the_new_one_mismatches(tmp_path, release):
    _, url = release
    dest = tmp_path / "bin" / "kubectl-inspect-gpushare"
    dest.parent.mkdir()
    dest.write_bytes(b"previous\n")
    result = run_script(checked_download_command(url, str(dest), "0" * 64, 5), {})
    assert result.returncode == 1
    assert dest.read_bytes() == b"previous\n"


def test_checked_download_from_a_server_that_never_answers_fails_within_the_timeout_naming_the_url(tmp_path):
    dest = tmp_path / "bin" / "kubectl-inspect-gpushare"
    with standin_toolkit.silent_server() as base:
        started = time.monotonic()
        result = run_script(checked_download_command(f"{base}/kubectl-inspect-gpushare", str(dest), "0" * 64, 1), {})
        elapsed = time.monotonic() - started
    assert result.returncode == 1 and elapsed < 30
    assert f"could not download {base}/kubectl-inspect-gpushare (timeout 1 s)" in result.stderr
    assert list(dest.parent.iterdir()) == []
