"""
Where the wiring takes effect among config.toml and the files it imports, and which config
versions the installed containerd would run it from: `plan_wiring`, each result checked by real
containerd. The layouts are written here (always run) and, where the real-world corpus is there
(GPU_NODE_CORPUS: tests/corpus.py), also taken from the files NVIDIA's own nvidia-ctk 1.20 and
AKS wrote.
"""

from __future__ import annotations

import pytest
import tomllib
from containerd_releases import config_dump, release
from corpus import corpus_file, read_text

from deploy.foundations.toml_layout import ConfigError
from deploy.operations.containerd import ConfigFile, plan_wiring
from deploy.runtimes.containerd.cri import effective_problems
from deploy.runtimes.wiring import RuntimeWiring

MAIN, DROP_IN = "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"

# nvidia-ctk's layout, written for these tests: config.toml imports conf.d, and the drop-in holds
# a copy of the whole CRI section with the nvidia runtime added (SystemdCgroup as runc had it).
OWN_MAIN = """\
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
oom_score = -500

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example.internal/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""
OWN_DROP_IN = """\
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example.internal/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "nvidia"
    snapshotter = "overlayfs"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = false

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def drop_in_node(layout: str) -> list[ConfigFile]:
    """config.toml and the drop-in as `nvidia-ctk runtime configure --runtime=containerd` leaves them:
    written here ("own"), or the real tool's output from the corpus ("nvidia-ctk-1.20")."""
    if layout == "own":
        main, drop_in = OWN_MAIN, OWN_DROP_IN
    else:
        main = read_text(corpus_file("containerd/nvidia-ctk-1.20-config-after-configure-bookworm-default.toml"))
        drop_in = read_text(corpus_file("containerd/nvidia-ctk-1.20-dropin-99-nvidia-bookworm-default.toml"))
    return [ConfigFile(MAIN, main, MAIN), ConfigFile(DROP_IN, drop_in, DROP_IN)]


LAYOUTS = ["own", "nvidia-ctk-1.20"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_drop_in_holding_the_cri_section_gets_the_wiring_and_config_toml_is_kept(layout):
    files = drop_in_node(layout)
    planned, holder = plan_wiring(files, RuntimeWiring(), major=1, containerd_version="1.6.20")
    assert holder == DROP_IN
    main, drop_in = planned
    assert main.text == files[0].text
    wired = tomllib.loads(drop_in.text)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert wired["default_runtime_name"] == "nvidia"
    assert wired["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert wired["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_real_containerd_1x_runs_the_wiring_placed_in_the_drop_in(suite, layout, tmp_path):
    """The same files laid out as on a node, main importing the drop-in: 1.6 and 1.7's own dump."""
    files = drop_in_node(layout)
    found = release(suite)
    planned, _ = plan_wiring(files, RuntimeWiring(), found.major, found.version)
    (tmp_path / "conf.d").mkdir()
    main = tmp_path / "config.toml"
    main.write_text(planned[0].text.replace("/etc/containerd/conf.d", str(tmp_path / "conf.d")))
    (tmp_path / "conf.d" / "99-nvidia.toml").write_text(planned[1].text)
    dumped = config_dump(found.binary, main)
    assert dumped.returncode == 0, dumped.stderr
    assert effective_problems(dumped.stdout, RuntimeWiring()) == ('plugins."io.containerd.grpc.v1.cri".containerd', [])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_real_containerd_1x_ignores_a_wiring_in_config_toml_that_the_drop_in_overrides(suite, layout, tmp_path):
    """Why the drop-in is the place: the wiring merged into config.toml alone does not run."""
    files = drop_in_node(layout)
    found = release(suite)
    planned, _ = plan_wiring(files[:1], RuntimeWiring(), found.major, found.version)
    (tmp_path / "conf.d").mkdir()
    main = tmp_path / "config.toml"
    main.write_text(planned[0].text.replace("/etc/containerd/conf.d", str(tmp_path / "conf.d")))
    (tmp_path / "conf.d" / "99-nvidia.toml").write_text(files[1].text)
    _, problems = effective_problems(config_dump(found.binary, main).stdout, RuntimeWiring())
    # The drop-in's copy of the CRI section wins as a whole: no SystemdCgroup anywhere.
    assert problems == [
        "runtimes.runc.options.SystemdCgroup is false, not true (systemd_cgroup)",
        "runtimes.nvidia.options.SystemdCgroup is false, not true (systemd_cgroup)",
    ]


def test_a_drop_in_without_the_cri_section_leaves_the_wiring_in_config_toml():
    main = (
        'version = 2\nimports = ["conf.d/*.toml"]\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause"\n'
    )
    other = 'version = 2\n[plugins."io.containerd.internal.v1.opt"]\n  path = "/opt/containerd"\n'
    planned, holder = plan_wiring(
        [ConfigFile(MAIN, main, MAIN), ConfigFile(DROP_IN, other, DROP_IN)], RuntimeWiring(), major=1
    )
    assert holder == MAIN
    assert planned[1].text == other
    assert "runtimes.nvidia" in planned[0].text


def test_cri_disabled_in_an_imported_file_is_enabled_there_too():
    main = 'version = 2\nimports = ["conf.d/*.toml"]\n'
    other = 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
    planned, holder = plan_wiring(
        [ConfigFile(MAIN, main, MAIN), ConfigFile(DROP_IN, other, DROP_IN)], RuntimeWiring(), major=1
    )
    assert holder == MAIN
    assert tomllib.loads(planned[1].text)["disabled_plugins"] == []


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
    config.write_text(planned[0].text)
    dumped = config_dump(found.binary, config)
    assert dumped.returncode == 0, dumped.stderr
    assert "runtimes.nvidia is missing" in effective_problems(dumped.stdout, RuntimeWiring())[1]


def test_version_3_on_containerd_1_is_refused():
    with pytest.raises(ConfigError, match=r"is a version 3 config, which containerd 1\.6\.20 cannot read"):
        plan_wiring([ConfigFile(MAIN, "version = 3\n", MAIN)], RuntimeWiring(), major=1, containerd_version="1.6.20")


# AKS's layout for containerd 2, written for these tests: a version 2 file whose plugin sections
# already carry 2.x's names (io.containerd.cri.v1.*), which containerd 1.x would not read.
OWN_V2_WITH_2X_NAMES = """\
version = 2
oom_score = -500

[plugins."io.containerd.cri.v1.images".registry]
  config_path = "/etc/containerd/certs.d"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      SystemdCgroup = true
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.sandboxed]
    runtime_type = "io.containerd.runc.v2"
"""


@pytest.mark.parametrize(
    "name", ["own", "aks-agentbaker-aksubuntu2404-networkpolicy.toml", "aks-agentbaker-aksubuntu2404-teleport.toml"]
)
def test_version_2_file_with_2x_plugin_names_is_wired_where_containerd_2_reads_it(name, tmp_path):
    text = OWN_V2_WITH_2X_NAMES if name == "own" else read_text(corpus_file(f"containerd/{name}"))
    planned, _ = plan_wiring([ConfigFile(MAIN, text, name)], RuntimeWiring(), major=2, containerd_version="2.1.9")
    merged = tomllib.loads(planned[0].text)
    assert "nvidia" in merged["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    config = tmp_path / "config.toml"
    config.write_text(planned[0].text)
    dumped = config_dump(release("sid").binary, config)
    assert dumped.returncode == 0, dumped.stderr
    assert effective_problems(dumped.stdout, RuntimeWiring())[1] == []
