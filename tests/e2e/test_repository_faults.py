"""
The toolkit repository failing in each way it can, against the STAND-IN repository.

A stand-in because the real toolkit (tests/toolkit_repo.py) comes in one good repository only:
these faults are the repository's, not the package's. The repository, its keys and its faults
are built by tests/standin_toolkit.py and served on 127.0.0.1 (a refused port, a server that
never answers, an HTML page or an empty body where the key should be, a key that did not sign
the repository, an InRelease altered after signing, a copy signed by another valid key that the key
URL serves). apt, gpg, gpgv and the node are real. For each fault: the run fails naming the URL,
the source file and keyring are exactly as before (absent on a fresh node, the good ones on
a converged node), the node's own `apt-get update` still succeeds, and the good repository
then converges with a second run changing nothing.
"""

from __future__ import annotations

import contextlib
import time

import pytest
import standin_toolkit
from harness import assert_no_change

from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES

# Short, so the server that never answers costs seconds; the setting is the one users set.
FAULT_DATA = {"stages": "toolkit", "download_timeout": "3"}


@contextlib.contextmanager
def fault_settings(fault: str, repo):
    """(settings that point at the faulty place, the URL the error must name, what apt or the check says)."""
    if fault == "key_port_refused":
        url = f"{standin_toolkit.refused_url('https')}/gpgkey"
        yield repo.data(key_url=url), url, "refused"
    elif fault == "key_server_never_answers":
        with standin_toolkit.silent_server("https") as base:
            yield repo.data(key_url=f"{base}/gpgkey"), f"{base}/gpgkey", "(timeout 3 s)"
    elif fault == "key_url_serves_an_html_page":
        yield repo.data(key="garbage-gpgkey"), f"{repo.keys_url}/garbage-gpgkey", "502 Bad Gateway"
    elif fault == "key_url_serves_an_empty_body":
        yield repo.data(key="empty-gpgkey"), f"{repo.keys_url}/empty-gpgkey", "an empty body"
    elif fault == "repository_port_refused":
        base = standin_toolkit.refused_url()
        yield repo.data(repo_url=base), base, "refused"
    elif fault == "repository_never_answers":
        with standin_toolkit.silent_server() as base:
            yield repo.data(repo_url=base), base, "(timeout 3 s)"
    elif fault == "repository_signed_by_another_key":
        # the other key pinned too: apt's own check refuses the repository it did not sign
        yield (
            {
                **repo.data(key="wrong-gpgkey"),
                "nvidia_toolkit_gpgkey_fingerprint": f"{repo.key.fingerprint},{repo.other_key.fingerprint}",
            },
            repo.url,
            "NO_PUBKEY",
        )

    elif fault == "repository_inrelease_altered_after_signing":
        base = f"{repo.url}/{standin_toolkit.TAMPERED}"
        yield repo.data(repo_url=base), base, "BADSIG"
    else:
        raise ValueError(fault)


FAULTS = [
    "key_port_refused",
    "key_server_never_answers",
    "key_url_serves_an_html_page",
    "key_url_serves_an_empty_body",
    "repository_port_refused",
    "repository_never_answers",
    "repository_signed_by_another_key",
    "repository_inrelease_altered_after_signing",
]


def apt_state(node) -> dict[str, str | None]:
    """The source file and keyring, byte for byte with mode, owner and mtime; None when absent."""
    return {path: node.stat(path) if node.exists(path) else None for path in (APT_SOURCE, APT_KEYRING)}


# A fault costs seconds with download_timeout=3; apt's own timeouts (what a run that ignored the
# setting would wait for) are minutes.
FAULT_RUN_SECONDS = 90


def assert_fails_cleanly(node, data: dict, url: str, says: str, before: dict) -> None:
    started = time.monotonic()
    result = node.deploy(data={**FAULT_DATA, **data}, json_output=False)
    elapsed = time.monotonic() - started
    assert result.returncode != 0, result.explain()
    assert elapsed < FAULT_RUN_SECONDS, f"the run took {elapsed:.0f} s: the timeout was not applied\n{result.explain()}"
    assert url in result.output, f"the error must name {url}\n{result.explain()}"
    assert says in result.output, f"the error must say {says!r}\n{result.explain()}"
    assert apt_state(node) == before, "the source file and keyring must be exactly as before"
    assert node.sh("ls /etc/apt/sources.list.d/ /usr/share/keyrings/ | grep gpu-node-new || true").stdout == ""
    # The node's own refresh, every source it has; --error-on=any so a source that fails counts.
    plain_update = node.sh("apt-get update -q --error-on=any", check=False)
    assert plain_update.returncode == 0, plain_update.stdout + plain_update.stderr


