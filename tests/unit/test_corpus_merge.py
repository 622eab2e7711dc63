"""
The merge on every config of the real-world corpus (other projects' files, read from
GPU_NODE_CORPUS: tests/corpus.py), each result checked by the real programs: containerd 1.6
(bookworm), 1.7 (trixie) and 2.1 (sid) from Debian (`config dump`), and trixie's dockerd 26
(`--validate`).

Every file is merged and checked. A file SOURCES.toml lists is held to what is known of it: wired
everywhere, unless named below as refused (by the merge, or by a real program as written). A file
it does not list must be wired, or refused in one line naming it; where a real program refuses the
untouched file too, the merged one is not asked of that program.

The oracles (tests/config_checks.py) are written from containerd's and Docker's documented
behaviour, not from the merge's code: they read the dump (or the JSON) with the standard library.
"""

from __future__ import annotations

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
from corpus import containerd_configs, corpus_folder, docker_configs, file_params, read_text, sources

from deploy.foundations.toml_layout import ConfigError
from deploy.operations.containerd import ConfigFile, plan_wiring
from deploy.runtimes.containerd.cri import merge_containerd_config
from deploy.runtimes.docker.daemon_json import (
    DaemonConfigError,
    merge_daemon_config,
    parse_daemon_json,
    render_daemon_json,
)
from deploy.runtimes.wiring import RuntimeWiring

SOURCES = sources()

# Listed files the merge must refuse, and why: a refusal is deliberate, never a way out of a check.
CONTAINERD_REFUSALS: dict[str, str] = {}
DOCKER_REFUSALS = {
    "nvidia-docker-broken-daemon.json": "not valid JSON as committed upstream (a stray quote)",
}
# Listed inputs a real program itself refuses as they are (checked below, so the lists stay true):
# the merged file cannot be asked of that program either.
CONTAINERD_REFUSES_INPUT = {
    ("containerd-docs-1.6-man-config-toml.toml", "bookworm"): "imports ./debug.toml, which the docs do not give",
    ("containerd-docs-1.6-man-config-toml.toml", "trixie"): "imports ./debug.toml, which the docs do not give",
}
DOCKERD_REFUSES_INPUT = {
    "moby-integration-invalid-config-1.json": "an option dockerd does not know (moby's own negative test)",
    "docker-docs-dockerd-full-linux-example.json": "options newer than Docker 26 (allow-direct-routing, bip6, ...)",
}

WIRING = RuntimeWiring()


def listed(path: Path) -> bool:
    return f"{path.parent.name}/{path.name}" in SOURCES


def assert_one_line_naming(message: str, name: str) -> None:
    assert "\n" not in message and name in message, f"refusal is not one line naming the file: {message!r}"


def test_every_sources_entry_names_a_corpus_file_and_says_where_it_comes_from():
    """SOURCES.toml -> files only: the corpus may hold files whose origin was not recorded."""
    folder = corpus_folder()
    assert SOURCES, f"{folder}/SOURCES.toml lists no file"
    missing = sorted(name for name in SOURCES if not (folder / name).is_file())
    assert not missing, f"SOURCES.toml entries without a file: {missing}"
    for name, entry in SOURCES.items():
        assert {"project", "repository", "path", "done"} <= set(entry), f"{name}: incomplete source {entry}"


def test_listed_corpus_files_are_real_configs_not_templates():
    folder = corpus_folder()
    for name in SOURCES:
        if name.startswith(("containerd/", "docker/")):
            text = read_text(folder / name)
            for directive in ("{{", "{%", "${"):
                assert directive not in text, f"{name} still holds a template directive {directive!r}"


