"""
Downloads, each bounded by the ``download_timeout`` setting and naming the URL when it fails:
repository sources whose signing key is checked against pinned fingerprints, each changed as one
transaction, and an executable checked against a pinned SHA-256 before it is put in place.

A repository's key is fetched to a private staging folder, checked to be an OpenPGP public key
whose primary keys gpg reads all to be pinned ones, and only then used: apt refreshes that one
source against the staged key; dnf and zypper get it imported into rpm's database (that key alone)
and refresh that one repository. Only when the manager fetched and verified the repository are
the key and the source staged beside their targets and renamed into place, so an unreachable
repository, a garbage or foreign key or a bad signature leaves the node's package manager as it
was. Every failure names the URL.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from typing import Any
from urllib.parse import urlparse

from pyinfra import host
from pyinfra.api import OperationValueError, QuoteString, StringCommand, operation
from pyinfra.facts.files import Sha256File

from ..facts.files import FileDigests, FileText
from ..facts.read_ahead import FactCall, read
from ..foundations import redact
from ..foundations.pyinfra_api import Commands
from ..node import records as node_records
from ..settings import key_url_allowed
from .failure import failing_command
from .packages import apt_lock_option, apt_sources_changed
from .progress import announcing

APT_HELPER = "/usr/lib/apt/apt-helper"
STAGED_SUFFIX = ".gpu-node-new"  # a verified file waiting for its rename into place
FINGERPRINT = re.compile("[0-9A-F]{40}")  # as settings.fingerprint_list folds them


def apt_timeout_options(timeout: int) -> list[str]:
    """apt's per-connection timeout (connect and each read) for http and https. apt retries a failed
    download three times by default: one try keeps a dead server's cost near the timeout."""
    return [
        "-o",
        f"Acquire::http::Timeout={timeout}",
        "-o",
        f"Acquire::https::Timeout={timeout}",
        "-o",
        "Acquire::Retries=0",
    ]


def _download_script(url: str, dest_q: str, timeout: int, log_q: str) -> str:
    """Shell that downloads ``url`` to the file ``dest_q`` (a shell word) with apt's own helper where
    there is one (every apt host has it, so no curl to install), else curl, else wget; their
    output goes to the file ``log_q``."""
    url_q = shlex.quote(url)
    apt_options = " ".join(apt_timeout_options(timeout))
    return (
        f"if [ -x {APT_HELPER} ]; then {APT_HELPER} {apt_options} download-file {url_q} {dest_q};"
        f" elif command -v curl >/dev/null 2>&1; then"
        f" curl -fsSL --connect-timeout {timeout} --max-time {timeout} -o {dest_q} {url_q};"
        f" else wget -q -T {timeout} -t 1 -O {dest_q} {url_q}; fi >{log_q} 2>&1"
    )


def _download_or_fail(url: str, dest_q: str, timeout: int, log_q: str, what: str) -> str:
    """Shell that downloads or exits 1 with one line naming ``what`` and the URL, and the tool's
    last word: apt-helper's "E: Failed to fetch URL  reason", curl's "curl: (7) ...", else its exit code."""
    last_word = (
        f"grep -v -e unsandboxed -e '^Ign' -e '^Err' -e '^  ' -e 'Download Failed' {log_q} | tail -n 1 | cut -c1-300"
    )
    return (
        _download_script(url, dest_q, timeout, log_q)
        + f' || {{ rc=$?; reason=$({last_word}); echo "could not download {what}{_sq(url)} (timeout {timeout} s):'
        ' ${reason:-exit $rc}" >&2; exit 1; }'
    )


def _sq(text: str) -> str:
    """``text`` safe inside a double-quoted shell string."""
    return "".join("\\" + char if char in '"$`\\' else char for char in text)


