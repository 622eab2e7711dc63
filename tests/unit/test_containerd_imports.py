"""
Where the wiring takes effect among config.toml and the files it imports, and which config
versions the installed containerd would run it from: `plan_wiring`, on files NVIDIA's own
nvidia-ctk 1.20 and AKS wrote (tests/fixtures/corpus), each result checked by real containerd.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from containerd_releases import config_dump, release

from deploy.operations.containerd import (
    ConfigError,
    ConfigFile,
    RuntimeWiring,
    effective_problems,
    plan_wiring,
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus" / "containerd"
MAIN, DROP_IN = "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"


def corpus(name: str) -> str:
    return (CORPUS / name).read_text()


def nvidia_ctk_node() -> list[ConfigFile]:
    """config.toml and the drop-in as `nvidia-ctk runtime configure --runtime=containerd` left them."""
    return [ConfigFile(MAIN, corpus("nvidia-ctk-1.20-config-after-configure-bookworm-default.toml"), MAIN),
            ConfigFile(DROP_IN, corpus("nvidia-ctk-1.20-dropin-99-nvidia-bookworm-default.toml"), DROP_IN)]


def test_nvidia_ctk_drop_in_holds_the_cri_section_so_the_wiring_goes_there_and_config_toml_is_kept():
    files = nvidia_ctk_node()
    planned, holder = plan_wiring(files, RuntimeWiring(), major=1, containerd_version="1.6.20")
    assert holder == DROP_IN
    main, drop_in = planned
    assert main.merged.text == files[0].text
    wired = tomllib.loads(drop_in.merged.text)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert wired["default_runtime_name"] == "nvidia"
    assert wired["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert wired["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True


@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_real_containerd_1x_runs_the_wiring_placed_in_the_drop_in(suite, tmp_path):
    """The same files laid out as on a node, main importing the drop-in: 1.6 and 1.7's own dump."""
    found = release(suite)
    planned, _ = plan_wiring(nvidia_ctk_node(), RuntimeWiring(), found.major, found.version)
    (tmp_path / "conf.d").mkdir()
    main = tmp_path / "config.toml"
    main.write_text(planned[0].merged.text.replace("/etc/containerd/conf.d", str(tmp_path / "conf.d")))
    (tmp_path / "conf.d" / "99-nvidia.toml").write_text(planned[1].merged.text)
    dumped = config_dump(found.binary, main)
    assert dumped.returncode == 0, dumped.stderr
    assert effective_problems(dumped.stdout, RuntimeWiring()) == ('plugins."io.containerd.grpc.v1.cri".containerd', [])


@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_real_containerd_1x_ignores_a_wiring_in_config_toml_that_the_drop_in_overrides(suite, tmp_path):
    """Why the drop-in is the place: the wiring merged into config.toml alone does not run."""
    found = release(suite)
    files = nvidia_ctk_node()
    planned, _ = plan_wiring(files[:1], RuntimeWiring(), found.major, found.version)
    (tmp_path / "conf.d").mkdir()
    main = tmp_path / "config.toml"
    main.write_text(planned[0].merged.text.replace("/etc/containerd/conf.d", str(tmp_path / "conf.d")))
    (tmp_path / "conf.d" / "99-nvidia.toml").write_text(files[1].text)
    _, problems = effective_problems(config_dump(found.binary, main).stdout, RuntimeWiring())
    # nvidia-ctk's copy of the CRI section wins as a whole: no SystemdCgroup anywhere.
    assert problems == ["runtimes.runc.options.SystemdCgroup is false, not true (systemd_cgroup)",
                        "runtimes.nvidia.options.SystemdCgroup is false, not true (systemd_cgroup)"]


def test_a_drop_in_without_the_cri_section_leaves_the_wiring_in_config_toml():
    main = 'version = 2\nimports = ["conf.d/*.toml"]\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause"\n'
    other = 'version = 2\n[plugins."io.containerd.internal.v1.opt"]\n  path = "/opt/containerd"\n'
    planned, holder = plan_wiring([ConfigFile(MAIN, main, MAIN), ConfigFile(DROP_IN, other, DROP_IN)],
                                  RuntimeWiring(), major=1)
    assert holder == MAIN
    assert planned[1].merged.text == other
    assert "runtimes.nvidia" in planned[0].merged.text


def test_cri_disabled_in_an_imported_file_is_enabled_there_too():
    main = 'version = 2\nimports = ["conf.d/*.toml"]\n'
    other = 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
    planned, holder = plan_wiring([ConfigFile(MAIN, main, MAIN), ConfigFile(DROP_IN, other, DROP_IN)],
                                  RuntimeWiring(), major=1)
    assert holder == MAIN
    assert tomllib.loads(planned[1].merged.text)["disabled_plugins"] == []


@pytest.mark.parametrize("text", ["", "version = 1\n", "[plugins.cri.containerd]\n  snapshotter = 'native'\n"])
def test_version_1_on_containerd_2_is_refused_naming_the_version_and_what_to_do(text):
    with pytest.raises(ConfigError) as refused:
        plan_wiring([ConfigFile(MAIN, text, MAIN)], RuntimeWiring(), major=2, containerd_version="2.1.9")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{MAIN} is a version 1 config")
    assert "containerd 2.1.9 ignores its CRI settings (plugins.cri)" in message
    assert "version = 3" in message


def test_real_containerd_2_really_ignores_a_version_1_wiring(tmp_path):
    """The refusal above is needed: sid's 2.1 loads a wired version 1 file and runs no nvidia runtime."""
    found = release("sid")
    planned, _ = plan_wiring([ConfigFile(MAIN, "version = 1\n", MAIN)], RuntimeWiring(), major=1)
    config = tmp_path / "config.toml"
    config.write_text(planned[0].merged.text)
    dumped = config_dump(found.binary, config)
    assert dumped.returncode == 0, dumped.stderr
    assert "runtimes.nvidia is missing" in effective_problems(dumped.stdout, RuntimeWiring())[1]


def test_version_3_on_containerd_1_is_refused():
    with pytest.raises(ConfigError, match=r"is a version 3 config, which containerd 1\.6\.20 cannot read"):
        plan_wiring([ConfigFile(MAIN, "version = 3\n", MAIN)], RuntimeWiring(), major=1, containerd_version="1.6.20")


@pytest.mark.parametrize("name", ["aks-agentbaker-aksubuntu2404-networkpolicy.toml",
                                  "aks-agentbaker-aksubuntu2404-teleport.toml"])
def test_aks_version_2_file_with_2x_plugin_names_is_wired_where_containerd_2_reads_it(name, tmp_path):
    text = corpus(name)
    planned, _ = plan_wiring([ConfigFile(MAIN, text, name)], RuntimeWiring(), major=2, containerd_version="2.1.9")
    merged = tomllib.loads(planned[0].merged.text)
    assert "nvidia" in merged["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    config = tmp_path / "config.toml"
    config.write_text(planned[0].merged.text)
    dumped = config_dump(release("sid").binary, config)
    assert dumped.returncode == 0, dumped.stderr
    assert effective_problems(dumped.stdout, RuntimeWiring())[1] == []
