"""
The apt source and the dnf/zypper repository transactions: the commands they build, and their
shell run for real on this machine (real gpg) against key servers on 127.0.0.1
(tests/standin_toolkit.py).

Where the transaction would reach apt-get (which would touch this machine's apt lists) or rpm and
the repository check (this machine's rpm database), a guard on PATH stands in for it and records
the call instead; nothing else is replaced.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import standin_toolkit
from plan import file_digests_lines, run_plan
from pyinfra.api import deploy

from deploy.facts.files import FileDigests
from deploy.operations.download import (
    PRIMARY_FINGERPRINTS,
    STAGED_SUFFIX,
    commit_staged_source,
    signed_apt_source,
    signed_rpm_repository,
    source_read,
    stage_checked_rpm_repository,
    stage_verified_source,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpg"


# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

SOURCE = "/etc/apt/sources.list.d/example.list"
KEYRING = "/usr/share/keyrings/example.asc"
KEY_URL = "https://mirror.example.internal/gpgkey"
REPO = "https://mirror.example.internal/deb"
CONTENT = f"deb [signed-by={KEYRING}] {REPO} /\n"
PINNED = ("A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699",)  # tests/fixtures/gpg's first key
SETTING = "example_gpgkey_fingerprint"


@deploy("source")
def source(**kwargs):
    kwargs = {"key_url": KEY_URL, "fingerprints": PINNED, **kwargs}
    signed_apt_source(
        name="Add the example source",
        path=SOURCE,
        content=CONTENT,
        keyring=KEYRING,
        fingerprint_setting=SETTING,
        repository=REPO,
        lock_timeout=120,
        timeout=30,
        **kwargs,
    )


def staged(timeout=30) -> str:
    return stage_verified_source(
        SOURCE,
        CONTENT,
        KEYRING,
        KEY_URL,
        REPO,
        timeout=timeout,
        lock_timeout=120,
        fingerprints=PINNED,
        fingerprint_setting=SETTING,
    ).get_raw_value()


def digests(source_text=CONTENT, source_mode="644", key_present=True):
    digest = hashlib.sha256(source_text.encode()).hexdigest()
    key = ["644 root:root", f"{'0' * 64}  {KEYRING}"] if key_present else "absent"
    lines = file_digests_lines({SOURCE: [f"{source_mode} root:root", f"{digest}  {SOURCE}"], KEYRING: key})
    return [(source_read(SOURCE, KEYRING), lines)]


# Command construction


def test_every_download_tool_is_bounded_by_the_timeout_and_apt_does_not_retry():
    command = staged(timeout=7)
    assert (
        "apt-helper -o Acquire::http::Timeout=7 -o Acquire::https::Timeout=7 -o Acquire::Retries=0 download-file"
        in command
    )
    assert "curl -fsSL --connect-timeout 7 --max-time 7" in command
    assert "wget -q -T 7 -t 1" in command
    assert f"could not download the signing key {KEY_URL}" in command


def test_the_trial_refresh_reads_only_the_new_source_keeps_other_lists_and_fails_on_any_error():
    command = staged(timeout=9)
    update = next(line for line in command.splitlines() if line.startswith("apt-get update"))
    for option in (
        'Dir::Etc::SourceList="$stage/trial.list"',
        'Dir::Etc::SourceParts="$stage/parts"',
        "APT::Get::List-Cleanup=0",
        "APT::Update::Error-Mode=any",
        "Acquire::http::Timeout=9",
        "Acquire::https::Timeout=9",
        "Acquire::Retries=0",
        "DPkg::Lock::Timeout=",
    ):
        assert option in update
    # The staged files are written only after apt's verdict, and nothing touches the targets.
    assert command.index("apt-get update") < command.index(f"{KEYRING}{STAGED_SUFFIX}")
    assert f" {KEYRING} " not in command + " " and f">{SOURCE} " not in command + " "


def test_the_commit_renames_the_keyring_before_the_source_that_names_it():
    command = commit_staged_source(SOURCE, KEYRING).get_raw_value()
    assert command.index(f"mv -f {KEYRING}{STAGED_SUFFIX} {KEYRING}") < command.index(
        f"mv -f {SOURCE}{STAGED_SUFFIX} {SOURCE}"
    )


def test_a_new_source_is_staged_verified_then_committed():
    plan = run_plan(
        source, facts=[(source_read(SOURCE, KEYRING), file_digests_lines({SOURCE: "absent", KEYRING: "absent"}))]
    )
    staged = plan.matching("download-file")
    commit = plan.starting("chown root:root " + KEYRING + STAGED_SUFFIX)
    assert len(staged) == 1 and KEY_URL in staged[0] and len(commit) == 1
    assert plan.commands.index(staged[0]) < plan.commands.index(commit[0])


def test_source_and_key_in_place_is_the_one_read():
    plan = run_plan(source, facts=digests())
    assert plan.commands == [FileDigests().command(source_read(SOURCE, KEYRING)[1]["paths"])]


def test_only_a_wrong_mode_is_repaired_without_any_download():
    plan = run_plan(source, facts=digests(source_mode="600"))
    assert plan.starting("chown root:root " + SOURCE) and not plan.ran("download-file")


def test_a_source_that_does_not_name_its_keyring_is_refused():
    @deploy("bad")
    def bad():
        signed_apt_source(
            name="Add",
            path=SOURCE,
            content=f"deb {REPO} /\n",
            keyring=KEYRING,
            key_url=KEY_URL,
            fingerprints=PINNED,
            fingerprint_setting=SETTING,
            lock_timeout=120,
            timeout=30,
        )

    with pytest.raises(Exception, match="signed-by="):
        run_plan(bad)


def test_a_keyring_that_is_not_armoured_is_refused():
    @deploy("bad")
    def bad():
        keyring = "/usr/share/keyrings/example.gpg"
        signed_apt_source(
            name="Add",
            path=SOURCE,
            content=f"deb [signed-by={keyring}] {REPO} /\n",
            keyring=keyring,
            key_url=KEY_URL,
            fingerprints=PINNED,
            fingerprint_setting=SETTING,
            lock_timeout=120,
            timeout=30,
        )

    with pytest.raises(Exception, match="must end in .asc"):
        run_plan(bad)


# The fingerprints gpg prints, read from its real output (tests/fixtures/gpg/README.md)


@pytest.mark.parametrize(
    "fixture, primaries",
    [
        ("show-keys-one-key-two-subkeys.txt", ["A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699"]),
        (
            "show-keys-two-keys.txt",
            ["A4442DBE68F1FC72DB2D6DED445CA3AC12D6B699", "0A6E5F345EB03399A45171D430684C2BD89F8AFC"],
        ),
    ],
)
def test_the_primary_keys_fingerprints_are_read_from_gpgs_listing_never_a_subkeys(fixture, primaries):
    listing = (FIXTURES / fixture).read_text()
    read = subprocess.run(
        ["sh", "-c", PRIMARY_FINGERPRINTS], input=listing, capture_output=True, text=True, check=True
    ).stdout.split()
    assert read == primaries
    subkeys = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
    assert len(subkeys) > len(primaries)  # the listing has subkey fingerprints the reading left out


# The shell, run for real against 127.0.0.1


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Key files served on 127.0.0.1: an armoured key, a binary one, an HTML page, an empty body,
    another valid key, and a file holding both keys."""
    root = tmp_path_factory.mktemp("keys")
    home = tmp_path_factory.mktemp("gnupg")
    key = standin_toolkit.make_key(home / "k", "download-test")
    other = standin_toolkit.make_key(home / "o", "download-test-other")
    (root / "armored").write_text(key.armored_public_key())
    binary = subprocess.run(
        ["gpg", "--homedir", str(key.home), "--export", key.fingerprint], capture_output=True, check=True
    ).stdout
    (root / "binary").write_bytes(binary)
    (root / "html").write_text(standin_toolkit.GARBAGE_KEY_PAGE)
    (root / "empty").write_text("")
    (root / "other").write_text(other.armored_public_key())
    (root / "both").write_text(key.armored_public_key() + other.armored_public_key())
    for each in (key, other):
        each.stop_agent()
    with standin_toolkit.serve(root) as url:
        yield url, key, other