# The armour's CRC-24 line (RFC 4880 6.1), in POSIX shell arithmetic: gpg reads an armoured key
# without it past its last line whenever the base64 has no "=" padding.
ARMOR_CHECKSUM = (
    'crc=11994318; for byte in $(od -An -tu1 -v "$stage/key"); do crc=$(( crc ^ (byte << 16) )); bit=0;'
    " while [ $bit -lt 8 ]; do crc=$(( crc << 1 )); [ $(( crc & 16777216 )) -eq 0 ] || crc=$(( crc ^ 25578747 ));"
    " bit=$(( bit + 1 )); done; done;"
    r' printf "=%s\n" "$(printf "\\$(printf %o $(( (crc >> 16) & 255 )))\\$(printf %o $(( (crc >> 8) & 255 )))'
    r'\\$(printf %o $(( crc & 255 )))" | base64)"'
)


# The primary keys' fingerprints of an OpenPGP key file, one a line: gpg's machine-readable listing
# gives each key a "pub" record followed by its "fpr" record (field 10), then its subkeys' "sub"/"fpr".
# gpg gets a home of its own in the staging folder (no keyring of root's is read or created) and
# starts no agent.
PRIMARY_FINGERPRINTS = (
    """awk -F: '$1 == "pub" { primary = 1; next } $1 == "fpr" && primary { print $10 } { primary = 0 }'"""
)
GPG_PRIMARY_FINGERPRINTS = (
    'gpg --homedir "$stage/gnupg" --batch --no-autostart --with-colons --show-keys "$stage/key" 2>>"$log"'
    f" | {PRIMARY_FINGERPRINTS}"
)


def _pinned_key(key_url: str, fingerprints: tuple[str, ...], setting: str, timeout: int) -> list[str]:
    """
    Shell lines (after the staging folder ``$stage``, ``$log`` and ``fail`` exist) that download the
    key at ``key_url``, check it is an OpenPGP public key and that gpg reads every primary key in it
    to be one of ``fingerprints`` (``setting`` pins them), and leave it ASCII-armoured in
    ``$stage/keyring.asc``; any other key stops the run in one line naming both fingerprints.
    """
    key_url_s = _sq(key_url)
    expected = fingerprints[0] if len(fingerprints) == 1 else "one of " + ", ".join(fingerprints)
    pinned = " ".join(fingerprints)
    staged_key = '"$stage/keyring.asc"'
    return [
        _download_or_fail(key_url, '"$stage/key"', timeout, '"$log"', what="the signing key "),
        # An OpenPGP public key: ASCII armour, or a binary public-key packet (tag 6, old or new format).
        'if grep -q "^-----BEGIN PGP PUBLIC KEY BLOCK-----" "$stage/key"'
        ' && grep -q "^-----END PGP PUBLIC KEY BLOCK-----" "$stage/key"; then kind=armored;'
        ' else case "$(od -An -tx1 -N1 "$stage/key" | tr -d " \\n")" in 98|99|9a|c6) kind=binary;; *) kind=;; esac; fi',
        'if [ -z "$kind" ]; then if [ -s "$stage/key" ]; then'
        ' got="$(wc -c <"$stage/key") bytes starting $(head -c 60 "$stage/key" | tr -c "[:print:]" "?")";'
        ' else got="an empty body"; fi;'
        f' fail "{key_url_s} did not return an OpenPGP public key (got $got)"; fi',
        'command -v gpg >/dev/null 2>&1 || fail "gpg is needed to check the signing key\'s fingerprint: install gnupg"',
        f'mkdir -m 700 "$stage/gnupg" && served=$({GPG_PRIMARY_FINGERPRINTS} | tr "\\n" " " | sed "s/ *$//")',
        f'[ -n "$served" ] || fail "gpg read no key from {key_url_s}: $(grep "^gpg:" "$log" | tail -n 1 | cut -c1-200)"',
        f'for fingerprint in $served; do case " {pinned} " in *" $fingerprint "*) ;; *)'
        f' fail "refusing the signing key from {key_url_s}: its fingerprint is $(echo "$served" | sed "s/ /, /g");'
        f' {expected} is pinned ({setting})";; esac; done',
        # Kept armoured (.asc): a binary key gets its armour and CRC-24 here.
        f'if [ "$kind" = armored ]; then cp "$stage/key" {staged_key}; else'
        f" {{ echo '-----BEGIN PGP PUBLIC KEY BLOCK-----'; echo; base64 -w 64 \"$stage/key\";"
        f" {ARMOR_CHECKSUM}; echo '-----END PGP PUBLIC KEY BLOCK-----'; }} >{staged_key}; fi",
    ]


