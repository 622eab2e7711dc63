"""An apt source with its signed-by keyring, fetched so that a failure names the URL."""

from __future__ import annotations

import hashlib

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from deploy.facts.files import FileDigests
from deploy.operations import files
from deploy.operations.packages import apt_sources_changed


def fetch_command(src: str, dest: str, mode: str = "644") -> StringCommand:
    """Download with apt's own helper where there is one (every apt host has it, so no curl
    to install), else curl, else wget; the failure names the URL."""
    url, target = QuoteString(src), QuoteString(dest)
    failure = QuoteString(f"could not download {src}")
    return StringCommand(
        'tmp=$(mktemp) && if { if [ -x /usr/lib/apt/apt-helper ]; then /usr/lib/apt/apt-helper download-file', url,
        '"$tmp"; elif command -v curl >/dev/null 2>&1; then curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp"', url,
        '; else wget -q -O "$tmp"', url, "; fi; } >/dev/null; then",
        "install -m", QuoteString(mode), '-o root -g root "$tmp"', target, '; rc=$?; rm -f "$tmp"; exit $rc;',
        'else rc=$?; rm -f "$tmp"; echo', failure, '"(exit $rc)" >&2; exit 1; fi',
    )


@operation()
def signed_apt_source(path: str, content: str, keyring: str, key_url: str):
    """
    An apt source that names a signed-by keyring: write the source when it differs and fetch
    the key whenever the source is new or changed (so a changed key URL takes effect) or the
    key is missing. One remote read decides both.
    """
    digests = host.get_fact(FileDigests, paths=[path, keyring])
    current = digests.get(path)
    source_changes = current is None or current["sha256"] != hashlib.sha256(content.encode()).hexdigest()
    source_repair = source_changes or (current["mode"], current["owner"]) != ("644", "root:root")
    key_fetch = source_changes or digests.get(keyring) is None
    if source_repair:
        yield from files.put_text._inner(dest=path, content=content)
        apt_sources_changed()
    if key_fetch:
        yield fetch_command(key_url, keyring)
    if not (source_repair or key_fetch):
        host.noop(f"{path} and its keyring {keyring} are in place")