def run_shell(command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


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


def staged_run(
    url: str,
    key: str,
    tmp_path: Path,
    apt_guard: Path,
    timeout: int = 5,
    without_apt_helper: bool = False,
    fingerprints: tuple[str, ...] = PINNED,
) -> subprocess.CompletedProcess:
    source, keyring = tmp_path / "etc" / "example.list", tmp_path / "keyrings" / "example.asc"
    content = f"deb [signed-by={keyring}] {url}/repo /\n"
    command = stage_verified_source(
        str(source),
        content,
        str(keyring),
        f"{url}/{key}",
        f"{url}/repo",
        timeout,
        lock_timeout=120,
        fingerprints=fingerprints,
        fingerprint_setting=SETTING,
    )
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


@pytest.mark.parametrize(
    "served_as, says", [("html", "bytes starting <html><head><title>502 Bad Gateway"), ("empty", "got an empty body")]
)
def test_a_key_url_that_returns_no_key_fails_before_apt_naming_the_url(served, tmp_path, apt_guard, served_as, says):
    url, _, _ = served
    result = staged_run(url, served_as, tmp_path, apt_guard)
    assert result.returncode == 1
    assert f"{url}/{served_as} did not return an OpenPGP public key" in result.stderr and says in result.stderr
    assert_nothing_staged(tmp_path, apt_guard)


@pytest.mark.parametrize("served_as", ["armored", "binary"])
def test_a_real_key_reaches_apt_signed_by_the_staged_keyring_and_apts_refusal_names_the_repository(
    served, tmp_path, apt_guard, served_as
):
    url, key, _ = served
    result = staged_run(url, served_as, tmp_path, apt_guard, fingerprints=(key.fingerprint,))
    assert result.returncode == 1
    assert f"apt could not fetch or verify the repository {url}/repo" in result.stderr
    assert "E: stopped by the test guard" in result.stderr
    trial = (apt_guard / "trial.list").read_text()
    assert trial.startswith("deb [signed-by=/") and "/keyring.asc]" in trial and f"{url}/repo /" in trial
    # A binary key is armoured for the .asc keyring: gpg reads the same fingerprint from it.
    shown = subprocess.run(
        ["gpg", "--homedir", str(key.home), "--show-keys", "--with-colons", str(apt_guard / "keyring.asc")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert key.fingerprint in shown
    assert not (tmp_path / "etc").exists() and not (tmp_path / "keyrings").exists()


def test_a_valid_key_whose_fingerprint_is_not_pinned_is_refused_in_one_line_naming_both(served, tmp_path, apt_guard):
    url, key, other = served
    result = staged_run(url, "other", tmp_path, apt_guard, fingerprints=(key.fingerprint,))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"refusing the signing key from {url}/other: its fingerprint is {other.fingerprint}; "
        f"{key.fingerprint} is pinned ({SETTING})"
    )
    assert_nothing_staged(tmp_path, apt_guard)


def test_a_key_file_with_a_key_beside_the_pinned_one_is_refused_naming_every_key_in_it(served, tmp_path, apt_guard):
    url, key, other = served
    result = staged_run(url, "both", tmp_path, apt_guard, fingerprints=(key.fingerprint,))
    assert result.returncode == 1
    assert f"its fingerprint is {key.fingerprint}, {other.fingerprint}; {key.fingerprint} is pinned" in result.stderr
    assert_nothing_staged(tmp_path, apt_guard)


def test_any_of_several_pinned_fingerprints_is_accepted(served, tmp_path, apt_guard):
    url, key, other = served
    result = staged_run(url, "other", tmp_path, apt_guard, fingerprints=(key.fingerprint, other.fingerprint))
    assert "E: stopped by the test guard" in result.stderr, result.stderr  # the key passed, apt ran
    assert (apt_guard / "called").exists()


def test_the_check_uses_a_gpg_home_of_its_own_and_leaves_no_gpg_state_behind(served, tmp_path, apt_guard):
    url, key, _ = served
    home = tmp_path / "home"
    home.mkdir()
    result = run_shell(
        stage_verified_source(
            str(tmp_path / "s.list"),
            f"deb [signed-by={tmp_path}/k.asc] {url}/repo /\n",
            f"{tmp_path}/k.asc",
            f"{url}/armored",
            f"{url}/repo",
            5,
            lock_timeout=120,
            fingerprints=(key.fingerprint,),
            fingerprint_setting=SETTING,
        ).get_raw_value(),
        env={"PATH": f"{apt_guard}:{os.environ['PATH']}", "HOME": str(home), "GNUPGHOME": ""},
    )
    assert "E: stopped by the test guard" in result.stderr, result.stderr
    assert list(home.iterdir()) == []  # no ~/.gnupg made for root


# The dnf/zypper repository: the key checked, imported alone, the repository checked with it


RPM_FILE = "/etc/yum.repos.d/example.repo"
RPM_KEY = "/etc/pki/rpm-gpg/gpu-node-example.asc"
RPM_CONTENT = f"[example]\nbaseurl={REPO}\ngpgcheck=1\ngpgkey=file://{RPM_KEY}\n"


@deploy("repository")
def repository(**kwargs):
    kwargs = {"key_url": KEY_URL, "fingerprints": PINNED, **kwargs}
    signed_rpm_repository(
        name="Add the example repository",
        path=RPM_FILE,
        content=RPM_CONTENT,
        key_path=RPM_KEY,
        fingerprint_setting=SETTING,
        check="dnf-check {candidate}",
        timeout=30,
        **kwargs,
    )


def test_a_new_rpm_repository_is_staged_checked_then_committed():
    plan = run_plan(
        repository,
        facts=[(source_read(RPM_FILE, RPM_KEY), file_digests_lines({RPM_FILE: "absent", RPM_KEY: "absent"}))],
    )
    staged = plan.matching("download-file")
    commit = plan.starting("chown root:root " + RPM_KEY + STAGED_SUFFIX)
    assert len(staged) == 1 and KEY_URL in staged[0] and len(commit) == 1
    assert plan.commands.index(staged[0]) < plan.commands.index(commit[0])
    # rpm imports the checked file, then the manager reads the trial file, then the key and file are staged
    command = staged[0]
    assert command.index("for fingerprint in $served") < command.index('rpm --import "$stage/keyring.asc"')
    assert (
        command.index("rpm --import")
        < command.index('dnf-check "$stage/candidate.repo"')
        < command.index(f"{RPM_KEY}{STAGED_SUFFIX}")
    )


def test_an_rpm_repository_and_its_key_in_place_are_the_one_read():
    digest = hashlib.sha256(RPM_CONTENT.encode()).hexdigest()
    plan = run_plan(
        repository,
        facts=[
            (
                source_read(RPM_FILE, RPM_KEY),
                file_digests_lines(
                    {
                        RPM_FILE: ["644 root:root", f"{digest}  {RPM_FILE}"],
                        RPM_KEY: ["644 root:root", f"{'0' * 64}  {RPM_KEY}"],
                    }
                ),
            )
        ],
    )
    assert plan.commands == [FileDigests().command(source_read(RPM_FILE, RPM_KEY)[1]["paths"])]


@pytest.mark.parametrize(
    "key_url, fingerprints, says",
    [
        (
            "http://mirror.example.internal/gpgkey",
            PINNED,
            "refusing to fetch the signing key http://mirror.example.internal/gpgkey over http",
        ),
        (KEY_URL, (), f"{SETTING} is unset: the key at {KEY_URL} is trusted only once its fingerprint is pinned there"),
    ],
)
@pytest.mark.parametrize("deploy_function", [source, repository], ids=["apt", "rpm"])
def test_a_key_that_cannot_be_checked_fails_the_host_before_any_download(key_url, fingerprints, says, deploy_function):
    plan = run_plan(
        deploy_function,
        key_url=key_url,
        fingerprints=fingerprints,
        facts=[
            (source_read(SOURCE, KEYRING), file_digests_lines({SOURCE: "absent", KEYRING: "absent"})),
            (source_read(RPM_FILE, RPM_KEY), file_digests_lines({RPM_FILE: "absent", RPM_KEY: "absent"})),
        ],
    )
    assert not plan.ran("download-file") and not plan.ran("rpm --import")
    assert len(plan.failed_with(says)) == 1, plan.failures


@pytest.fixture
def rpm_guard(tmp_path):
    """rpm and the repository check first on PATH: they record what they were given (rpm's database
    as a file of NVRs) and never touch this machine's."""
    folder = tmp_path / "rpm-guard"
    folder.mkdir()
    (folder / "rpm").write_text(
        "#!/bin/sh\n"
        f"db={folder}/keys\n"
        'case "$1" in\n'
        f'  --import) cp "$2" {folder}/imported.asc; echo gpg-pubkey-example-1 >>"$db";;\n'
        '  -q) cat "$db" 2>/dev/null;;\n'
        f'  -e) shift; echo "$@" >{folder}/erased; for nvr; do grep -v -x "$nvr" "$db" >"$db.new"; mv "$db.new" "$db"; done;;\n'
        "esac\n"
    )
    (folder / "repository-check").write_text(
        f'#!/bin/sh\ncp "$1" {folder}/candidate.repo\nexit $(cat {folder}/check-exit 2>/dev/null || echo 0)\n'
    )
    for tool in ("rpm", "repository-check"):
        (folder / tool).chmod(0o755)
    return folder


def rpm_staged_run(url: str, key: str, tmp_path: Path, guard: Path, fingerprints: tuple[str, ...]):
    repo_file, key_path = tmp_path / "repos" / "example.repo", tmp_path / "pki" / "gpu-node-example.asc"
    content = f"[example]\nbaseurl={url}/repo\ngpgcheck=1\ngpgkey=file://{key_path}\n"
    command = stage_checked_rpm_repository(
        str(repo_file), content, str(key_path), f"{url}/{key}", 5, fingerprints, SETTING, "repository-check {candidate}"
    )
    result = run_shell(command.get_raw_value(), env={"PATH": f"{guard}:{os.environ['PATH']}"})
    return result, repo_file, key_path


def test_an_rpm_repository_key_is_imported_alone_after_its_check_and_the_trial_names_the_checked_copy(
    served, tmp_path, rpm_guard
):
    url, key, _ = served
    result, repo_file, key_path = rpm_staged_run(url, "binary", tmp_path, rpm_guard, (key.fingerprint,))
    assert result.returncode == 0, result.stderr
    imported = (rpm_guard / "imported.asc").read_text()
    assert imported.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")  # armoured for rpm
    assert (Path(str(key_path) + STAGED_SUFFIX)).read_text() == imported
    trial = (rpm_guard / "candidate.repo").read_text()
    assert "gpgkey=file:///" in trial and trial.rstrip().endswith("/keyring.asc") and str(key_path) not in trial
    assert Path(str(repo_file) + STAGED_SUFFIX).read_text().endswith(f"gpgkey=file://{key_path}\n")


def test_an_rpm_repository_with_a_foreign_key_imports_nothing(served, tmp_path, rpm_guard):
    url, key, other = served
    result, repo_file, key_path = rpm_staged_run(url, "other", tmp_path, rpm_guard, (key.fingerprint,))
    assert result.returncode == 1
    assert f"its fingerprint is {other.fingerprint}; {key.fingerprint} is pinned ({SETTING})" in result.stderr
    assert not (rpm_guard / "imported.asc").exists() and not (rpm_guard / "candidate.repo").exists()
    assert not repo_file.parent.exists() and not key_path.parent.exists()


def test_an_rpm_repository_the_manager_refuses_takes_the_key_it_brought_back_out(served, tmp_path, rpm_guard):
    url, key, _ = served
    (rpm_guard / "keys").write_text("gpg-pubkey-distribution-1\n")  # a key the node had before
    (rpm_guard / "check-exit").write_text("1")
    result, repo_file, key_path = rpm_staged_run(url, "armored", tmp_path, rpm_guard, (key.fingerprint,))
    assert result.returncode == 1
    assert (rpm_guard / "erased").read_text().split() == ["gpg-pubkey-example-1"]
    assert (rpm_guard / "keys").read_text() == "gpg-pubkey-distribution-1\n"
    assert not repo_file.parent.exists() and not key_path.parent.exists()