def _new_q(path: str) -> str:
    return shlex.quote(path + STAGED_SUFFIX)


def _dir_q(path: str) -> str:
    return shlex.quote(posixpath.dirname(path) or "/")


def stage_verified_source(
    path: str,
    content: str,
    keyring: str,
    key_url: str,
    repository: str,
    timeout: int,
    lock_timeout: int,
    fingerprints: tuple[str, ...],
    fingerprint_setting: str,
) -> StringCommand:
    """
    Fetch the key and check it against ``fingerprints``, let apt refresh the new source alone
    against it (with ``timeout``, waiting up to ``lock_timeout`` seconds for dpkg's lock),
    and only then stage the keyring and the source beside their targets (``<path>.gpu-node-new``).
    Any failure exits 1 with one line naming the URL and leaves the targets untouched.
    """
    marker = f"signed-by={keyring}"
    # The trial source is the real one signed by the staged key.
    first, *rest = content.split(marker)
    key_url_s, repo_s = _sq(key_url), _sq(repository)
    staged_key = '"$stage/keyring.asc"'
    apt_update = " ".join(
        [
            "apt-get",
            "update",
            "-q",
            apt_lock_option(lock_timeout),
            "-o",
            'Dir::Etc::SourceList="$stage/trial.list"',
            "-o",
            'Dir::Etc::SourceParts="$stage/parts"',
            # Keep every other source's lists: this refresh sees only the one source.
            "-o",
            "APT::Get::List-Cleanup=0",
            "-o",
            "APT::Update::Error-Mode=any",
            *apt_timeout_options(timeout),
        ]
    )
    lines = [
        # root's own folder (nothing else can swap the key between its check and its use) that apt's
        # unprivileged _apt user can pass through to the files it names: apt checks signatures as _apt.
        'stage=$(mktemp -d) || exit 1; trap \'rm -rf "$stage"\' EXIT; chmod 711 "$stage"; log="$stage/log"',
        'fail() { echo "$*" >&2; exit 1; }',
        *_pinned_key(key_url, fingerprints, fingerprint_setting, timeout),
        f'chmod 644 {staged_key}; mkdir "$stage/parts"',
        "printf %s "
        + " ".join([shlex.quote(first)] + [f"signed-by={staged_key} {shlex.quote(part)}" for part in rest])
        + ' >"$stage/trial.list"',
        f'{apt_update} >"$log" 2>&1; rc=$?',
        # apt's errors and warnings, without its summary line and the per-item "Err:" headers.
        'reason=$(grep -E "^(E|W):" "$log" | grep -v -e unsandboxed -e "Some index files failed"'
        ' | tr -s "\\n " "  " | cut -c1-600 | sed "s/ *$//")',
        f'if [ $rc -ne 0 ] || [ -n "$reason" ]; then fail "apt could not fetch or verify the repository {repo_s}'
        f" with the key from {key_url_s} (timeout {timeout} s): ${{reason:-apt-get update exited $rc}}"
        '; the previous source and keyring are left as they were"; fi',
        # Staged beside their targets, so that the commit is two renames.
        f"mkdir -p {_dir_q(keyring)} {_dir_q(path)} && cp {staged_key} {_new_q(keyring)}"
        f" && printf %s {shlex.quote(content)} >{_new_q(path)} || {{ rm -f {_new_q(keyring)} {_new_q(path)}; exit 1; }}",
    ]
    return StringCommand("\n".join(lines))


def commit_staged_source(path: str, keyring: str) -> StringCommand:
    """Put the staged keyring, then the source that names it, in place: each a rename, so apt
    reads the old file or the new one, never half of one."""
    new_key, new_source = _new_q(keyring), _new_q(path)
    return StringCommand(
        f"chown root:root {new_key} {new_source} && chmod 644 {new_key} {new_source}"
        f" && mv -f {new_key} {shlex.quote(keyring)} && mv -f {new_source} {shlex.quote(path)}"
    )


