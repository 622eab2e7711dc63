"""
The merge on configs other projects wrote (tests/fixtures/corpus, sources in SOURCES.toml),
each result checked by the real programs: containerd 1.6 (bookworm), 1.7 (trixie) and 2.1 (sid)
from Debian (`config dump`), and trixie's dockerd 26 (`--validate`).

The oracles here are written from containerd's and Docker's documented behaviour, not from the
merge's code: they read the dump (or the JSON) with the standard library only.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from containerd_releases import READERS, config_dump, dockerd, dockerd_validate, release

from deploy.operations.containerd import ConfigError, ConfigFile, merge_containerd_config, plan_wiring
from deploy.operations.docker import (
    DaemonConfigError,
    merge_daemon_config,
    parse_daemon_json,
    render_daemon_json,
)
from deploy.settings import RuntimeWiring

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
CONTAINERD_FILES = sorted(path.name for path in (CORPUS / "containerd").iterdir())
DOCKER_FILES = sorted(path.name for path in (CORPUS / "docker").iterdir())

NVIDIA_BINARY = "/usr/bin/nvidia-container-runtime"
# Every name under which containerd 1.x / 2.x can have CRI switched off.
CRI_PLUGIN_IDS = {"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"}

# Files the merge must refuse, and why: a refusal is deliberate, never a way out of a check.
CONTAINERD_REFUSALS: dict[str, str] = {}
DOCKER_REFUSALS = {
    "nvidia-docker-broken-daemon.json": "not valid JSON as committed upstream (a stray quote)",
}
# Inputs a real program itself refuses as they are (checked below, so the lists stay true): the
# merged file cannot be asked of that program either.
CONTAINERD_REFUSES_INPUT = {
    ("containerd-docs-1.6-man-config-toml.toml", "bookworm"): "imports ./debug.toml, which the docs do not give",
    ("containerd-docs-1.6-man-config-toml.toml", "trixie"): "imports ./debug.toml, which the docs do not give",
}
DOCKERD_REFUSES_INPUT = {
    "moby-integration-invalid-config-1.json": "an option dockerd does not know (moby's own negative test)",
    "docker-docs-dockerd-full-linux-example.json": "options newer than Docker 26 (allow-direct-routing, bip6, ...)",
}

WIRING = RuntimeWiring()


def corpus_text(folder: str, name: str) -> str:
    # Bytes as the project wrote them (CRLF kept: read_text would translate it).
    return (CORPUS / folder / name).read_bytes().decode("utf-8")


def read_version(text: str) -> int:
    return tomllib.loads(text).get("version", 1)


def leaves(value, path=()):
    """{path: value} for every scalar or array in a parsed TOML/JSON document."""
    if isinstance(value, dict):
        found = {}
        for key, child in value.items():
            found.update(leaves(child, path + (key,)))
        return found
    return {path: value}


def set_by_wiring(path: tuple) -> bool:
    """The keys the wiring may set (RuntimeWiring defaults), under any CRI plugin name."""
    if path[:1] == ("disabled_plugins",):
        return True
    if len(path) < 4 or path[0] != "plugins" or path[1] not in CRI_PLUGIN_IDS or path[2] != "containerd":
        return False
    rest = path[3:]
    return (
        rest == ("default_runtime_name",)
        or rest[:2] == ("runtimes", "nvidia")
        or rest == ("runtimes", "runc", "options", "SystemdCgroup")
    )


def comment_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def write_candidate(directory: Path, name: str, text: str) -> Path:
    # Relative `imports` resolve against the file's own directory: a fresh one per file.
    path = directory / name
    path.write_bytes(text.encode("utf-8"))
    return path


def assert_wired(dump: dict, major: int, name: str, suite: str) -> None:
    """What containerd will run, as its own dump shows it (documented CRI config keys)."""
    where = f"{name} on {suite}'s containerd"
    disabled = set(dump.get("disabled_plugins", [])) & CRI_PLUGIN_IDS
    assert not disabled, f"{where}: CRI is disabled ({sorted(disabled)})"
    plugin = "io.containerd.grpc.v1.cri" if major == 1 else "io.containerd.cri.v1.runtime"
    containerd = dump["plugins"][plugin]["containerd"]
    runtimes = containerd.get("runtimes", {})
    nvidia = runtimes.get("nvidia")
    assert nvidia, f"{where}: no runtimes.nvidia in plugins.{plugin}.containerd"
    assert nvidia.get("runtime_type") == "io.containerd.runc.v2", f"{where}: nvidia runtime_type {nvidia.get('runtime_type')!r}"
    assert nvidia.get("options", {}).get("BinaryName") == NVIDIA_BINARY, f"{where}: nvidia options {nvidia.get('options')}"
    assert nvidia["options"].get("SystemdCgroup") is True, f"{where}: nvidia SystemdCgroup not true"
    runc_options = runtimes.get("runc", {}).get("options", {})
    assert runc_options.get("SystemdCgroup") is True, f"{where}: runc SystemdCgroup not true ({runc_options})"
    assert containerd.get("default_runtime_name") == "nvidia", f"{where}: default_runtime_name {containerd.get('default_runtime_name')!r}"


def test_every_corpus_file_has_a_source_and_every_source_a_file():
    sources = tomllib.loads((CORPUS / "SOURCES.toml").read_text())["files"]
    files = {f"containerd/{name}" for name in CONTAINERD_FILES} | {f"docker/{name}" for name in DOCKER_FILES}
    assert not files - set(sources), f"corpus files without a SOURCES.toml entry: {sorted(files - set(sources))}"
    assert not set(sources) - files, f"SOURCES.toml entries without a file: {sorted(set(sources) - files)}"
    for name, entry in sources.items():
        assert {"project", "repository", "path", "done"} <= set(entry), f"{name}: incomplete source {entry}"


def test_corpus_is_real_configs_not_templates():
    for name in CONTAINERD_FILES + DOCKER_FILES:
        folder = "containerd" if name in CONTAINERD_FILES else "docker"
        text = corpus_text(folder, name)
        for directive in ("{{", "{%", "${"):
            assert directive not in text, f"{name} still holds a template directive {directive!r}"


def test_corpus_size():
    assert len(CONTAINERD_FILES) >= 45 and len(DOCKER_FILES) >= 18


@pytest.mark.parametrize("name", CONTAINERD_FILES)
def test_containerd_corpus_merge(name, tmp_path):
    text = corpus_text("containerd", name)
    if name in CONTAINERD_REFUSALS:
        with pytest.raises(ConfigError) as refused:
            merge_containerd_config(text, WIRING, source=name)
        message = str(refused.value)
        assert "\n" not in message and name in message, f"refusal is not one line naming the file: {message!r}"
        return
    try:
        merged = merge_containerd_config(text, WIRING, source=name)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and name in message, f"refusal is not one line naming the file: {message!r}"
        pytest.fail(f"merge refused {name} (not listed in CONTAINERD_REFUSALS): {message}")

    # Idempotent: merging the result again changes nothing.
    assert merge_containerd_config(merged.text, WIRING, source=name).text == merged.text, f"{name}: second merge changed it"

    # Comments and every key the wiring does not set are kept.
    kept = set(comment_lines(merged.text))
    lost = [line for line in comment_lines(text) if line not in kept]
    assert not lost, f"{name}: comments lost: {lost[:5]}"
    before, after = leaves(tomllib.loads(text)), leaves(tomllib.loads(merged.text))
    # (A merge that migrates the config version renames plugin sections, so key paths differ by
    # design: this key-by-key check then does not apply; the dumps below still check the wiring.)
    if read_version(merged.text) == read_version(text):
        changed = {path: (value, after.get(path, "<missing>")) for path, value in before.items()
                   if not set_by_wiring(path) and after.get(path, "<missing>") != value}
        assert not changed, f"{name}: keys the wiring does not set were changed: {dict(list(changed.items())[:5])}"
    disabled_after = set(tomllib.loads(merged.text).get("disabled_plugins", []))
    assert disabled_after == set(tomllib.loads(text).get("disabled_plugins", [])) - CRI_PLUGIN_IDS

    # Each real containerd that reads this config version runs it with the wiring.
    version = read_version(merged.text)
    for suite in READERS[version]:
        found = release(suite)
        (tmp_path / suite).mkdir()
        if (name, suite) in CONTAINERD_REFUSES_INPUT:
            original = write_candidate(tmp_path / suite, "config.toml", text)
            assert config_dump(found.binary, original).returncode != 0, f"{name} is listed as refused by {suite}'s containerd, but it is accepted"
            continue
        # On a node the merge knows the installed containerd: a version 2 file holding 2.x plugin
        # names (AKS for containerd 2) is wired where 2.x reads it.
        for_release = plan_wiring([ConfigFile("config.toml", text, name)], WIRING, found.major, found.version)
        candidate = write_candidate(tmp_path / suite, "config.toml", for_release[0][0].merged.text)
        dumped = config_dump(found.binary, candidate)
        assert dumped.returncode == 0, f"{name}: containerd {found.version} refuses the merged file: {dumped.stderr.strip()[-300:]}"
        assert_wired(tomllib.loads(dumped.stdout), found.major, name, f"{suite} {found.version}")


def docker_leaves_not_set_by_wiring(config: dict) -> dict:
    found = {}
    for path, value in leaves(config).items():
        if path == ("default-runtime",) or path[:2] == ("runtimes", "nvidia"):
            continue
        if path == ("exec-opts",):  # other options are kept, a cgroup driver becomes systemd's
            value = [opt for opt in value if not str(opt).replace(" ", "").startswith("native.cgroupdriver=")]
            if not value:
                continue
        found[path] = value
    return found


@pytest.mark.parametrize("name", DOCKER_FILES)
def test_docker_corpus_merge(name, tmp_path):
    text = corpus_text("docker", name)
    if name in DOCKER_REFUSALS:
        with pytest.raises(DaemonConfigError) as refused:
            parse_daemon_json(text, source=name)
        message = str(refused.value)
        assert "\n" not in message and name in message, f"refusal is not one line naming the file: {message!r}"
        return
    existing = parse_daemon_json(text, source=name)
    merged = merge_daemon_config(existing, WIRING)
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
        original = write_candidate(tmp_path, "original.json", text)
        assert dockerd_validate(dockerd(), original).returncode != 0, f"{name} is listed as refused by dockerd, but it is accepted"
        return
    candidate = write_candidate(tmp_path, "daemon.json", rendered)
    checked = dockerd_validate(dockerd(), candidate)
    assert checked.returncode == 0, f"{name}: dockerd 26 refuses the merged file: {(checked.stderr or checked.stdout).strip()[-300:]}"
