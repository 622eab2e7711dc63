"""
The safe install's remote script, run for real by sh on this machine against files in a temporary
directory (no service: restarts and rollbacks are proven on real node containers in
tests/e2e/test_containerd_e2e.py).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from deploy.operations.safe_install import (
    BACKUP_INFIX,
    Validator,
    candidate_path,
    install_script,
    pending_restart_mark,
    restart_pending_script,
    validate_script,
)

# A real checker: python's strict JSON parser, as dockerd --validate would refuse bad JSON.
JSON_CHECK = Validator(argv=["python3", "-c", "import json,sys; json.load(open(sys.argv[1]))", "{candidate}"],
                       what="a JSON parser")


def run_script(path, validator=None):
    return subprocess.run(["sh", "-c", install_script(str(path), validator, None, 5)],
                          capture_output=True, text=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the script sets root:root, as it does on a node")
def test_good_candidate_replaces_the_file_atomically_with_a_backup(tmp_path):
    live = tmp_path / "daemon.json"
    live.write_text('{"old": true}\n')
    os.chmod(live, 0o600)
    candidate = tmp_path / "daemon.json.gpu-node-candidate"
    candidate.write_text('{"new": true}\n')
    result = run_script(live, JSON_CHECK)
    assert result.returncode == 0, result.stderr
    assert live.read_text() == '{"new": true}\n'
    # A live file that others could not read stays so (it may hold credentials).
    assert oct(live.stat().st_mode & 0o777) == "0o600" and (live.stat().st_uid, live.stat().st_gid) == (0, 0)
    backups = list(tmp_path.glob(f"daemon.json{BACKUP_INFIX}*"))
    assert len(backups) == 1 and backups[0].read_text() == '{"old": true}\n'
    assert oct(backups[0].stat().st_mode & 0o777) == "0o600"
    assert not candidate.exists()
    assert f"previous version kept as {backups[0]}" in result.stdout


def test_rejected_candidate_leaves_the_live_file_untouched(tmp_path):
    live = tmp_path / "daemon.json"
    live.write_text('{"old": true}\n')
    before = live.stat()
    (tmp_path / "daemon.json.gpu-node-candidate").write_text('{"new": \n')
    result = run_script(live, JSON_CHECK)
    assert result.returncode == 1
    assert f"gpu-node: {live} was not changed: a JSON parser rejected the new version:" in result.stderr
    assert "JSONDecodeError" in result.stderr  # the checker's own error is shown
    assert live.read_text() == '{"old": true}\n' and live.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the script sets root:root, as it does on a node")
def test_a_missing_file_is_created_without_a_backup(tmp_path):
    live = tmp_path / "config.toml"
    (tmp_path / "config.toml.gpu-node-candidate").write_text("version = 2\n")
    result = run_script(live)
    assert result.returncode == 0, result.stderr
    assert live.read_text() == "version = 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_paths_with_spaces_and_quotes_are_quoted(tmp_path):
    odd = tmp_path / "it's a dir"
    odd.mkdir()
    live = odd / "daemon.json"
    live.write_text("{}\n")
    (odd / "daemon.json.gpu-node-candidate").write_text("{]\n")
    result = run_script(live, JSON_CHECK)
    assert result.returncode == 1 and live.read_text() == "{}\n"


def test_candidate_sits_next_to_the_live_file():
    assert candidate_path("/etc/containerd/config.toml") == "/etc/containerd/config.toml.gpu-node-candidate"


def test_script_restarts_and_rolls_back_only_with_a_service():
    assert "systemctl restart" not in install_script("/x", None, None, 5).split("[ -n \"$unit\" ] || exit 0")[0]
    script = install_script("/etc/docker/daemon.json", None, "docker", 17)
    assert "unit=docker" in script and "timeout=17" in script
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the script sets root:root, as it does on a node")
def test_a_readable_config_becomes_0644_and_its_backup_0600(tmp_path):
    live = tmp_path / "config.toml"
    live.write_text("version = 2\n")
    os.chmod(live, 0o664)
    (tmp_path / "config.toml.gpu-node-candidate").write_text("version = 3\n")
    result = run_script(live)
    assert result.returncode == 0, result.stderr
    assert oct(live.stat().st_mode & 0o777) == "0o644"
    (backup,) = tmp_path.glob(f"config.toml{BACKUP_INFIX}*")
    assert oct(backup.stat().st_mode & 0o777) == "0o600" and backup.read_text() == "version = 2\n"


def test_validation_runs_alone_when_a_drain_waits_between_check_and_swap(tmp_path):
    live = tmp_path / "daemon.json"
    live.write_text("{}\n")
    candidate = tmp_path / "daemon.json.gpu-node-candidate"
    candidate.write_text('{"ok": true}\n')
    script = validate_script(str(live), JSON_CHECK)
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # Checked and removed (a failing drain must leave nothing behind); nothing swapped yet.
    assert live.read_text() == "{}\n" and not candidate.exists()
    candidate.write_text("{]\n")
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert result.returncode == 1 and not candidate.exists() and live.read_text() == "{}\n"


def test_scripts_with_a_service_are_valid_shell_and_keep_the_pending_mark_until_active():
    script = install_script("/etc/containerd/config.toml", None, "containerd", 30)
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0
    mark = pending_restart_mark("containerd")
    # The mark is written before the swap and removed only after the unit is active.
    assert script.index('>"$pending"') < script.index('mv -f "$candidate" "$dest"')
    assert script.index('restarted $unit: active') > script.index('rm -f "$pending"')
    assert f"pending={mark}" in script
    restart_only = restart_pending_script("/etc/containerd/config.toml", "containerd", 30)
    assert subprocess.run(["sh", "-n", "-c", restart_only]).returncode == 0
    assert 'rm -f "$pending"' in restart_only and "mv -f" not in restart_only