def record_files_command(*paths: str) -> StringCommand:
    """The record of ``paths`` for the undo run before gpu-node's first change of them
    (deploy/node/records.py), the command before the one that changes them."""
    words = " ".join(shlex.quote(path) for path in paths)
    return StringCommand(
        f"{node_records.LIBRARY}for path in {words}; do gn_record_file \"$path\" '' '' || exit 1; done"
    )


def wrote_files_command(*paths: str) -> StringCommand:
    """What gpu-node has just written at ``paths``, for the undo run."""
    words = " ".join(shlex.quote(path) for path in paths)
    return StringCommand(f'{node_records.LIBRARY}for path in {words}; do gn_wrote_file "$path"; done')


REPLACE, REPAIR, IN_PLACE = "replace", "repair", "in place"


def source_state(digests: dict[str, Any], path: str, content: str, keyring: str) -> str:
    """From FileDigests of the source and its keyring: REPLACE when the source is new or changed
    (so a changed key URL takes effect) or the keyring is missing, REPAIR when only the source's
    mode or owner drifted, else IN_PLACE."""
    current = digests.get(path)
    if current is None or current["sha256"] != hashlib.sha256(content.encode()).hexdigest():
        return REPLACE
    if digests.get(keyring) is None:
        return REPLACE
    if (current["mode"], current["owner"]) != ("644", "root:root"):
        return REPAIR
    return IN_PLACE


def source_read(path: str, keyring: str) -> FactCall:
    """What ``signed_apt_source`` and ``signed_rpm_repository`` read (a stage reads it ahead with the same call)."""
    return (FileDigests, {"paths": [path, keyring]})


def key_refusal(key_url: str, fingerprints: tuple[str, ...], fingerprint_setting: str) -> str | None:
    """Why the key at ``key_url`` cannot be checked before use (None: it can): it would come over
    plain http, or no fingerprint is pinned for it."""
    if not key_url_allowed(key_url):
        return (
            f"refusing to fetch the signing key {key_url} over {urlparse(key_url).scheme or 'no scheme'}: "
            "a key is fetched over https:// or read from a file:// path on the node"
        )
    if not fingerprints:
        return (
            f"{fingerprint_setting} is unset: the key at {key_url} is trusted only once its fingerprint is "
            "pinned there (check it yourself, e.g. with gpg --show-keys of the key file)"
        )
    if not all(FINGERPRINT.fullmatch(each) for each in fingerprints):
        raise OperationValueError(f"{fingerprint_setting}: fingerprints are 40 upper-case hex digits: {fingerprints}")
    return None


def fetch_message(repository: str, key_url: str, timeout: int) -> str:
    """What a repository's first fetch says as it starts (a slow mirror makes it long)."""
    return (
        f"adding the repository {repository}: its key from {key_url}, checked, then its lists; each download "
        f"has {timeout} s (download_timeout), and a failure names the URL"
    )


def log_source_change(path: str, content: str, key_path: str, key_url: str, fingerprints: tuple[str, ...]) -> None:
    """With --diff: the repository file's change, and the key it will name (fetched while the run goes)."""
    if not host.state.config.DIFF:
        return
    current = host.get_fact(FileText, path=path)
    redact.log_masked_diff(host, path, current, content, "text")
    redact.log_file_note(
        host, key_path, f"the key {key_url} serves, once its fingerprint is one of {', '.join(fingerprints)}"
    )


