"""
The shapes real-world configs come in, on small configs written for these tests: they always run,
with or without the real-world corpus (GPU_NODE_CORPUS, tests/unit/test_corpus_merge.py). Each
containerd fixture of tests/fixtures/containerd/merge (default wiring) gets the checks a corpus
file gets: merged once for good, comments and other keys kept (tests/config_checks.py), and the
wiring in effect in the `config dump` of every real containerd that reads its config version
(1.6, 1.7, 2.1); each Docker fixture's result is checked by the real dockerd 26 (`--validate`).

Shape -> fixture folder (the golden files themselves: tests/unit/test_containerd_merge.py):

- version 1: v1-no-version, v1-explicit, empty-file, unversioned-2x-plugin-names
- version 2 / 3 / 4: v2-comments-mirrors, v3-containerd-2.1-default, v3-double-quoted-keys, v4
- imports and drop-ins: imports, imports-only-no-plugins, tabs-multiline-imports, k0s-dropin
  (a drop-in holding the whole CRI section: tests/unit/test_containerd_imports.py)
- comments kept: v2-comments-mirrors, utf8-header-comments, disabled-plugins-cri
- k3s-style: k3s-split-tables (a table's keys apart from its sub-tables), k3s-go-template
  (`{{ template "base" . }}`: refused, saying what to do; below)
- registry sections: registry-auth-tls, v2-comments-mirrors
- odd quoting: quoted-runtime-names-literal-strings, v3-double-quoted-keys, crlf-no-final-newline
- a child table before its parent: eks-al2-child-before-parent
- CRI switched off: disabled-plugins-cri, cri-disabled-among-others, v3-cri-disabled-2x-names
- arrays of tables: array-of-tables
- daemon.json: one-line-cgroupfs, nvidia-relative-path-tabs, runtime-type-options, empty-object, ...
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import tomllib
from config_checks import (
    NVIDIA_BINARY,
    assert_wired,
    docker_leaves_not_set_by_wiring,
    kept_problems,
    read_version,
    write_candidate,
)
from containerd_releases import READERS, config_dump, dockerd, dockerd_validate, release
from plan import run_plan, settings_for

from deploy.distros.families import detect_platform
from deploy.facts.containerd import config_read
from deploy.operations.containerd import ConfigFile, plan_wiring
from deploy.runtimes.containerd.cri import merge_containerd_config
from deploy.runtimes.docker.daemon_json import parse_daemon_json
from deploy.runtimes.wiring import RuntimeWiring
from deploy.tasks.containerd import containerd_runtime

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# Only the default wiring: the fixtures with a wiring.json test other settings on their golden files.
CONTAINERD_SHAPES = sorted(
    path.parent.name
    for path in (FIXTURES / "containerd" / "merge").glob("*/expected.toml")
    if not (path.parent / "wiring.json").exists()
)
DOCKER_SHAPES = sorted(
    path.parent.name
    for path in (FIXTURES / "docker" / "merge").glob("*/expected.json")
    if not (path.parent / "wiring.json").exists()
)
WIRING = RuntimeWiring()


def lay_out_relative_imports(directory: Path, text: str) -> None:
    """Empty files for the relative, non-glob imports: on a node they exist (a missing one fails 1.x)."""
    for entry in tomllib.loads(text).get("imports", []):
        if not entry.startswith("/") and not any(c in entry for c in "*?["):
            write_candidate(directory, entry, "")


@pytest.mark.parametrize("name", CONTAINERD_SHAPES)
def test_containerd_shape_is_wired_and_kept_as_a_real_world_file_would_be(name, tmp_path):
    text = (FIXTURES / "containerd" / "merge" / name / "input.toml").read_bytes().decode()
    merged = merge_containerd_config(text, WIRING, source=name)
    assert merge_containerd_config(merged.text, WIRING, source=name).text == merged.text, "a second merge changed it"
    assert kept_problems(text, merged.text) == []
    for suite in READERS[read_version(merged.text)]:
        found = release(suite)
        planned, _ = plan_wiring([ConfigFile("config.toml", text, name)], WIRING, found.major, found.version)
        candidate = write_candidate(tmp_path / suite, "config.toml", planned[0].text)
        lay_out_relative_imports(tmp_path / suite, text)
        dumped = config_dump(found.binary, candidate)
        assert dumped.returncode == 0, (
            f"containerd {found.version} refuses the merged file: {dumped.stderr.strip()[-300:]}"
        )
        assert_wired(tomllib.loads(dumped.stdout), found.major, name, f"{suite} {found.version}")


@pytest.mark.parametrize("name", DOCKER_SHAPES)
def test_docker_shape_is_wired_kept_and_accepted_by_the_real_dockerd(name, tmp_path):
    directory = FIXTURES / "docker" / "merge" / name
    source = directory / "input.json"
    existing = parse_daemon_json(source.read_text(), "daemon.json") if source.exists() else {}
    expected = (directory / "expected.json").read_text()
    result = json.loads(expected)
    assert result["runtimes"]["nvidia"]["path"] == NVIDIA_BINARY and result["default-runtime"] == "nvidia"
    assert "native.cgroupdriver=systemd" in result["exec-opts"]
    assert docker_leaves_not_set_by_wiring(result) == docker_leaves_not_set_by_wiring(existing)
    checked = dockerd_validate(dockerd(), write_candidate(tmp_path, "daemon.json", expected))
    assert checked.returncode == 0, (
        f"dockerd 26 refuses {name}/expected.json: {(checked.stderr or checked.stdout).strip()[-300:]}"
    )


K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"
K3S_FOUND = {
    "paths": [K3S_DIR, f"{K3S_DIR}/config.toml", f"{K3S_DIR}/config.toml.tmpl", "/usr/local/bin/k3s"],
    "units": {"k3s": "active"},
    "generated_versions": {f"{K3S_DIR}/config.toml": 2},
    "binary": "/var/lib/rancher/k3s/data/current/bin/containerd",
    "installation": {"name": "k3s", "service": "k3s"},
}


@pytest.mark.usefixtures("both_modes")
def test_k3s_template_with_go_directives_is_refused_in_one_line_saying_what_to_do_and_left_alone():
    """k3s reads config.toml.tmpl as a Go template (`{{ template "base" . }}` pulls in its defaults):
    not TOML, so the merge cannot edit it. The host fails naming the file and what to do instead."""
    template = (FIXTURES / "containerd" / "merge" / "k3s-go-template" / "input.toml").read_text()
    family = detect_platform({"name": "debian", "major": None, "release_meta": {"ID": "debian"}}, "x86_64").family
    encoded = base64.b64encode(template.encode()).decode()
    plan = run_plan(
        containerd_runtime,
        settings_for(),
        family,
        K3S_FOUND,
        facts=[
            (
                config_read(f"{K3S_DIR}/config.toml.tmpl", f"{K3S_DIR}/config.toml", K3S_FOUND["binary"]),
                f"binary_path {K3S_FOUND['binary']}\nconfig {encoded}",
            )
        ],
    )
    failed = plan.failed_with(f"{K3S_DIR}/config.toml.tmpl is not valid TOML")
    assert len(failed) == 1 and "\n" not in failed[0], plan.failures
    assert "it was left as it is" in failed[0]
    assert f"k3s reads {K3S_DIR}/config.toml.tmpl as a Go template" in failed[0]
    assert "add the nvidia runtime to it by hand" in failed[0]
    assert not plan.ran("gpu-node-candidate") and not plan.ran("systemctl restart")
