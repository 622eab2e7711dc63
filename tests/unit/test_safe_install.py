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
    REJECTED_INFIX,
    Validator,
    candidate_path,
    install_script,
    pending_restart_mark,
    restart_pending_script,
    validate_script,
)
from deploy.operations.upload import Staging, Upload

# A real checker: python's strict JSON parser, as dockerd --validate would refuse bad JSON.
JSON_CHECK = Validator(
    argv=["python3", "-c", "import json,sys; json.load(open(sys.argv[1]))", "{candidate}"], what="a JSON parser"
)


def run_script(path, validator=None):
    return subprocess.run(["sh", "-c", install_script(str(path), validator, None, 5)], capture_output=True, text=True)


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
    assert (
        "systemctl restart"
        not in install_script("/x", None, None, 5).split('[ -n "$unit" ] || { finished; exit 0; }')[0]
    )
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
    assert script.index('mv -f "$pending.new" "$pending"') < script.index('mv -f "$candidate" "$dest"')
    assert script.index("restarted $unit: active") > script.index('rm -f "$pending"')
    assert f"pending={mark}" in script
    restart_only = restart_pending_script("/etc/containerd/config.toml", "containerd", 30)
    assert subprocess.run(["sh", "-n", "-c", restart_only]).returncode == 0
    assert 'rm -f "$pending"' in restart_only and "mv -f" not in restart_only


# --- a swap that cannot finish, flushing, backups kept to a number ------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the script sets root:root, as it does on a node")


def can_mount_privately() -> bool:
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


# The script on a real full disk: a small tmpfs, mounted in a mount namespace of its own (nothing
# is mounted on the machine), filled until ``free`` pages are left, then the script runs there.
FULL_DISK = """set -e
mount -t tmpfs -o size=64k tmpfs "$1"
cd "$1"
printf '{"old": true}\\n' > daemon.json
chmod 600 daemon.json
before=$(sha256sum daemon.json)
{setup}
dd if=/dev/zero of=filler bs=4096 count=$(( $(stat -f -c %a .) - $2 )) 2>/dev/null
set +e
sh -c "$3" 2>"$4/stderr"
echo "status $?"
rm -f filler
ls -A
[ "$(sha256sum daemon.json)" = "$before" ] && echo "live unchanged"
true
"""


def on_a_full_disk(tmp_path, script: str, free_pages: int, setup: str = ":") -> tuple[list[str], str]:
    if not can_mount_privately():
        pytest.skip("needs `unshare --mount` (root with CAP_SYS_ADMIN) for a full disk of its own")
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    wrapper = FULL_DISK.replace("{setup}", setup)
    result = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            wrapper,
            "sh",
            str(mountpoint),
            str(free_pages),
            script,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines(), (tmp_path / "stderr").read_text()


@needs_root
def test_a_backup_the_disk_has_no_room_for_leaves_nothing_behind_and_the_live_file_as_it_was(tmp_path):
    """The candidate fits, its backup does not: before, a 0-byte backup and the candidate stayed."""
    script = install_script(str(tmp_path / "disk" / "daemon.json"), None, None, 5)
    lines, stderr = on_a_full_disk(
        tmp_path, script, free_pages=0, setup="""printf '{"new": true}\\n' > daemon.json.gpu-node-candidate"""
    )
    assert "status 1" in lines, (lines, stderr)
    assert [line for line in lines if line.startswith("daemon.json")] == ["daemon.json"], lines
    assert "live unchanged" in lines
    (line,) = stderr.splitlines()
    assert line.startswith(f"gpu-node: could not back up {tmp_path}/disk/daemon.json: ")
    assert "No space left on device" in line and line.endswith("daemon.json was not changed")


@needs_root
def test_a_candidate_the_disk_has_no_room_for_leaves_nothing_behind_and_the_live_file_as_it_was(tmp_path):
    live = str(tmp_path / "disk" / "daemon.json")
    staging = Staging(
        str(tmp_path / "pyinfra-gpu-node-test"), (Upload(candidate_path(live), b'{"new": true}\n', live),)
    )
    os.mkdir(staging.folder, 0o700)
    (tmp_path / "pyinfra-gpu-node-test" / "0").write_bytes(b'{"new": true}\n')
    script = install_script(live, None, None, 5, placed=staging.place_script())
    lines, stderr = on_a_full_disk(tmp_path, script, free_pages=0)
    assert "status 1" in lines, (lines, stderr)
    assert [line for line in lines if line.startswith("daemon.json")] == ["daemon.json"], lines
    assert "live unchanged" in lines
    (line,) = stderr.splitlines()
    assert line.startswith(f"gpu-node: could not write {live}.gpu-node-candidate: ")
    assert "No space left on device" in line and line.endswith(f"{live} was not changed")
    assert not os.path.exists(staging.folder)


