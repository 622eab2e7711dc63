"""
The apt source transaction: the commands it builds, and its shell run for real on this
machine against key servers on 127.0.0.1 (tests/standin_toolkit.py).

Where the transaction would reach apt-get (which would touch this machine's apt lists), a
guard on PATH stands in for it and records the call instead; nothing else is replaced.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import standin_toolkit
from plan import run_plan
from pyinfra.api import deploy

from deploy.operations.download import (
    STAGED_SUFFIX,
    commit_staged_source,
    signed_apt_source,
    source_read,
    stage_verified_source,
)


# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

SOURCE = "/etc/apt/sources.list.d/example.list"
KEYRING = "/usr/share/keyrings/example.asc"
KEY_URL = "https://mirror.example.internal/gpgkey"
REPO = "https://mirror.example.internal/deb"
CONTENT = f"deb [signed-by={KEYRING}] {REPO} /\n"


@deploy("source")
def source(**kwargs):
    signed_apt_source(name="Add the example source", path=SOURCE, content=CONTENT, keyring=KEYRING,
                      key_url=KEY_URL, repository=REPO, lock_timeout=120, timeout=30, **kwargs)


def digests(source_text=CONTENT, source_mode="644", key_present=True):
    digest = hashlib.sha256(source_text.encode()).hexdigest()
    lines = [f"@@file {SOURCE}", f"{source_mode} root:root", f"{digest}  {SOURCE}", f"@@file {KEYRING}"]
    lines += ["644 root:root", f"{'0' * 64}  {KEYRING}"] if key_present else ["absent"]
    return [(source_read(SOURCE, KEYRING), lines)]


# Command construction


def test_every_download_tool_is_bounded_by_the_timeout_and_apt_does_not_retry():
    command = stage_verified_source(SOURCE, CONTENT, KEYRING, KEY_URL, REPO, timeout=7, lock_timeout=120).get_raw_value()
    assert "apt-helper -o Acquire::http::Timeout=7 -o Acquire::https::Timeout=7 -o Acquire::Retries=0 download-file" in command
    assert "curl -fsSL --connect-timeout 7 --max-time 7" in command
    assert "wget -q -T 7 -t 1" in command
    assert f"could not download the signing key {KEY_URL}" in command


def test_the_trial_refresh_reads_only_the_new_source_keeps_other_lists_and_fails_on_any_error():
    command = stage_verified_source(SOURCE, CONTENT, KEYRING, KEY_URL, REPO, timeout=9, lock_timeout=120).get_raw_value()
    update = next(line for line in command.splitlines() if line.startswith("apt-get update"))
    for option in ('Dir::Etc::SourceList="$stage/trial.list"', 'Dir::Etc::SourceParts="$stage/parts"',
                   "APT::Get::List-Cleanup=0", "APT::Update::Error-Mode=any",
                   "Acquire::http::Timeout=9", "Acquire::https::Timeout=9", "Acquire::Retries=0", "DPkg::Lock::Timeout="):
        assert option in update
    # The staged files are written only after apt's verdict, and nothing touches the targets.
    assert command.index("apt-get update") < command.index(f"{KEYRING}{STAGED_SUFFIX}")
    assert f" {KEYRING} " not in command + " " and f">{SOURCE} " not in command + " "


def test_the_commit_renames_the_keyring_before_the_source_that_names_it():
    command = commit_staged_source(SOURCE, KEYRING).get_raw_value()
    assert command.index(f"mv -f {KEYRING}{STAGED_SUFFIX} {KEYRING}") < command.index(
        f"mv -f {SOURCE}{STAGED_SUFFIX} {SOURCE}")


def test_a_new_source_is_staged_verified_then_committed():
    plan = run_plan(source, facts=[(source_read(SOURCE, KEYRING), ["@@file " + SOURCE, "absent", "@@file " + KEYRING, "absent"])])
    staged = plan.matching("download-file")
    commit = plan.starting("chown root:root " + KEYRING + STAGED_SUFFIX)
    assert len(staged) == 1 and KEY_URL in staged[0] and len(commit) == 1
    assert plan.commands.index(staged[0]) < plan.commands.index(commit[0])


def test_source_and_key_in_place_is_the_one_read():
    plan = run_plan(source, facts=digests())
    assert len(plan.commands) == 1 and plan.commands[0].startswith("echo '@@file")


def test_only_a_wrong_mode_is_repaired_without_any_download():
    plan = run_plan(source, facts=digests(source_mode="600"))
    assert plan.starting("chown root:root " + SOURCE) and not plan.ran("download-file")


def test_a_source_that_does_not_name_its_keyring_is_refused():
    @deploy("bad")
    def bad():
        signed_apt_source(name="Add", path=SOURCE, content=f"deb {REPO} /\n", keyring=KEYRING, key_url=KEY_URL,
                          lock_timeout=120, timeout=30)

    with pytest.raises(Exception, match="signed-by="):
        run_plan(bad)


def test_a_keyring_that_is_not_armoured_is_refused():
    @deploy("bad")
    def bad():
        keyring = "/usr/share/keyrings/example.gpg"
        signed_apt_source(name="Add", path=SOURCE, content=f"deb [signed-by={keyring}] {REPO} /\n",
                          keyring=keyring, key_url=KEY_URL, lock_timeout=120, timeout=30)

    with pytest.raises(Exception, match="must end in .asc"):
        run_plan(bad)


# The shell, run for real against 127.0.0.1


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Key files served on 127.0.0.1: an armoured key, a binary one, an HTML page, an empty body."""
    root = tmp_path_factory.mktemp("keys")
    home = tmp_path_factory.mktemp("gnupg")
    key = standin_toolkit.make_key(home / "k", "download-test")
    (root / "armored").write_text(key.armored_public_key())
    binary = subprocess.run(["gpg", "--homedir", str(key.home), "--export", key.fingerprint],
                            capture_output=True, check=True).stdout
    (root / "binary").write_bytes(binary)
    (root / "html").write_text(standin_toolkit.GARBAGE_KEY_PAGE)
    (root / "empty").write_text("")
    subprocess.run(["gpgconf", "--homedir", str(key.home), "--kill", "gpg-agent"], check=False)
    with standin_toolkit.serve(root) as url:
        yield url, key


