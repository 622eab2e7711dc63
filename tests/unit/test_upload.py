"""
deploy/operations/upload.py, the one way gpu-node puts bytes on a node: the login user's part
(a private folder, empty 0600 files) and root's part (each copy 0600 from its first byte, a
symbolic link refused, a failed copy undone) run for real by sh here; the connector arguments
each command is given, recorded from a plan run with ``_sudo`` (pyinfra's @fake connector ignores
them, as it ignores where an upload goes).

Before this module, an upload under ``--sudo`` went to ``/tmp/pyinfra-<sha1 of the destination>``
as the login user (0644, a name anyone can compute) and was then ``sudo cp``ed.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import subprocess

import pytest
from plan import run_plan, staged_uploads
from pyinfra.api import deploy
from pyinfra.connectors.fake import FakeConnector

from deploy.operations.files import digest_read, put_text
from deploy.operations.upload import STAGING_PREFIX, Staging, Upload

DEST = "/etc/containerd/certs.d/r.example/hosts.toml"
SECRET = b'[host."https://r.example".header]\n  Authorization = ["Basic Ym9iOnMzY3IzdA=="]\n'


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


class Recorded:
    """What a plan run asked of the connector: each command and upload with its connector arguments."""

    def __init__(self, monkeypatch):
        self.commands: list[tuple[str, dict]] = []
        self.uploads: list[tuple[str, bytes, dict]] = []
        original = FakeConnector.run_shell_command

        def run_shell_command(connector, command, print_output=False, print_input=False, **arguments):
            text = command if isinstance(command, str) else command.get_raw_value()
            self.commands.append((text, arguments))
            return original(connector, command, print_output, print_input, **arguments)

        def put_file(connector, filename_or_io, remote_filename, remote_temp_filename=None, *args, **arguments):
            filename_or_io.seek(0)
            self.uploads.append((remote_filename, filename_or_io.read(), arguments))
            return True

        monkeypatch.setattr(FakeConnector, "run_shell_command", run_shell_command)
        monkeypatch.setattr(FakeConnector, "put_file", put_file)


@deploy("put")
def put_secret():
    put_text(name="Put hosts.toml", dest=DEST, content=SECRET.decode(), mode="600")


def test_under_sudo_the_bytes_go_as_the_login_user_into_a_private_folder_never_a_name_made_from_the_destination(
    monkeypatch,
):
    recorded = Recorded(monkeypatch)
    plan = run_plan(put_secret, facts=[(digest_read(DEST), "absent")], _sudo=True)
    assert not plan.failed
    ((remote, content, arguments),) = recorded.uploads
    assert (content.encode() if isinstance(content, str) else content) == SECRET
    # pyinfra's own name for a --sudo upload of DEST: readable by others, at a name anyone computes
    assert os.path.basename(remote) != "pyinfra-" + hashlib.sha1(DEST.encode()).hexdigest()
    folder = os.path.dirname(remote)
    assert os.path.basename(folder).startswith("pyinfra-" + STAGING_PREFIX)
    assert not arguments.get("_sudo") and not arguments.get("_su_user")  # SFTP as the login user: no `sudo cp`
    ((made, made_arguments),) = [(text, args) for text, args in recorded.commands if f"mkdir -m 700 {folder}" in text]
    assert not made_arguments.get("_sudo") and f": > {remote}" in made
    ((placed, placed_arguments),) = [
        (text, args)
        for text, args in recorded.commands
        if [staged for staged, _path, _live in staged_uploads(text)] == [remote]
    ]
    assert placed_arguments.get("_sudo") is True and "umask 077" in placed


def test_each_run_stages_in_a_folder_of_its_own():
    class Host:
        current_op_global_arguments = {"_sudo": True}

        class state:
            class config:
                TEMP_DIR = None
                DEFAULT_TEMP_DIR = "/tmp"

    uploads = [Upload(DEST + ".gpu-node-candidate", SECRET, DEST)]
    folders = {Staging.new(Host, uploads).folder for _ in range(50)}
    assert len(folders) == 50 and all(folder.startswith("/tmp/pyinfra-gpu-node-") for folder in folders)
    Host.current_op_global_arguments = {"_temp_dir": "/var/tmp/ops"}
    assert Staging.new(Host, uploads).folder.startswith("/var/tmp/ops/pyinfra-gpu-node-")


def login_users_part(staging: Staging) -> None:
    (command, *_uploads) = list(staging.commands())
    subprocess.run(["sh", "-c", command.get_raw_value()], check=True)


def test_the_login_users_folder_is_0700_and_its_files_0600_before_any_byte_arrives(tmp_path):
    staging = Staging(str(tmp_path / "pyinfra-gpu-node-x"), (Upload("/a", b"1"), Upload("/b", b"2")))
    os.umask(0o022)
    login_users_part(staging)
    assert mode(staging.folder) == 0o700
    assert [(mode(staging.staged(i)), os.path.getsize(staging.staged(i))) for i in (0, 1)] == [(0o600, 0), (0o600, 0)]


def stage(tmp_path, live, path, content=SECRET) -> Staging:
    staging = Staging(str(tmp_path / "pyinfra-gpu-node-x"), (Upload(str(path), content, str(live)),))
    login_users_part(staging)
    with open(staging.staged(0), "wb") as upload:  # what SFTP writes into the empty file
        upload.write(content)
    return staging


def run_as_root_would(script: str) -> subprocess.CompletedProcess:
    # a umask that lets others read: the copy must not depend on the caller's
    return subprocess.run(["sh", "-c", "umask 022\n" + script], capture_output=True, text=True)


def test_roots_copy_is_0600_from_its_first_byte_replaces_a_readable_leftover_and_the_folder_goes(tmp_path):
    live = tmp_path / "etc" / "hosts.toml"
    candidate = tmp_path / "etc" / "hosts.toml.gpu-node-candidate"
    candidate.parent.mkdir()
    candidate.write_bytes(b"an older run's copy\n")
    candidate.chmod(0o644)
    staging = stage(tmp_path, live, candidate)
    result = run_as_root_would(staging.place_script() + f"stat -c %a {shlex.quote(str(candidate))}\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "600" and candidate.read_bytes() == SECRET
    assert not os.path.exists(staging.folder)


def test_missing_folders_are_made_and_a_copy_that_fails_removes_every_copy_in_one_line(tmp_path):
    """Two uploads into folders that are not there yet: both made; then a second copy that cannot be
    made (its staged file is gone) takes the first copy with it, in one line naming cp's reason."""
    first, second = tmp_path / "a" / "b" / "one.toml.new", tmp_path / "c" / "two.toml.new"
    staging = Staging(
        str(tmp_path / "pyinfra-gpu-node-x"),
        (Upload(str(first), b"1", str(tmp_path / "a" / "b" / "one.toml")), Upload(str(second), b"2")),
    )
    login_users_part(staging)
    result = run_as_root_would(staging.place_script() + "echo went on\n")
    assert result.returncode == 0 and result.stdout == "went on\n", result.stderr
    assert first.read_bytes() == b"" and second.read_bytes() == b"" and not os.path.exists(staging.folder)
    login_users_part(staging)
    os.unlink(staging.staged(1))
    result = run_as_root_would(staging.place_script() + "echo went on\n")
    assert result.returncode == 1 and result.stdout == "" and not first.exists() and not second.exists()
    assert result.stderr.startswith(f"gpu-node: could not write {second}: cp: ") and result.stderr.count("\n") == 1
    assert result.stderr.endswith(f"; {second} was not changed\n"), result.stderr