@needs_root
def test_the_candidate_is_flushed_before_the_rename_and_the_folder_after_it(tmp_path):
    """A `sync` first on PATH logs what it was given and whether the swap had happened yet."""
    live = tmp_path / "daemon.json"
    live.write_text('{"old": true}\n')
    (tmp_path / "daemon.json.gpu-node-candidate").write_text('{"new": true}\n')
    tools = tmp_path / "tools"
    tools.mkdir()
    log = tmp_path / "sync.log"
    (tools / "sync").write_text(f"""#!/bin/sh
case "$1" in --help) exec /bin/sync --help ;; esac
shift  # the --
for f in "$@"; do
    printf '%s %s\\n' "$f" "$(cat {live} 2>/dev/null | tr -d '\\n')" >> {log}
done
exec /bin/sync "$@"
""")
    (tools / "sync").chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["sh", "-c", install_script(str(live), None, None, 5)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    (backup,) = tmp_path.glob(f"daemon.json{BACKUP_INFIX}*")
    assert log.read_text().splitlines() == [
        f'{tmp_path}/daemon.json.gpu-node-candidate {{"old": true}}',  # before the rename
        f'{backup} {{"old": true}}',
        f'{tmp_path} {{"new": true}}',  # the folder, after it
    ]


@needs_root
def test_backups_and_rejected_versions_beyond_the_kept_number_go_oldest_first(tmp_path):
    live = tmp_path / "config.toml"
    live.write_text("version = 2\n")
    old = [f"config.toml{BACKUP_INFIX}2024010{day}T000000" for day in range(1, 8)]
    rejected = [f"config.toml{REJECTED_INFIX}2024010{day}T000000" for day in range(1, 6)]
    for name in old + rejected:
        (tmp_path / name).write_text("old\n")
    (tmp_path / "config.toml.gpu-node-candidate").write_text("version = 3\n")
    result = subprocess.run(
        ["sh", "-c", install_script(str(live), None, None, 5, keep_backups=3)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    backups = sorted(p.name for p in tmp_path.glob(f"config.toml{BACKUP_INFIX}*"))
    assert backups[:2] == old[-2:] and len(backups) == 3  # the two newest old ones and this run's
    assert (tmp_path / backups[-1]).read_text() == "version = 2\n"
    assert sorted(p.name for p in tmp_path.glob(f"config.toml{REJECTED_INFIX}*")) == rejected[-3:]


@needs_root
@pytest.mark.parametrize("left_by_an_interrupted_run", [True, False])
def test_a_swap_that_cannot_flush_is_undone_and_keeps_only_a_mark_an_interrupted_run_left(
    tmp_path, left_by_an_interrupted_run
):
    """The mark says a restart is due for what an interrupted run installed: still true when this
    swap is undone; a mark this swap wrote goes with it. A `sync` first on PATH fails as a dying
    disk's fsync does."""
    live = tmp_path / "config.toml"
    live.write_text("version = 2\n")
    (tmp_path / "config.toml.gpu-node-candidate").write_text("version = 3\n")
    pending = tmp_path / "pending"
    if left_by_an_interrupted_run:
        pending.mkdir()
        (pending / "containerd").write_text(f"{live}\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "sync").write_text(
        '#!/bin/sh\n[ "$1" = --help ] && exec /bin/sync --help\n'
        'echo "sync: error syncing: Input/output error" >&2; exit 1\n'
    )
    (tools / "sync").chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    script = install_script(str(live), None, "containerd", 5, pending_dir=str(pending))
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"gpu-node: could not flush {live}.gpu-node-candidate to disk: sync: error syncing: Input/output error; "
        f"{live} was not changed"
    ]
    assert sorted(p.name for p in tmp_path.glob("config.toml*")) == ["config.toml"]
    assert live.read_text() == "version = 2\n"
    assert (pending / "containerd").exists() is left_by_an_interrupted_run