@pytest.mark.parametrize("path", file_params(containerd_configs()))
def test_containerd_corpus_merge(path, tmp_path):
    name, strict = path.name, listed(path)
    text = read_text(path)
    try:
        merged = merge_containerd_config(text, WIRING, source=name)
    except ConfigError as error:
        assert_one_line_naming(str(error), name)
        if strict and name not in CONTAINERD_REFUSALS:
            pytest.fail(f"merge refused {name} (not listed in CONTAINERD_REFUSALS): {error}")
        return
    assert name not in CONTAINERD_REFUSALS, f"{name} is listed as refused by the merge, but it is merged"

    # Idempotent: merging the result again changes nothing.
    assert merge_containerd_config(merged.text, WIRING, source=name).text == merged.text, (
        f"{name}: second merge changed it"
    )

    # Comments, every key the wiring does not set, other disabled plugins are kept.
    problems = kept_problems(text, merged.text)
    assert not problems, f"{name}: {problems[:5]}"

    # Each real containerd that reads this config version runs it with the wiring.
    for suite in READERS[read_version(merged.text)]:
        found = release(suite)
        if (name, suite) in CONTAINERD_REFUSES_INPUT:
            original = write_candidate(tmp_path / suite / "original", "config.toml", text)
            assert config_dump(found.binary, original).returncode != 0, (
                f"{name} is listed as refused by {suite}'s containerd, but it is accepted"
            )
            continue
        # On a node the merge knows the installed containerd: a version 2 file holding 2.x plugin
        # names (AKS for containerd 2) is wired where 2.x reads it.
        try:
            for_release = plan_wiring([ConfigFile("config.toml", text, name)], WIRING, found.major, found.version)
        except ConfigError as error:
            assert_one_line_naming(str(error), name)
            assert not strict, f"{name}: refused for containerd {found.version}: {error}"
            continue
        candidate = write_candidate(tmp_path / suite, "config.toml", for_release[0][0].text)
        dumped = config_dump(found.binary, candidate)
        if dumped.returncode != 0 and not strict:
            original = write_candidate(tmp_path / suite / "original", "config.toml", text)
            if config_dump(found.binary, original).returncode != 0:
                continue  # containerd refuses the file as its project wrote it: nothing to ask
        assert dumped.returncode == 0, (
            f"{name}: containerd {found.version} refuses the merged file: {dumped.stderr.strip()[-300:]}"
        )
        assert_wired(tomllib.loads(dumped.stdout), found.major, name, f"{suite} {found.version}")


@pytest.mark.parametrize("path", file_params(docker_configs()))
def test_docker_corpus_merge(path, tmp_path):
    name, strict = path.name, listed(path)
    text = read_text(path)
    try:
        existing = parse_daemon_json(text, source=name)
        merged = merge_daemon_config(existing, WIRING)
    except DaemonConfigError as error:
        assert_one_line_naming(str(error), name)
        if strict and name not in DOCKER_REFUSALS:
            pytest.fail(f"merge refused {name} (not listed in DOCKER_REFUSALS): {error}")
        return
    assert name not in DOCKER_REFUSALS, f"{name} is listed as refused by the merge, but it is merged"
    rendered = render_daemon_json(merged.config)

    result = json.loads(rendered)
    assert result["runtimes"]["nvidia"]["path"] == NVIDIA_BINARY
    assert result["default-runtime"] == "nvidia"
    assert "native.cgroupdriver=systemd" in result["exec-opts"]
    assert docker_leaves_not_set_by_wiring(result) == docker_leaves_not_set_by_wiring(existing), (
        f"{name}: keys the wiring does not set were changed"
    )

    again = merge_daemon_config(parse_daemon_json(rendered, source=name), WIRING)
    assert not again.changed and render_daemon_json(again.config) == rendered, f"{name}: second merge changed it"

    if name in DOCKERD_REFUSES_INPUT:
        original = write_candidate(tmp_path / "original", "daemon.json", text)
        assert dockerd_validate(dockerd(), original).returncode != 0, (
            f"{name} is listed as refused by dockerd, but it is accepted"
        )
        return
    checked = dockerd_validate(dockerd(), write_candidate(tmp_path, "daemon.json", rendered))
    if (
        checked.returncode != 0
        and not strict
        and dockerd_validate(dockerd(), write_candidate(tmp_path / "original", "daemon.json", text)).returncode != 0
    ):
        return  # dockerd refuses the file as its project wrote it: nothing to ask
    assert checked.returncode == 0, (
        f"{name}: dockerd 26 refuses the merged file: {(checked.stderr or checked.stdout).strip()[-300:]}"
    )