def run_shell(command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def apt_guard(tmp_path):
    """An apt-get first on PATH that copies what it was given and fails: this machine's apt is never touched."""
    folder = tmp_path / "guard"
    folder.mkdir()
    (folder / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {folder}/called\n'
        'for arg; do case "$arg" in Dir::Etc::SourceList=*) stage=$(dirname "${arg#*=}");; esac; done\n'
        f'cp "$stage/trial.list" {folder}/trial.list; cp "$stage"/keyring.* {folder}/\n'
        "echo 'E: stopped by the test guard'; exit 100\n"
    )
    (folder / "apt-get").chmod(0o755)
    return folder


def staged_run(url: str, key: str, tmp_path: Path, apt_guard: Path, timeout: int = 5,
               without_apt_helper: bool = False) -> subprocess.CompletedProcess:
    source, keyring = tmp_path / "etc" / "example.list", tmp_path / "keyrings" / "example.asc"
    content = f"deb [signed-by={keyring}] {url}/repo /\n"
    command = stage_verified_source(str(source), content, str(keyring), f"{url}/{key}", f"{url}/repo", timeout,
                                    lock_timeout=120)
    script = command.get_raw_value()
    if without_apt_helper:  # the branch a host without apt's helper takes
        script = script.replace("[ -x /usr/lib/apt/apt-helper ]", "false")
    return run_shell(script, env={"PATH": f"{apt_guard}:{os.environ['PATH']}"})


def assert_nothing_staged(tmp_path: Path, apt_guard: Path) -> None:
    assert not (apt_guard / "called").exists(), "apt must not run without a key"
    assert not (tmp_path / "etc").exists() and not (tmp_path / "keyrings").exists()


def test_a_refused_key_url_fails_naming_it(tmp_path, apt_guard):
    base = standin_toolkit.refused_url()
    result = staged_run(base, "gpgkey", tmp_path, apt_guard)
    assert result.returncode == 1
    assert f"could not download the signing key {base}/gpgkey (timeout 5 s)" in result.stderr
    assert "Connection refused" in result.stderr
    assert_nothing_staged(tmp_path, apt_guard)


@pytest.mark.parametrize("without_apt_helper", [False, True], ids=["apt-helper", "curl"])
def test_a_key_server_that_never_answers_fails_naming_the_url(tmp_path, apt_guard, without_apt_helper):
    with standin_toolkit.silent_server() as base:
        result = staged_run(base, "gpgkey", tmp_path, apt_guard, timeout=1, without_apt_helper=without_apt_helper)
    assert result.returncode == 1
    assert f"could not download the signing key {base}/gpgkey (timeout 1 s)" in result.stderr
    assert_nothing_staged(tmp_path, apt_guard)


@pytest.mark.parametrize("served_as, says", [("html", "bytes starting <html><head><title>502 Bad Gateway"),
                                             ("empty", "got an empty body")])
def test_a_key_url_that_returns_no_key_fails_before_apt_naming_the_url(served, tmp_path, apt_guard, served_as, says):
    url, _ = served
    result = staged_run(url, served_as, tmp_path, apt_guard)
    assert result.returncode == 1
    assert f"{url}/{served_as} did not return an OpenPGP public key" in result.stderr and says in result.stderr
    assert_nothing_staged(tmp_path, apt_guard)


@pytest.mark.parametrize("served_as", ["armored", "binary"])
def test_a_real_key_reaches_apt_signed_by_the_staged_keyring_and_apts_refusal_names_the_repository(
    served, tmp_path, apt_guard, served_as
):
    url, key = served
    result = staged_run(url, served_as, tmp_path, apt_guard)
    assert result.returncode == 1
    assert f"apt could not fetch or verify the repository {url}/repo" in result.stderr
    assert "E: stopped by the test guard" in result.stderr
    trial = (apt_guard / "trial.list").read_text()
    assert trial.startswith("deb [signed-by=/") and "/keyring.asc]" in trial and f"{url}/repo /" in trial
    # A binary key is armoured for the .asc keyring: gpg reads the same fingerprint from it.
    shown = subprocess.run(["gpg", "--homedir", str(key.home), "--show-keys", "--with-colons",
                            str(apt_guard / "keyring.asc")],
                           capture_output=True, text=True, check=True).stdout
    assert key.fingerprint in shown
    assert not (tmp_path / "etc").exists() and not (tmp_path / "keyrings").exists()