@pytest.mark.parametrize("fault", FAULTS)
def test_standin_repository_fault_fails_naming_the_url_and_leaves_apt_as_it_was(fault, node, standin_toolkit_repo):
    """Each fault of the STAND-IN repository: the run fails naming the URL, apt is left as it was."""
    toolkit_repo = standin_toolkit_repo
    with fault_settings(fault, toolkit_repo) as (data, url, says):
        # A fresh node: nothing is left behind.
        assert_fails_cleanly(node, data, url, says, before={APT_SOURCE: None, APT_KEYRING: None})

        good = {**FAULT_DATA, **toolkit_repo.data()}
        converged = node.deploy(data=good)
        assert converged.returncode == 0, converged.explain()
        installed = node.sh("dpkg-query -W -f '${Package}\\n' " + " ".join(TOOLKIT_PACKAGES)).stdout.split()
        assert sorted(installed) == sorted(TOOLKIT_PACKAGES)

        # A converged node: the good source and keyring stay, byte for byte.
        assert_fails_cleanly(node, data, url, says, before=apt_state(node))

    assert_no_change(node.deploy(data=good))


def test_standin_key_served_unarmoured_is_accepted_and_converges(node, standin_toolkit_repo):
    """Some mirrors serve the key as binary OpenPGP: it is armoured for the .asc keyring and apt
    verifies with it. The STAND-IN repository serves its key that way too (the real one's is armoured)."""
    data = {**FAULT_DATA, **standin_toolkit_repo.data(key="gpgkey.bin")}
    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    keyring = node.read(APT_KEYRING)
    assert keyring.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    plain_update = node.sh("apt-get update -q --error-on=any", check=False)
    assert plain_update.returncode == 0, plain_update.stdout + plain_update.stderr
    assert_no_change(node.deploy(data=data))


def apt_and_dpkg(node) -> str:
    """What a run could change of apt's trust and the installed packages: every file under /etc/apt and
    /usr/share/keyrings (name, mode, owner, size, mtime, checksum) and dpkg's package states."""
    return node.sh(
        "find /etc/apt /usr/share/keyrings -type f -exec stat -c '%n %a %U:%G %s %Y' {} + | sort;"
        " find /etc/apt /usr/share/keyrings -type f -exec sha256sum {} + | sort;"
        " dpkg-query -W -f '${Package} ${Version} ${Status}\\n' | sort"
    ).stdout


def test_standin_key_url_serving_another_valid_key_that_signed_the_repository_is_refused_naming_both_fingerprints(
    node, standin_toolkit_repo
):
    """A copy of the STAND-IN repository signed by another valid key, which the key URL serves (a
    hijacked mirror or key URL): apt would verify the repository with that key, so only the pin stops
    it. On a fresh node and on one the good repository converged: the run fails in one line naming
    both fingerprints, before apt reads the repository; apt and dpkg as they were."""
    repo = standin_toolkit_repo
    key_path = f"{standin_toolkit.IMPOSTOR}/gpgkey"
    impostor = {**FAULT_DATA, **repo.data(repo_url=f"{repo.url}/{standin_toolkit.IMPOSTOR}", key=key_path)}
    refusal = (
        f"refusing the signing key from {repo.keys_url}/{key_path}: its fingerprint is "
        f"{repo.other_key.fingerprint}; {repo.key.fingerprint} is pinned (nvidia_toolkit_gpgkey_fingerprint)"
    )
    for converged in (False, True):
        if converged:
            good = node.deploy(data={**FAULT_DATA, **repo.data()})
            assert good.returncode == 0, good.explain()
        before = apt_and_dpkg(node)
        refused = node.deploy(data=impostor, json_output=False)
        assert refused.returncode != 0, refused.explain()
        assert len(refused.run_lines(refusal)) == 1, refused.explain()
        assert "apt could not" not in refused.output and "Traceback" not in refused.output, refused.explain()
        assert apt_and_dpkg(node) == before
        plain_update = node.sh("apt-get update -q --error-on=any", check=False)
        assert plain_update.returncode == 0, plain_update.stdout + plain_update.stderr
