"""
A node where NVIDIA's own documented step ran first: `nvidia-ctk runtime configure
--runtime=containerd --set-as-default` (NVIDIA Container Toolkit 1.20.0) on Debian bookworm's
containerd 1.6. The node is laid out from that tool's real output, kept in the real-world corpus
(GPU_NODE_CORPUS, tests/corpus.py): the config.toml it rewrote, now importing
/etc/containerd/conf.d/*.toml, and the /etc/containerd/conf.d/99-nvidia.toml it wrote, holding a
copy of the whole CRI section. containerd 1.6 takes the imported section as a whole, so a wiring
merged into config.toml alone would never run.

Two runs of it are kept: on bookworm's default config, where runc's SystemdCgroup = false is
copied to the nvidia runtime (gpu-node must rewire the drop-in), and on k3s's generated config
(run, like the other, in /etc/containerd), where runc already had it true (gpu-node must find the
wiring in effect and change nothing).
"""

from __future__ import annotations

import json

import pytest
from corpus import corpus_file, read_text
from harness import assert_no_change
from test_containerd_e2e import run_through_nvidia_handler

from deploy.runtimes.containerd.cri import effective_problems
from deploy.runtimes.wiring import RuntimeWiring

CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
PLUGIN = "io.containerd.grpc.v1.cri"
INSTALL_CONTAINERD = (
    "apt-get install -y -q containerd >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q containerd)"
)


# nvidia-ctk's run on each config -> whether it left in effect the wiring gpu-node wants.
ALREADY_WIRED = {"bookworm-default": False, "k3s": True}


@pytest.fixture(params=list(ALREADY_WIRED))
def nvidia_ctk_output(request) -> tuple[str, str, str]:
    """The layout, config.toml and 99-nvidia.toml as nvidia-ctk 1.20 left them (skips without the corpus)."""
    main = corpus_file(f"containerd/nvidia-ctk-1.20-config-after-configure-{request.param}.toml")
    drop_in = corpus_file(f"containerd/nvidia-ctk-1.20-dropin-99-nvidia-{request.param}.toml")
    return request.param, read_text(main), read_text(drop_in)


def test_nvidia_ctk_drop_in_node_converges_verify_passes_and_second_run_changes_nothing(
    nvidia_ctk_output, node, toolkit_repo, tmp_path
):
    layout, main_text, drop_in_text = nvidia_ctk_output
    already_wired = ALREADY_WIRED[layout]
    report = tmp_path / "report.json"
    toolkit = node.deploy(data={"stages": "toolkit", **toolkit_repo.data()})
    assert toolkit.returncode == 0, toolkit.explain()
    node.sh(INSTALL_CONTAINERD, timeout=600)
    node.write(CONFIG, main_text)
    node.write(DROP_IN, drop_in_text)
    node.sh("systemctl restart containerd")
    assert node.is_active("containerd"), f"containerd does not start on nvidia-ctk's files ({layout}) as it wrote them"
    # As nvidia-ctk left it: its drop-in's nvidia runtime in effect, with runc's cgroup driver copied.
    _, problems = effective_problems(node.sh("containerd config dump").stdout, RuntimeWiring())
    if already_wired:
        assert problems == [], problems
    else:
        assert "runtimes.nvidia.options.SystemdCgroup is false, not true (systemd_cgroup)" in problems, problems
    before = {"config": node.stat(CONFIG), "drop_in": node.stat(DROP_IN), "service": node.service("containerd")}

    data = {
        "stages": "runtimes,verify",
        "container_runtimes": "containerd",
        "verify_report_path": str(report),
        **toolkit_repo.data(),
    }
    first = node.deploy(data=data, default_mode=True)
    assert first.returncode == 0 and report.exists(), first.explain()
    wired = [] if already_wired else [f"containerd | Wire the nvidia runtime into {CONFIG}"]
    # and, on a first run, the /dev/char link script and its udev rule (deploy/tasks/devices.py)
    device_links = [
        "NVIDIA device links | Put the /dev/char link script for NVIDIA's device nodes",
        "NVIDIA device links | Link NVIDIA's device nodes in /dev/char when the driver binds (udev)",
    ]
    assert first.changed_operations() == wired + device_links, first.explain()
    steps = {step["name"]: step for step in json.loads(report.read_text())["nodes"][0]["steps"]}
    assert steps["containerd_config"]["status"] == "pass", steps["containerd_config"]

    # The wiring went where containerd 1.6 takes it from; config.toml stays byte for byte.
    assert node.stat(CONFIG) == before["config"]
    if already_wired:
        assert (node.stat(DROP_IN), node.service("containerd")) == (before["drop_in"], before["service"])
    drop_in = node.read(DROP_IN)
    assert "SystemdCgroup = true" in drop_in and 'default_runtime_name = "nvidia"' in drop_in
    resolved = node.sh("containerd config dump").stdout
    assert 'default_runtime_name = "nvidia"' in resolved
    assert effective_problems(resolved, RuntimeWiring())[1] == []
    run_through_nvidia_handler(node, PLUGIN, toolkit_repo)

    restarted = node.service("containerd")
    assert_no_change(node.deploy(data=data))
    assert_no_change(node.deploy(data=data, default_mode=True))
    assert node.service("containerd") == restarted, "a re-run restarted containerd"


def test_a_drop_in_that_overrides_the_wiring_is_named_and_nothing_is_changed(node, toolkit_repo):
    """The drop-in is newer than the wiring and holds a CRI section the merge cannot edit (its
    runtimes is not a table): the run fails naming the file, and no file changes."""
    node.deploy(data={"stages": "toolkit", **toolkit_repo.data()})
    node.sh(INSTALL_CONTAINERD, timeout=600)
    node.write(CONFIG, 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    node.write(DROP_IN, f'version = 2\n[plugins."{PLUGIN}".containerd]\n  runtimes = "runc"\n')
    before = (node.stat(CONFIG), node.stat(DROP_IN))
    result = node.deploy(
        data={"stages": "runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}, json_output=False
    )
    assert result.returncode != 0
    assert f'{DROP_IN}: plugins."{PLUGIN}".containerd.runtimes is not a table' in result.output
    assert "Traceback" not in result.output
    assert (node.stat(CONFIG), node.stat(DROP_IN)) == before
