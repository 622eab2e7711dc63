"""put_text: one remote read decides; content, mode and owner are each repaired only when wrong."""

from __future__ import annotations

import pytest
import hashlib

from plan import run_plan
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
        "mode": "644", "owner": "root:root", "sha256": DIGEST}
    assert FileDigest().process(["absent"]) is None


def test_absent_file_is_created_with_owner_and_mode():
    plan = run_plan(put, facts=[(digest_read(DEST), "absent")])
    assert plan.ran("mkdir -p -- /etc/modules-load.d")
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

    output = ["@@file /a", "644 root:root", f"{DIGEST}  /a", "@@file /b", "absent"]
    assert FileDigests().process(output) == {
        "/a": {"mode": "644", "owner": "root:root", "sha256": DIGEST}, "/b": None}
