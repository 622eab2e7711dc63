"""
A node where NVIDIA's own documented step ran first: `nvidia-ctk runtime configure
--runtime=containerd` (the REAL NVIDIA Container Toolkit 1.20.0, from the test lab) on Debian
bookworm's containerd 1.6. It wrote /etc/containerd/conf.d/99-nvidia.toml holding a copy of the
whole CRI section and added `imports` to config.toml; containerd 1.6 takes that imported section
as a whole, so a wiring merged into config.toml alone would never run.
"""

from __future__ import annotations

import json

from harness import assert_no_change
from test_containerd_e2e import run_through_nvidia_handler

CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
PLUGIN = "io.containerd.grpc.v1.cri"


def test_real_nvidia_ctk_drop_in_node_converges_verify_passes_and_second_run_changes_nothing(
    node, toolkit_repo, tmp_path
):
    report = tmp_path / "report.json"
    toolkit = node.deploy(data={"stages": "toolkit", **toolkit_repo.data()})
    assert toolkit.returncode == 0, toolkit.explain()
    node.sh("apt-get install -y -q containerd >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q containerd)",
            timeout=600)
    node.sh("nvidia-ctk runtime configure --runtime=containerd && systemctl restart containerd")
    assert node.exists(DROP_IN), "nvidia-ctk 1.20 writes its drop-in"
    assert "conf.d" in node.read(CONFIG), "and imports it from config.toml"
    main_before = node.stat(CONFIG)

    data = {"stages": "runtimes,verify", "container_runtimes": "containerd",
            "verify_report_path": str(report), **toolkit_repo.data()}
    first = node.deploy(data=data, default_mode=True)
    assert first.returncode == 0 and report.exists(), first.explain()
    assert first.changed_operations() == [f"containerd | Wire the nvidia runtime into {CONFIG}"], first.explain()
    steps = {step["name"]: step for step in json.loads(report.read_text())["nodes"][0]["steps"]}
    assert steps["containerd_config"]["status"] == "pass", steps["containerd_config"]

    # The wiring went where containerd 1.6 takes it from; config.toml stays byte for byte.
    assert node.stat(CONFIG) == main_before
    drop_in = node.read(DROP_IN)
    assert "SystemdCgroup = true" in drop_in and 'default_runtime_name = "nvidia"' in drop_in
    resolved = node.sh("containerd config dump").stdout
    assert 'default_runtime_name = "nvidia"' in resolved
    run_through_nvidia_handler(node, PLUGIN)

    restarted = node.service("containerd")
    assert_no_change(node.deploy(data=data))
    assert_no_change(node.deploy(data=data, default_mode=True))
    assert node.service("containerd") == restarted, "a re-run restarted containerd"


def test_a_drop_in_that_overrides_the_wiring_is_named_and_nothing_is_changed(node, toolkit_repo):
    """The drop-in is newer than the wiring and holds a CRI section the merge cannot edit (its
    runtimes is not a table): the run fails naming the file, and no file changes."""
    node.deploy(data={"stages": "toolkit", **toolkit_repo.data()})
    node.sh("apt-get install -y -q containerd >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q containerd)",
            timeout=600)
    node.write(CONFIG, 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    node.write(DROP_IN, f'version = 2\n[plugins."{PLUGIN}".containerd]\n  runtimes = "runc"\n')
    before = (node.stat(CONFIG), node.stat(DROP_IN))
    result = node.deploy(data={"stages": "runtimes", "container_runtimes": "containerd",
                               **toolkit_repo.data()}, json_output=False)
    assert result.returncode != 0
    assert f'{DROP_IN}: plugins."{PLUGIN}".containerd.runtimes is not a table' in result.output
    assert "Traceback" not in result.output
    assert (node.stat(CONFIG), node.stat(DROP_IN)) == before
