"""
What a merged containerd config.toml or Docker daemon.json must show, written from containerd's
and Docker's documented behaviour (not from the merge's code): read with the standard library
only. Shared by the real-world corpus tests (tests/unit/test_corpus_merge.py) and the project's
own config shapes (tests/unit/test_config_shapes.py).
"""

from __future__ import annotations

from pathlib import Path

import tomllib

NVIDIA_BINARY = "/usr/bin/nvidia-container-runtime"
# Every name under which containerd 1.x / 2.x can have CRI switched off.
CRI_PLUGIN_IDS = {"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"}


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


def kept_problems(text: str, merged: str) -> list[str]:
    """Comments lost, keys the wiring does not set changed, a non-CRI disabled plugin dropped."""
    problems = []
    kept = set(comment_lines(merged))
    problems += [f"comment lost: {line}" for line in comment_lines(text) if line not in kept]
    before, after = leaves(tomllib.loads(text)), leaves(tomllib.loads(merged))
    # A merge that migrates the config version renames plugin sections, so key paths differ by
    # design: this key-by-key check then does not apply (the real containerd's dump still does).
    if read_version(merged) == read_version(text):
        problems += [
            f"{'.'.join(path)}: {value!r} became {after.get(path, '<missing>')!r}"
            for path, value in before.items()
            if not set_by_wiring(path) and after.get(path, "<missing>") != value
        ]
    disabled_before = set(tomllib.loads(text).get("disabled_plugins", []))
    disabled_after = set(tomllib.loads(merged).get("disabled_plugins", []))
    if disabled_after != disabled_before - CRI_PLUGIN_IDS:
        problems.append(f"disabled_plugins {sorted(disabled_before)} became {sorted(disabled_after)}")
    return problems


def write_candidate(directory: Path, name: str, text: str) -> Path:
    # Relative `imports` resolve against the file's own directory: a fresh one per file.
    directory.mkdir(parents=True, exist_ok=True)
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
    assert nvidia.get("runtime_type") == "io.containerd.runc.v2", (
        f"{where}: nvidia runtime_type {nvidia.get('runtime_type')!r}"
    )
    assert nvidia.get("options", {}).get("BinaryName") == NVIDIA_BINARY, (
        f"{where}: nvidia options {nvidia.get('options')}"
    )
    assert nvidia["options"].get("SystemdCgroup") is True, f"{where}: nvidia SystemdCgroup not true"
    runc_options = runtimes.get("runc", {}).get("options", {})
    assert runc_options.get("SystemdCgroup") is True, f"{where}: runc SystemdCgroup not true ({runc_options})"
    assert containerd.get("default_runtime_name") == "nvidia", (
        f"{where}: default_runtime_name {containerd.get('default_runtime_name')!r}"
    )


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
