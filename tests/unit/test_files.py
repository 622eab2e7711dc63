"""put_text: one remote read decides; content, mode and owner are each repaired only when wrong."""

from __future__ import annotations

import hashlib

import click
import pytest
from plan import run_plan, staged_uploads
from pyinfra.api import deploy

from deploy.facts.files import FileDigest
from deploy.operations.files import digest_read, put_text

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

DEST = "/etc/modules-load.d/k8s.conf"
CONTENT = "overlay\nbr_netfilter\n"
DIGEST = hashlib.sha256(CONTENT.encode()).hexdigest()


@deploy("put")
def put(**kwargs):
    put_text(name="Put the file", dest=DEST, content=CONTENT, **kwargs)


def test_fact_parses_stat_and_sha256sum_output_and_absence():
    assert FileDigest().process(["644 root:root", f"{DIGEST}  /etc/x"]) == {
        "mode": "644",
        "owner": "root:root",
        "sha256": DIGEST,
    }
    assert FileDigest().process(["absent"]) is None


def test_absent_file_is_created_with_owner_and_mode():
    plan = run_plan(put, facts=[(digest_read(DEST), "absent")])
    # placed beside it by the place script, which makes its folder (tests/unit/test_upload.py)
    (placing,) = plan.matching("(staging=")
    assert [(path, live) for _staged, path, live in staged_uploads(placing)] == [(DEST + ".gpu-node-candidate", DEST)]
    assert plan.ran("chown root:root /etc/modules-load.d/k8s.conf")
    assert plan.ran("chmod 644 /etc/modules-load.d/k8s.conf")


def test_identical_file_is_one_read_and_nothing_else():
    plan = run_plan(put, facts=[(digest_read(DEST), ["644 root:root", f"{DIGEST}  {DEST}"])])
    assert len(plan.matching("/etc/modules-load.d/k8s.conf")) == 1
    assert not plan.starting("chmod") and not plan.starting("chown")


def test_only_a_wrong_mode_is_repaired():
    plan = run_plan(put, facts=[(digest_read(DEST), ["600 root:root", f"{DIGEST}  {DEST}"])])
    assert plan.starting("chmod") == ["chmod 644 /etc/modules-load.d/k8s.conf"]
    assert not plan.starting("chown")


def test_file_digests_read_several_files_from_one_output():
    from deploy.facts.files import FileDigests

    output = ["present /a", "absent /b", "stat 644 root:root", f"{DIGEST}  /a"]
    assert FileDigests().process(output) == {"/a": {"mode": "644", "owner": "root:root", "sha256": DIGEST}, "/b": None}


def test_diff_shows_a_new_file_and_a_changed_one_with_credentials_masked(caplog):
    """pyinfra's --diff: a file put_text creates shows whole, one it changes shows its change (the old
    text read for the diff alone), and a URL's user-info in either is masked."""
    import logging

    caplog.set_level(logging.INFO, logger="pyinfra")
    new = "line https://robot:s3cret@mirror.example.internal/x\n"

    @deploy("put")
    def put_new():
        put_text(name="Put the file", dest=DEST, content=new)

    run_plan(put_new, facts=[(digest_read(DEST), ["absent"])], diff=True)
    shown = click.unstyle(caplog.text)
    assert f"Will create {DEST}" in shown and "+ line https://***@mirror.example.internal/x" in shown
    caplog.clear()
    old = "line https://robot:old@mirror.example.internal/x\nbr_netfilter\n"
    import base64

    from deploy.facts.files import FileText

    run_plan(
        put_new,
        facts=[
            (digest_read(DEST), ["644 root:root", f"{hashlib.sha256(old.encode()).hexdigest()}  {DEST}"]),
            ((FileText, {"path": DEST}), [f"text {base64.b64encode(old.encode()).decode()}"]),
        ],
        diff=True,
    )
    shown = click.unstyle(caplog.text)
    assert f"Will modify {DEST}" in shown and "- br_netfilter" in shown
    assert "s3cret" not in shown and "old@" not in shown


def test_without_diff_the_old_text_is_not_read():
    run = run_plan(put, facts=[(digest_read(DEST), ["644 root:root", f"{'0' * 64}  {DEST}"])])
    assert not [command for command in run.commands if "base64" in command]  # FileText unstated: not read either


def test_file_digests_refuse_a_checksum_line_naming_another_file_than_its_place_says():
    """As many stat and checksum lines as present files, but the checksum lines in another order
    than the files were listed (made up: the order is stat's and sha256sum's own): refused, not one
    file's digest given to the other."""
    from pyinfra.api.exceptions import FactProcessError

    from deploy.facts.files import FileDigests

    other = "1" * 64
    output = ["present /a", "present /b", "stat 644 root:root", "stat 644 root:root", f"{other}  /b", f"{DIGEST}  /a"]
    with pytest.raises(FactProcessError, match="do not match the files .* is not the one of '/a'"):
        FileDigests().process(output)


def test_file_digests_refuse_a_mode_line_of_another_shape_in_one_line():
    """A mode and owner line that is not two words (made up: stat printing something else) is
    refused naming the file, not a ValueError's traceback."""
    from pyinfra.api.exceptions import FactProcessError

    from deploy.facts.files import FileDigests

    with pytest.raises(FactProcessError, match="the mode and owner of '/a' read as '644'"):
        FileDigests().process(["present /a", "stat 644", f"{DIGEST}  /a"])
