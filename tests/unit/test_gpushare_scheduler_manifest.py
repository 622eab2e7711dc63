"""
The kube-scheduler static pod edit, as a pure function, on a static pod in kubeadm's layout.

The fixture is a kube-scheduler.yaml written for these tests in the layout kubeadm writes (keys
sorted, block style, flags sorted, ``creationTimestamp: null`` and ``status: {}``), not kubeadm's
file. The edit is golden-tested: the result differs from the input only by the lines gpushare
needs, each present exactly once.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from deploy.k8s.gpushare import (
    CONFIG_CHECKSUM_ANNOTATION,
    CONFIG_VOLUME,
    ManifestError,
    check_scheduler_manifest,
    dump_yaml,
    edit_scheduler_manifest,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpushare"
SCHEDULER_POD = (FIXTURES / "kube-scheduler-static-pod.yaml").read_text()
EDITED_POD = (FIXTURES / "kube-scheduler-static-pod.edited.yaml").read_text()
CONFIG = "/etc/kubernetes/gpushare/scheduler-config.yaml"
DIGEST = "0123456789abcdef" * 4


def edited(text: str = SCHEDULER_POD, digest: str | None = DIGEST) -> str:
    return edit_scheduler_manifest(text, CONFIG, digest)


def scheduler_container(pod: dict) -> dict:
    return next(item for item in pod["spec"]["containers"] if item["name"] == "kube-scheduler")


def test_pyyaml_round_trips_a_manifest_in_kubeadms_layout_to_identical_text():
    """PyYAML keeps kubeadm's key order and style: a parse and dump changes no byte."""
    assert dump_yaml(yaml.safe_load(SCHEDULER_POD)) == SCHEDULER_POD


def test_edit_matches_golden_file():
    assert edited() == EDITED_POD


def test_edit_only_inserts_the_gpushare_lines():
    diff = list(difflib.ndiff(SCHEDULER_POD.splitlines(), edited().splitlines()))
    removed = [line for line in diff if line.startswith("- ")]
    added = [line[2:] for line in diff if line.startswith("+ ")]
    assert removed == []
    assert added == [
        "  annotations:",
        f"    {CONFIG_CHECKSUM_ANNOTATION}: {DIGEST}",
        f"    - --config={CONFIG}",
        f"    - mountPath: {CONFIG}",
        f"      name: {CONFIG_VOLUME}",
        "      readOnly: true",
        "  - hostPath:",
        f"      path: {CONFIG}",
        "      type: File",
        f"    name: {CONFIG_VOLUME}",
    ]


def test_edit_has_flag_volume_and_mount_exactly_once_and_keeps_every_other_field():
    before = yaml.safe_load(SCHEDULER_POD)
    after = yaml.safe_load(edited())
    container = scheduler_container(after)
    assert container["command"].count(f"--config={CONFIG}") == 1
    assert [m for m in container["volumeMounts"] if m["mountPath"] == CONFIG] == [
        {"mountPath": CONFIG, "name": CONFIG_VOLUME, "readOnly": True}
    ]
    assert [v for v in after["spec"]["volumes"] if v["name"] == CONFIG_VOLUME] == [
        {"hostPath": {"path": CONFIG, "type": "File"}, "name": CONFIG_VOLUME}
    ]
    # Take the additions back out: what is left is the original, field for field.
    container["command"].remove(f"--config={CONFIG}")
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != CONFIG_VOLUME]
    after["spec"]["volumes"] = [v for v in after["spec"]["volumes"] if v["name"] != CONFIG_VOLUME]
    del after["metadata"]["annotations"]
    assert after == before
    check_scheduler_manifest(edited(), CONFIG)


def test_second_edit_is_a_no_op():
    once = edited()
    assert edited(once) is once
    assert edited(EDITED_POD) == EDITED_POD


def test_changed_config_digest_only_changes_the_annotation():
    other = "f" * 64
    diff = [
        line
        for line in difflib.ndiff(EDITED_POD.splitlines(), edited(EDITED_POD, other).splitlines())
        if line[:2] in ("- ", "+ ")
    ]
    assert diff == [
        f"-     {CONFIG_CHECKSUM_ANNOTATION}: {DIGEST}",
        f"+     {CONFIG_CHECKSUM_ANNOTATION}: {other}",
    ]


def test_partial_edit_is_completed_without_duplicates():
    """A manifest with the flag but no volume (a half-done hand edit) gets the rest, once."""
    pod = yaml.safe_load(SCHEDULER_POD)
    scheduler_container(pod)["command"].append(f"--config={CONFIG}")
    result = yaml.safe_load(edited(dump_yaml(pod)))
    container = scheduler_container(result)
    assert [item for item in container["command"] if item.startswith("--config")] == [f"--config={CONFIG}"]
    assert len([v for v in result["spec"]["volumes"] if v["name"] == CONFIG_VOLUME]) == 1
    check_scheduler_manifest(dump_yaml(result), CONFIG)


def test_another_scheduler_config_is_refused():
    pod = yaml.safe_load(SCHEDULER_POD)
    scheduler_container(pod)["command"].append("--config=/etc/kubernetes/other.yaml")
    with pytest.raises(ManifestError, match="already runs with --config=/etc/kubernetes/other.yaml"):
        edited(dump_yaml(pod))


def test_a_conflicting_volume_is_refused():
    pod = yaml.safe_load(SCHEDULER_POD)
    pod["spec"]["volumes"].append({"hostPath": {"path": "/elsewhere"}, "name": CONFIG_VOLUME})
    with pytest.raises(ManifestError, match="refusing to guess"):
        edited(dump_yaml(pod))


@pytest.mark.parametrize(
    "text, message",
    [
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n", "not valid YAML"),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {}\nspec: {}\n", "not a v1 Pod"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: other}]}\n",
            "one container named kube-scheduler",
        ),
    ],
)
def test_unusable_manifests_are_refused(text, message):
    with pytest.raises(ManifestError, match=message):
        edited(text)


def test_check_rejects_a_manifest_without_the_edit():
    with pytest.raises(ManifestError, match="--config"):
        check_scheduler_manifest(SCHEDULER_POD, CONFIG)


def test_check_rejects_a_volume_that_does_not_point_at_the_config():
    pod = yaml.safe_load(EDITED_POD)
    pod["spec"]["volumes"][-1]["hostPath"]["path"] = "/tmp/other"
    with pytest.raises(ManifestError, match="hostPath volume"):
        check_scheduler_manifest(dump_yaml(pod), CONFIG)


def test_edited_manifest_validates_strictly_as_a_v1_pod():
    for version in ("1.25.0", "1.28.0", "1.31.0"):
        kubernetes_validate.validate(yaml.safe_load(EDITED_POD), version, strict=True)
    broken = yaml.safe_load(EDITED_POD)
    scheduler_container(broken)["volumeMount"] = []  # a typo a strict schema must catch
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.28.0", strict=True)