def test_a_live_file_that_is_a_symbolic_link_is_refused_in_one_line_and_nothing_moves(tmp_path):
    (tmp_path / "etc").mkdir()
    target = tmp_path / "site" / "hosts.toml"
    target.parent.mkdir()
    target.write_bytes(b"the site's own\n")
    live = tmp_path / "etc" / "hosts.toml"
    live.symlink_to(target)
    candidate = tmp_path / "etc" / "hosts.toml.gpu-node-candidate"
    staging = stage(tmp_path, live, candidate)
    result = run_as_root_would(staging.place_script() + "echo went on\n")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"gpu-node: {live} is a symbolic link (to {target}): not changed; gpu-node renames a new file over the old "
        "one, which would replace the link with a regular file: point its path setting at the file it links to, "
        "or make it a regular file"
    ]
    assert os.readlink(live) == str(target) and target.read_bytes() == b"the site's own\n"
    assert not candidate.exists() and not os.path.exists(staging.folder)


def put_text_script(plan_commands: list[str]) -> str:
    (script,) = [command for command in plan_commands if command.startswith("(staging=")]
    return script


def test_put_text_refuses_a_symbolic_link_and_writes_a_regular_file_through_its_own_swap(tmp_path, monkeypatch):
    """put_text's real script, run on a folder here: the link left alone; a regular file installed."""
    dest = tmp_path / "conf.d" / "k8s.conf"

    @deploy("put")
    def put():
        put_text(name="Put", dest=str(dest), content="overlay\n", owner=f"{os.getuid()}:{os.getgid()}")

    recorded = Recorded(monkeypatch)
    plan = run_plan(put, facts=[(digest_read(str(dest)), "absent")])
    ((remote, content, _),) = recorded.uploads
    script = put_text_script(plan.commands)
    folder = os.path.dirname(remote)

    def staged_again():
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(remote, "wb") as upload:
            upload.write(content)

    dest.parent.mkdir()
    dest.symlink_to("/nonexistent/k8s.conf")
    staged_again()
    refused = run_as_root_would(script)
    assert refused.returncode == 1 and "is a symbolic link (to /nonexistent/k8s.conf)" in refused.stderr
    assert os.readlink(dest) == "/nonexistent/k8s.conf"

    dest.unlink()
    staged_again()
    installed = run_as_root_would(script)
    assert installed.returncode == 0, installed.stderr
    assert dest.read_text() == "overlay\n" and mode(dest) == 0o644 and not dest.is_symlink()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["k8s.conf"] and not os.path.exists(folder)


@pytest.mark.parametrize("_sudo", [True, False])
def test_a_file_already_in_place_costs_one_read_and_no_staging(monkeypatch, _sudo):
    recorded = Recorded(monkeypatch)
    digest = hashlib.sha256(SECRET).hexdigest()
    run_plan(put_secret, facts=[(digest_read(DEST), ["600 root:root", f"{digest}  {DEST}"])], _sudo=_sudo)
    assert recorded.uploads == [] and len(recorded.commands) == 1
