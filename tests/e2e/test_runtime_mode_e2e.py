"""
nvidia_runtime_mode end to end on real containerd 2.1.9 (sid's, installed into a bookworm node as
tests/e2e/test_cdi_e2e.py does) with real systemd.

Stand-ins, named in the test: the toolkit (tests/toolkit_repo.py's STAND-IN packages, test id
``standin-toolkit``) and the GPUs (device nodes made with mknod and a STAND-IN nvidia-smi, from
test_cdi_e2e.py). The stand-in package ships no /etc/nvidia-container-runtime/config.toml, so the
test puts one there written for it in the shape NVIDIA's package ships (settings, commented-out
settings, tables; a STAND-IN, its first line says so); with the real toolkit (GPU_NODE_LAB) the
package's own file is edited. What this shows for real: the mode is written keeping every other
line, containerd's own ``config dump`` shows the nvidia runtime passing ``cdi.k8s.io/*`` annotations
on, a second run changes nothing, ``auto`` puts the file back, unset leaves it alone, verify checks
the mode, and cdi=false with mode cdi stops the run before any change.
"""

from __future__ import annotations

import json

from harness import assert_no_change
from standin_toolkit import STANDIN_RUNTIME_CONFIG
from test_cdi_e2e import containerd_21_node
from toolkit_repo import STANDIN

from deploy.foundations.toml_layout import tomllib

RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CONFIG = "/etc/containerd/config.toml"
SET_MODE = f"CDI | Set the nvidia runtime's mode in {RUNTIME_CONFIG}"


def mode_in(text: str) -> str:
    return tomllib.loads(text)["nvidia-container-runtime"]["mode"]


def without_mode(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("mode ")]


def nvidia_runtime(node) -> dict:
    """The nvidia runtime as containerd's own ``config dump`` shows it."""
    dump = tomllib.loads(node.sh("containerd config dump").stdout)
    return dump["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"]


def verified(node, data: dict, report) -> dict:
    node.deploy(data={**data, "verify_report_path": str(report)}, deploy_file="deploy/verify.py")
    (record,) = json.loads(report.read_text())["nodes"]
    return {step["name"]: step for step in record["steps"]}


def test_the_runtimes_cdi_mode_on_containerd_2_1_with_standin_toolkit_and_standin_gpus(
    start_node, sid_containerd_image, toolkit_repo, tmp_path
):
    """STAND-IN toolkit (and its config file) and GPU device nodes; real containerd 2.1.9 and systemd."""
    node = containerd_21_node(start_node, sid_containerd_image)
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}

    # Unset: the runtime's config is the site's; the deploy does not touch it.
    provisioned = node.deploy(data=data)
    assert provisioned.returncode == 0, provisioned.explain()
    if toolkit_repo.kind == STANDIN:
        node.write(RUNTIME_CONFIG, STANDIN_RUNTIME_CONFIG)
    package = node.read(RUNTIME_CONFIG)
    assert nvidia_runtime(node)["container_annotations"] == []
    assert not any("runtime's mode" in name for name in provisioned.changed_operations())

    cdi_mode = {**data, "nvidia_runtime_mode": "cdi"}
    first = node.deploy(data=cdi_mode)
    assert first.returncode == 0, first.explain()
    assert SET_MODE in first.changed_operations(), first.changed_operations()
    written = node.read(RUNTIME_CONFIG)
    assert mode_in(written) == "cdi" and without_mode(written) == without_mode(package)  # every comment kept
    if toolkit_repo.kind == STANDIN:
        assert written == package.replace('mode = "auto"', 'mode = "cdi"')
    assert nvidia_runtime(node)["container_annotations"] == ["cdi.k8s.io/*"]
    assert_no_change(node.deploy(data=cdi_mode))
    steps = verified(node, cdi_mode, tmp_path / "cdi.json")
    assert steps["runtime_mode"]["status"] == "pass", steps["runtime_mode"]
    assert steps["containerd_config"]["status"] == "pass", steps["containerd_config"]

    # auto puts the package's mode back; containerd keeps passing the annotations on (docs/cdi.md),
    # so neither its config nor the service changes.
    containerd_before = {"config": node.stat(CONFIG), "service": node.service("containerd")}
    back = node.deploy(data={**data, "nvidia_runtime_mode": "auto"})
    assert back.changed_operations() == [SET_MODE], back.explain()
    assert mode_in(node.read(RUNTIME_CONFIG)) == "auto"
    if toolkit_repo.kind == STANDIN:
        assert node.read(RUNTIME_CONFIG) == package
    assert {"config": node.stat(CONFIG), "service": node.service("containerd")} == containerd_before
    assert_no_change(node.deploy(data=data))

    # cdi=false with mode cdi: one line, before any change.
    refused = node.deploy(data={**cdi_mode, "cdi": "false"})
    assert refused.returncode != 0
    assert "invalid setting nvidia_runtime_mode='cdi': allowed only with cdi=auto or true" in refused.stderr, (
        refused.explain()
    )
    assert mode_in(node.read(RUNTIME_CONFIG)) == "auto"

    # A file the edit cannot read is left byte for byte, and the host fails in one line.
    node.write(RUNTIME_CONFIG, package + "[nvidia-container-runtime\n")
    broken = node.stat(RUNTIME_CONFIG)
    failed = node.deploy(data=cdi_mode)
    assert failed.returncode != 0
    assert f"gpu-node: {RUNTIME_CONFIG} is not valid TOML" in failed.stderr, failed.explain()
    assert node.stat(RUNTIME_CONFIG) == broken and node.read(RUNTIME_CONFIG) == package + "[nvidia-container-runtime\n"


def test_cdi_mode_where_auto_leaves_cdi_off_on_containerd_1_6_is_refused_in_preflight(node):
    """Bookworm's real containerd 1.6.20 has no CDI, so cdi=auto leaves it off: mode cdi stops the host
    in preflight, in one line, with the runtime's config and containerd untouched."""
    runtimes = {"stages": "runtimes", "container_runtimes": "containerd"}
    assert node.deploy(data=runtimes).returncode == 0
    node.write(RUNTIME_CONFIG, STANDIN_RUNTIME_CONFIG)
    before = {"runtime": node.stat(RUNTIME_CONFIG), "file": node.stat(CONFIG), "service": node.service("containerd")}
    refused = node.deploy(data={**runtimes, "nvidia_runtime_mode": "cdi"})
    assert refused.returncode != 0
    assert "gpu-node: nvidia_runtime_mode=cdi, but CDI is off on this node (cdi=auto" in refused.stderr, (
        refused.explain()
    )
    assert not refused.changed_operations()
    assert {
        "runtime": node.stat(RUNTIME_CONFIG),
        "file": node.stat(CONFIG),
        "service": node.service("containerd"),
    } == before