@operation()
def signed_apt_source(
    path: str,
    content: str,
    keyring: str,
    key_url: str,
    *,
    fingerprints: tuple[str, ...],
    fingerprint_setting: str,
    lock_timeout: int,
    timeout: int,
    repository: str = "",
) -> Commands:
    """
    An apt source that names a signed-by keyring. When the source is new or changed (so a changed
    key URL or pin takes effect) or the key is missing, fetch the key and check it against
    ``fingerprints`` (which ``fingerprint_setting`` sets), check apt can fetch and verify the
    repository with it, then install both; any failure leaves the previous files untouched. One
    remote read decides; a source whose only drift is its mode or owner is repaired in place.
    ``lock_timeout``: apt's wait for dpkg's lock (settings.apt_lock_timeout).
    """
    if f"signed-by={keyring}" not in content:
        raise OperationValueError(f"the apt source for {path} must name signed-by={keyring}")
    if not keyring.endswith(".asc"):
        raise OperationValueError(f"keyring {keyring} must end in .asc: the key is stored ASCII-armoured")
    state = source_state(read(host, source_read(path, keyring)), path, content, keyring)
    if state == REPLACE:
        refusal = key_refusal(key_url, fingerprints, fingerprint_setting)
        if refusal:
            yield failing_command(refusal)
            return
        apt_sources_changed()
        log_source_change(path, content, keyring, key_url, fingerprints)
        yield announcing(fetch_message(repository or path, key_url, timeout))
        yield stage_verified_source(
            path,
            content,
            keyring,
            key_url,
            repository or path,
            timeout,
            lock_timeout,
            fingerprints,
            fingerprint_setting,
        )
        yield from _committed_source(path, keyring)
        return
    if state == REPAIR:
        yield from _repaired_source_mode(path)
        return
    host.noop(f"{path} and its keyring {keyring} are in place")


def _committed_source(path: str, key: str) -> Commands:
    """The staged source and its key put in place, recorded for the undo on either side."""
    yield record_files_command(key, path)
    yield commit_staged_source(path, key)
    yield wrote_files_command(key, path)


def _repaired_source_mode(path: str) -> Commands:
    """A source file with the right text and the wrong owner or mode: root's, 0644."""
    yield record_files_command(path)
    yield StringCommand("chown", "root:root", QuoteString(path), "&&", "chmod", "644", QuoteString(path))
    yield wrote_files_command(path)


def stage_checked_rpm_repository(
    path: str,
    content: str,
    key_path: str,
    key_url: str,
    timeout: int,
    fingerprints: tuple[str, ...],
    fingerprint_setting: str,
    check: str,
) -> StringCommand:
    """
    Fetch the key and check it against ``fingerprints``; import it (that key alone) into rpm's
    database; run ``check`` (a shell test of the repository file ``{candidate}``, which reads only
    that repository: distros.repository_check) on the repository file naming the staged key; and
    only then stage the key and the file beside their targets. A refused repository takes the keys
    it brought back out of rpm's database and leaves the targets untouched.
    """
    marker = f"gpgkey=file://{key_path}"
    # The trial file is the real one naming the staged key.
    first, *rest = content.split(marker)
    staged_key = '"$stage/keyring.asc"'
    imported = 'rpm -q gpg-pubkey --qf "%{NVR}\\n" 2>/dev/null | grep "^gpg-pubkey-" | sort'
    lines = [
        # mktemp's folder is root's alone: nothing else can swap the key between its check and its use.
        'stage=$(mktemp -d) || exit 1; trap \'rm -rf "$stage"\' EXIT; log="$stage/log"',
        'fail() { echo "$*" >&2; exit 1; }',
        *_pinned_key(key_url, fingerprints, fingerprint_setting, timeout),
        f'{imported} >"$stage/keys.before"',
        f'rpm --import {staged_key} 2>>"$log" || fail "rpm could not import the checked key from {_sq(key_url)}:'
        ' $(tail -n 1 "$log")"',
        "printf %s "
        + " ".join([shlex.quote(first)] + [f"gpgkey=file://{staged_key}{shlex.quote(part)}" for part in rest])
        + ' >"$stage/candidate.repo"',
        f"if ! {check.format(candidate=chr(34) + '$stage/candidate.repo' + chr(34))}; then"
        f' {imported} | comm -13 "$stage/keys.before" - | xargs -r rpm -e; exit 1; fi',
        f"mkdir -p {_dir_q(key_path)} {_dir_q(path)} && cp {staged_key} {_new_q(key_path)}"
        f" && printf %s {shlex.quote(content)} >{_new_q(path)} || {{ rm -f {_new_q(key_path)} {_new_q(path)}; exit 1; }}",
        # the keys this import added to rpm's database, for the undo run to take back out
        node_records.record_imported_rpm_keys('"$stage/keys.before"'),
    ]
    return StringCommand("\n".join(lines))


