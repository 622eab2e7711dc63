"""Golden tests of the containerd merge: fixture files in, fixture files out, checked by real containerd."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import tomlkit
from harness import sid_containerd_deb

from deploy.foundations.toml_layout import ConfigError
from deploy.operations.containerd import default_config_text
from deploy.runtimes.containerd.cri import CRI_RUNTIME_PLUGIN, merge_containerd_config
from deploy.runtimes.wiring import RuntimeWiring

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "containerd"
CASES = sorted(path.parent.name for path in (FIXTURES / "merge").glob("*/expected.toml"))
# Shapes the merge must refuse: refused.txt holds the one line it says (source "config.toml").
REFUSED_CASES = sorted(path.parent.name for path in (FIXTURES / "merge").glob("*/refused.txt"))


def case(name: str) -> tuple[str, str, RuntimeWiring]:
    directory = FIXTURES / "merge" / name
    wiring_file = directory / "wiring.json"
    wiring = RuntimeWiring(**json.loads(wiring_file.read_text())) if wiring_file.exists() else RuntimeWiring()
    return (directory / "input.toml").read_text(), (directory / "expected.toml").read_text(), wiring


@pytest.mark.parametrize("name", CASES)
def test_merge_matches_the_golden_file_and_a_second_merge_changes_nothing(name):
    source, expected, wiring = case(name)
    assert merge_containerd_config(source, wiring).text == expected
    assert merge_containerd_config(expected, wiring).text == expected


@pytest.mark.parametrize("name", CASES)
def test_merged_config_wires_nvidia_under_the_plugin_of_its_version(name):
    source, expected, wiring = case(name)
    document = tomlkit.parse(expected).unwrap()
    version = document.get("version", 1)
    containerd = document["plugins"][CRI_RUNTIME_PLUGIN[version]]["containerd"]
    nvidia = containerd["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is wiring.systemd_cgroup
    assert containerd["runtimes"]["runc"]["options"]["SystemdCgroup"] is wiring.systemd_cgroup
    assert containerd["default_runtime_name"] == ("nvidia" if wiring.make_default else "runc")
    # Everything the input had is still there: every comment line, every other key.
    for line in source.splitlines():
        if line.strip().startswith("#") or " # " in line:
            assert line.strip() in expected, f"lost: {line!r}"
    assert "cri" not in document.get("disabled_plugins", [])


@pytest.mark.parametrize("name", REFUSED_CASES)
def test_shapes_the_merge_cannot_edit_are_refused_in_the_one_line_of_the_golden_file(name):
    directory = FIXTURES / "merge" / name
    with pytest.raises(ConfigError) as refused:
        merge_containerd_config((directory / "input.toml").read_text(), RuntimeWiring())
    assert str(refused.value) == (directory / "refused.txt").read_text().rstrip("\n")


def test_versions_map_to_their_plugin_paths():
    assert CRI_RUNTIME_PLUGIN == {
        1: "cri",
        2: "io.containerd.grpc.v1.cri",
        3: "io.containerd.cri.v1.runtime",
        4: "io.containerd.cri.v1.runtime",
    }


def test_registry_mirrors_imports_and_custom_runc_options_are_kept():
    _, mirrors, _ = case("v2-comments-mirrors")
    parsed = tomlkit.parse(mirrors).unwrap()
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"] == [
        "https://mirror.example.internal",
        "https://registry-1.docker.io",
    ]
    assert parsed["metrics"]["address"] == "127.0.0.1:1338" and parsed["oom_score"] == -999
    _, imports, _ = case("imports")
    assert tomlkit.parse(imports)["imports"] == ["/etc/containerd/conf.d/*.toml", "registry.toml"]
    _, custom, _ = case("runc-custom-options")
    runtimes = tomlkit.parse(custom).unwrap()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["runc"]["options"] == {
        "BinaryName": "/usr/local/sbin/runc",
        "NoNewKeyring": True,
        "SystemdCgroup": True,
    }
    assert runtimes["runc"]["pod_annotations"] == ["io.kubernetes.cri-o.*"]
    assert runtimes["runsc"] == {"runtime_type": "io.containerd.runsc.v1"}
    assert 'BinaryName = "/usr/local/sbin/runc"  # our patched runc' in custom


def test_disabled_cri_is_removed_and_said():
    source, _, wiring = case("disabled-plugins-cri")
    merged = merge_containerd_config(source, wiring)
    assert merged.notes == ['removed "cri" from disabled_plugins: Kubernetes needs containerd\'s CRI plugin']
    assert "disabled_plugins = []" in merged.text


def test_default_nvidia_goes_back_to_runc_when_not_wanted_as_default():
    source, _, wiring = case("not-default-any-more")
    merged = merge_containerd_config(source, wiring)
    assert any("set back to runc" in note for note in merged.notes)
    containerd = tomlkit.parse(merged.text)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert containerd["default_runtime_name"] == "runc"
    assert "nvidia" in containerd["runtimes"]  # still there, for a RuntimeClass


def test_enable_cdi_is_set_for_1x_and_left_to_2x():
    _, expected, _ = case("enable-cdi-1.7")
    assert tomlkit.parse(expected)["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] is True
    source, _, _ = case("v4")
    merged = merge_containerd_config(source, RuntimeWiring(enable_cdi=True))
    assert merged.notes == ["containerd 2.x has CDI on: enable_cdi left as it is"]


def test_the_cdi_spec_folder_is_appended_to_a_multi_line_list_whose_comments_stay():
    """Found by the merge's property test: the list set whole lost the comment beside its entry."""
    source = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
        "  cdi_spec_dirs = [\n"
        '    "/etc/cdi", # the site\'s specs\n'
        "    # more to come\n"
        "  ] # the folders\n"
    )
    merged = merge_containerd_config(source, RuntimeWiring(enable_cdi=True)).text
    for comment in ("# the site's specs", "# more to come", "# the folders"):
        assert comment in merged
    cri = tomlkit.parse(merged)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert merge_containerd_config(merged, RuntimeWiring(enable_cdi=True)).text == merged


