"""containerd facts and the installation -> config target table, from fixture command output."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from deploy.facts.containerd import ContainerdConfig, ContainerdInstallations, parse_containerd_version
from deploy.runtimes.containerd.installations import K0S_DROPIN_BASE, classify_installation, config_target
from deploy.settings import parse_settings

INSTALLATIONS = Path(__file__).resolve().parents[1] / "fixtures" / "containerd" / "installations"
EXPECTED = json.loads((INSTALLATIONS / "expected.json").read_text())


@pytest.mark.parametrize(
    "line, version, major, minor",
    [
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", "1.6.20~ds1", 1, 6),
        ("containerd containerd.io 1.7.21 472731909fa34bd7bc9c087e4c27943f9835f111", "1.7.21", 1, 7),
        ("containerd github.com/containerd/containerd/v2 2.1.9+unknown ", "2.1.9+unknown", 2, 1),
        ("containerd github.com/containerd/containerd/v2 v2.1.9 abcdef", "2.1.9", 2, 1),
        ("containerd github.com/k3s-io/containerd v1.7.23-k3s2", "1.7.23-k3s2", 1, 7),
        ("", None, None, None),
    ],
)
def test_containerd_version(line, version, major, minor):
    assert parse_containerd_version(line) == {"version": version, "major": major, "minor": minor}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_config_fact_reads_the_file_byte_for_byte():
    text = "# note\r\nversion = 2\n\n\t[plugins]  \n"
    state = ContainerdConfig().process(
        [
            "binary_path /usr/bin/containerd",
            "version containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3",
            f"config {b64(text)}",
        ]
    )
    assert state["config"] == text and state["binary_path"] == "/usr/bin/containerd"
    assert (state["major"], state["minor"]) == (1, 6) and state["default_config"] is None


def test_config_fact_missing_file_gives_the_default_and_an_empty_default_is_none():
    state = ContainerdConfig().process(["binary_path /usr/bin/containerd", f"default_config {b64('version = 3')}"])
    assert state["config"] is None and state["default_config"] == "version = 3"
    assert ContainerdConfig().process(["binary_path /usr/bin/containerd", "default_config"])["default_config"] is None
    assert ContainerdConfig().process(["binary_path"]) == ContainerdConfig.default()


def test_config_fact_keeps_an_empty_file_as_empty():
    assert ContainerdConfig().process(["binary_path", "config"])["config"] == ""


def test_config_fact_command_reads_base_then_default():
    command = str(ContainerdConfig().command("/etc/containerd/config.toml", base_path="/x/config.toml").get_raw_value())
    assert (
        command.index("/etc/containerd/config.toml") < command.index("/x/config.toml") < command.index("config default")
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_installation_and_where_its_nvidia_runtime_goes(name):
    containerd_found = ContainerdInstallations().process((INSTALLATIONS / f"{name}.txt").read_text().splitlines())
    containerd_found["installation"] = classify_installation(containerd_found)
    assert containerd_found["installation"] == EXPECTED[name]["installation"]
    target = config_target(parse_settings({}).containerd_config_path, containerd_found)
    shown = {key: getattr(target, key) for key in EXPECTED[name]["target"]}
    assert shown == EXPECTED[name]["target"]


def test_k3s_and_rke2_never_touch_etc_containerd_and_k0s_starts_from_an_empty_dropin():
    for name in ("k3s-agent-v3", "k3s-server-existing-template", "rke2-agent-v2", "k0s-worker", "microk8s"):
        containerd_found = ContainerdInstallations().process((INSTALLATIONS / f"{name}.txt").read_text().splitlines())
        containerd_found["installation"] = classify_installation(containerd_found)
        settings = parse_settings({"containerd_config_path": "/etc/containerd/config.toml"})
        target = config_target(settings.containerd_config_path, containerd_found)
        assert not target.path.startswith("/etc/containerd/")
    k0s = ContainerdInstallations().process((INSTALLATIONS / "k0s-worker.txt").read_text().splitlines())
    k0s["installation"] = classify_installation(k0s)
    assert config_target(parse_settings({}).containerd_config_path, k0s).initial_text == K0S_DROPIN_BASE


def test_plain_target_follows_the_setting():
    containerd_found = {
        "paths": [],
        "units": {},
        "generated_versions": {},
        "binary": None,
        "installation": {"name": "plain", "service": "containerd"},
    }
    settings = parse_settings({"containerd_config_path": "/srv/ctr.toml"})
    assert config_target(settings.containerd_config_path, containerd_found).path == "/srv/ctr.toml"


def test_imports_are_globbed_relative_to_the_config_folder_in_byte_order_by_a_real_shell(tmp_path):
    """ContainerdImports' command run by a real sh, as on a node: containerd's glob order is Go's (bytes)."""
    import subprocess

    from deploy.facts.containerd import ContainerdImports

    (tmp_path / "conf.d").mkdir()
    for name, text in (("b.toml", "version = 2\n"), ("A.toml", "# A\n"), ("a.toml", "# a\n"), ("skip.conf", "")):
        (tmp_path / "conf.d" / name).write_text(text)
    (tmp_path / "extra.toml").write_text("# extra\n")
    command = ContainerdImports().command(str(tmp_path), ["conf.d/*.toml", str(tmp_path / "extra.toml"), "none/*.toml"])
    output = subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True, check=True).stdout
    files = ContainerdImports().process(output.splitlines())
    assert [file["path"] for file in files] == [
        f"{tmp_path}/conf.d/A.toml",
        f"{tmp_path}/conf.d/a.toml",
        f"{tmp_path}/conf.d/b.toml",
        f"{tmp_path}/extra.toml",
    ]
    assert files[2]["text"] == "version = 2\n"