@operation()
def signed_rpm_repository(
    path: str,
    content: str,
    key_path: str,
    key_url: str,
    *,
    fingerprints: tuple[str, ...],
    fingerprint_setting: str,
    check: str,
    timeout: int,
) -> Commands:
    """
    A dnf or zypper repository file whose ``gpgkey=file://`` names ``key_path``, the checked copy
    of the key at ``key_url``. When the file is new or changed (a changed key URL or pin is part of
    it) or the key is missing: fetch the key, check it against ``fingerprints``, import it into
    rpm's database, check the manager can read the repository with it (``check``: see
    ``stage_checked_rpm_repository``), then install both; any failure leaves the node's repositories
    and rpm's keys as they were. One remote read decides, as ``signed_apt_source``'s.
    """
    if f"gpgkey=file://{key_path}" not in content:
        raise OperationValueError(f"the repository file {path} must name gpgkey=file://{key_path}")
    if not key_path.endswith(".asc"):
        raise OperationValueError(f"key {key_path} must end in .asc: the key is stored ASCII-armoured")
    state = source_state(read(host, source_read(path, key_path)), path, content, key_path)
    if state == REPLACE:
        refusal = key_refusal(key_url, fingerprints, fingerprint_setting)
        if refusal:
            yield failing_command(refusal)
            return
        log_source_change(path, content, key_path, key_url, fingerprints)
        yield announcing(fetch_message(path, key_url, timeout))
        yield stage_checked_rpm_repository(
            path, content, key_path, key_url, timeout, fingerprints, fingerprint_setting, check
        )
        yield from _committed_source(path, key_path)
        return
    if state == REPAIR:
        yield from _repaired_source_mode(path)
        return
    host.noop(f"{path} and its key {key_path} are in place")


# ---------------------------------------------------------------------------------------------
# An executable pinned by its SHA-256


def checked_download_command(url: str, dest: str, sha256: str, timeout: int) -> StringCommand:
    """
    Download ``url`` (with ``timeout``) to a hidden file beside ``dest``, check its SHA-256, and
    only then make it executable and rename it into place (pyinfra's files.download moves the
    file in before checking). Any failure exits 1 with one line naming the URL, leaving ``dest``
    as it was and no download behind.
    """
    directory, name = posixpath.split(dest)
    temp_q = shlex.quote(f"{directory}/.{name}.download")
    sha_q = shlex.quote(sha256)
    return StringCommand(
        "\n".join(
            [
                # The trap names the file through a variable: a quoted path inside its quoted text would end the quote.
                f'temp={temp_q}; log=$(mktemp) || exit 1; trap \'rm -f "$log" "$temp"\' EXIT',
                f"mkdir -p {shlex.quote(directory)} && rm -f {temp_q} || exit 1",
                _download_or_fail(url, temp_q, timeout, '"$log"', what=""),
                f"sha=$(sha256sum {temp_q} | cut -d' ' -f1)",
                f'if [ "$sha" != {sha_q} ]; then'
                f' echo "refusing {_sq(url)}: the pinned SHA-256 is {sha256}, the download\'s is $sha" >&2; exit 1; fi',
                f"chmod 0755 {temp_q} && mv -f {temp_q} {shlex.quote(dest)}",
            ]
        )
    )


@operation()
def checked_executable(url: str, dest: str, sha256: str, timeout: int) -> Commands:
    """Install the file at ``url`` as an executable ``dest`` only if its SHA-256 is ``sha256``."""
    if host.get_fact(Sha256File, path=dest) == sha256:
        host.noop(f"{dest} is installed with SHA-256 {sha256}")
        return
    yield checked_download_command(url, dest, sha256, timeout)