@pytest.mark.parametrize("spec_dirs", ['["/etc/cdi", 5]', '"/opt/cdi"'])
def test_a_cdi_spec_dirs_containerd_cannot_read_is_refused_not_replaced(spec_dirs):
    """containerd (2.1, ``config dump``) refuses both shapes itself ("cannot decode TOML integer/string into
    ... CDISpecDirs"): the site's value is refused in one line, as container_annotations' is, not set over."""
    source = f'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  cdi_spec_dirs = {spec_dirs}\n'
    with pytest.raises(ConfigError) as refused:
        merge_containerd_config(source, RuntimeWiring(enable_cdi=True))
    assert str(refused.value) == (
        'config.toml: plugins."io.containerd.grpc.v1.cri".cdi_spec_dirs is not a list of strings'
    )


def test_invalid_toml_names_the_file_line_and_column():
    with pytest.raises(ConfigError) as error:
        merge_containerd_config(
            'version = 2\n[plugins\nfoo = "bar"\n', RuntimeWiring(), source="/etc/containerd/config.toml"
        )
    message = str(error.value)
    assert message.startswith("/etc/containerd/config.toml is not valid TOML: ")
    assert "line 2" in message and "col" in message


@pytest.mark.parametrize("text, shown", [("version = 5\n", "5"), ('version = "2"\n', "'2'")])
def test_unknown_config_version_is_refused(text, shown):
    with pytest.raises(ConfigError, match=f"unsupported config version {shown}"):
        merge_containerd_config(text, RuntimeWiring(), source="config.toml")


def test_runtimes_that_is_not_a_table_is_refused():
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "runc"\n'
    with pytest.raises(
        ConfigError, match='config.toml: plugins."io.containerd.grpc.v1.cri".containerd.runtimes is not a table'
    ):
        merge_containerd_config(text, RuntimeWiring(), source="config.toml")


def test_fallback_template_matches_the_binary_major_version():
    assert "version = 2" in default_config_text(1)
    assert '"io.containerd.grpc.v1.cri"' in default_config_text(1)
    assert "version = 3" in default_config_text(2)
    assert '"io.containerd.cri.v1.runtime"' in default_config_text(2)
    assert default_config_text(None) == default_config_text(1)


def _containerd_2(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("containerd-2")
    subprocess.run(["dpkg-deb", "-x", str(sid_containerd_deb()), str(root)], check=True)
    return str(root / "usr" / "bin" / "containerd")


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict[int, str | None]:
    """The real containerd binaries here: the machine's 1.x (docker.io's dependency), sid's 2.x."""
    return {1: shutil.which("containerd"), 2: _containerd_2(tmp_path_factory)}


@pytest.mark.parametrize("name", CASES)
def test_real_containerd_accepts_the_merged_file(name, binaries, tmp_path):
    """`containerd --config FILE config dump`: the check the safe install makes on a node."""
    _, expected, wiring = case(name)
    version = tomlkit.parse(expected).get("version", 1)
    if version == 4:
        pytest.skip("config version 4 needs containerd 2.2+, which no reachable Debian suite ships")
    binary = binaries[2 if version >= 3 else 1]
    assert binary, "no containerd 1.x on this machine: scripts/ensure-dockerd.sh installs docker.io with it"
    config = tmp_path / "config.toml"
    config.write_text(expected)
    # A relative import resolves next to the file, as on a node.
    (tmp_path / "registry.toml").write_text("")
    dump = subprocess.run(
        [binary, "--config", str(config), "config", "dump"], capture_output=True, text=True, timeout=60
    )
    assert dump.returncode == 0, dump.stderr
    dumped = tomlkit.parse(dump.stdout).unwrap()
    plugin = "io.containerd.grpc.v1.cri" if version < 3 else "io.containerd.cri.v1.runtime"
    nvidia = dumped["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is wiring.systemd_cgroup
