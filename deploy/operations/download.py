"""Download a file on the host, failing with a message that names the URL."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.files import File


@operation()
def fetch(src: str, dest: str, mode: str = "644", refresh: bool = False):
    """
    Fetch ``src`` to ``dest`` (root-owned) unless it is there already, or always when ``refresh``.

    pyinfra's files.download reports only curl's own error, which omits the URL; an operator
    with several mirrors needs to see which one failed.
    """
    if host.get_fact(File, path=dest) and not refresh:
        host.noop(f"{dest} is present")
        return
    url, target = QuoteString(src), QuoteString(dest)
    failure = QuoteString(f"could not download {src}")
    yield StringCommand(
        'tmp=$(mktemp) && if curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp"', url, "; then",
        "install -m", QuoteString(mode), '-o root -g root "$tmp"', target, '; rc=$?; rm -f "$tmp"; exit $rc;',
        'else rc=$?; rm -f "$tmp"; echo', failure, '"(curl exit $rc)" >&2; exit 1; fi',
    )