def test_imported_files_whose_names_hold_spaces_quotes_and_substitutions_are_read_whole(tmp_path):
    """The node's own file names, run through the fact's command by a real sh: none is split or run."""
    import subprocess

    from deploy.facts.containerd import ContainerdImports

    folder = tmp_path / "conf d"
    folder.mkdir()
    names = ["it's $(touch pwned).toml", "a `touch pwned` b.toml", "c; touch pwned.toml"]
    for name in names:
        (folder / name).write_text(f"# {name}\n")
    command = ContainerdImports().command(str(tmp_path), ["conf d/*.toml"]).get_raw_value()
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    files = ContainerdImports().process(output.splitlines())
    assert sorted(file["path"] for file in files) == sorted(f"{folder}/{name}" for name in names)
    assert all(file["text"] == f"# {file['path'].rsplit('/', 1)[1]}\n" for file in files)
    assert not (tmp_path / "pwned").exists() and not (folder / "pwned").exists()


def _config_fact_on(tmp_path, dump_script: str) -> dict:
    """The fact's own command run by sh against a scripted `containerd` (its dump answer is ``dump_script``)."""
    binary = tmp_path / "containerd"
    binary.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--version*) echo "containerd github.com/containerd/containerd/v2 2.1.9 x";;\n'
        f"*dump*) {dump_script};;\nesac\n"
    )
    binary.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text("version = 3\n")
    command = ContainerdConfig().command(str(config), binary=str(binary)).get_raw_value()
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    return ContainerdConfig().process(output.splitlines())


def test_config_fact_keeps_the_dump_and_its_exit_code(tmp_path):
    state = _config_fact_on(tmp_path, "printf 'version = 3\\n[plugins]\\n'")
    assert (state["dump"], state["dump_exit_code"], state["dump_error"]) == ("version = 3\n[plugins]", 0, None)


def test_a_failed_dump_is_its_error_not_a_config(tmp_path):
    state = _config_fact_on(tmp_path, "echo 'containerd: failed to load TOML: invalid' >&2; exit 1")
    assert state["dump"] is None and state["dump_exit_code"] == 1
    assert state["dump_error"] == "containerd: failed to load TOML: invalid"
