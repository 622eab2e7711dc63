"""
containerd wired to the NVIDIA runtime on real bookworm node containers: Debian's containerd 1.6
(config version 2) and sid's containerd 2.1 (config version 3), an unparsable config, a rollback.

The toolkit is the one tests/toolkit_repo.py serves: the STAND-IN packages (test id
``standin-toolkit``) or NVIDIA's debs from the opt-in lab (``real-toolkit``). The runtime's own log
of the ``create`` call for the test container's id proves the container went through the binary
the config names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomlkit
from corpus import corpus_file
from harness import REPO, assert_no_change, run, wait_for
from harness import busybox_image_tar as harness_busybox_image_tar

from deploy.operations.safe_install import BACKUP_INFIX

CONFIG = "/etc/containerd/config.toml"
FIXTURES = REPO / "tests" / "fixtures" / "containerd" / "merge"
# Version 1 (no `version` key): the CRI plugin is plugins.cri, which containerd 2.x ignores.
VERSION_1_CONFIG = """\
# written by a site's old provisioning template
[plugins.cri]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins.cri.containerd]
    snapshotter = "overlayfs"
    [plugins.cri.containerd.default_runtime]
      runtime_type = "io.containerd.runc.v2"
"""
IMAGE = "gpu-node-test/busybox:static"
WIRE_OP = f"containerd | Wire the nvidia runtime into {CONFIG}"


def busybox_image_tar() -> Path:
    return harness_busybox_image_tar(IMAGE, ("sh", "true", "echo", "cat"))


def copy_in(node, source: Path, dest: str) -> None:
    run(["docker", "cp", str(source), f"{node.id}:{dest}"])


def dump(node) -> dict:
    return tomlkit.parse(node.sh("containerd config dump").stdout).unwrap()


def run_through_nvidia_handler(node, plugin: str, toolkit_repo) -> None:
    """
    Run a container with the runc v2 shim and the binary the nvidia handler names in containerd's
    own resolved config (`ctr` does not read CRI handlers; the CRI path is tests/e2e/test_verify.py's),
    and prove from the runtime's own log that it handled the container's `create`.
    """
    binary = dump(node)["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"]
    copy_in(node, busybox_image_tar(), "/tmp/busybox-image.tar")
    node.sh("ctr -n k8s.io image import --all-platforms /tmp/busybox-image.tar")
    toolkit_repo.enable_runtime_log(node)
    container_id = "gpu-node-nvidia-check"
    assert not toolkit_repo.runtime_created(node, container_id)
    out = node.sh(
        f"ctr -n k8s.io run --rm --runtime io.containerd.runc.v2 --runc-binary {binary} "
        f"docker.io/{IMAGE} {container_id} /bin/echo through-nvidia-container-runtime",
        timeout=120,
    )
    assert out.stdout.strip() == "through-nvidia-container-runtime", out
    assert toolkit_repo.runtime_created(node, container_id), toolkit_repo.runtime_log(node)


def assert_wired(node, plugin: str, comments: list[str]) -> None:
    resolved = dump(node)["plugins"][plugin]["containerd"]
    nvidia = resolved["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True
    assert resolved["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert resolved["default_runtime_name"] == "nvidia"
    text = node.read(CONFIG)
    for comment in comments:
        assert comment in text
    assert node.sh(f"stat -c '%a %U:%G' {CONFIG}").stdout.strip() == "644 root:root"
    assert node.is_active("containerd")


def test_containerd_16_config_v2_keeps_site_settings_runs_through_the_nvidia_runtime_and_reruns_unchanged(
    start_node, toolkit_repo
):
    """The toolkit is tests/toolkit_repo.py's: the STAND-IN packages (test id standin-toolkit), NVIDIA's own debs
    only with GPU_NODE_LAB (real-toolkit); containerd, Docker, runc and systemd are Debian's, real. No GPU."""
    node = start_node()
    seeded = (FIXTURES / "v2-comments-mirrors" / "input.toml").read_text()
    node.write(CONFIG, seeded)
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert "containerd | Install containerd" in first.changed_operations()
    assert WIRE_OP in first.changed_operations()
    assert node.sh("containerd --version").stdout.split()[2].startswith("1.6.")

    comments = [line.strip() for line in seeded.splitlines() if "#" in line]
    assert_wired(node, "io.containerd.grpc.v1.cri", comments)
    resolved = dump(node)
    cri = resolved["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.example.internal/pause:3.9"
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"][0] == "https://mirror.example.internal"
    assert resolved["oom_score"] == -999 and resolved["metrics"]["address"] == "127.0.0.1:1338"
    backups = node.sh(f"ls {CONFIG}{BACKUP_INFIX}*").stdout.split()
    assert len(backups) == 1 and node.read(backups[0]) == seeded

    run_through_nvidia_handler(node, "io.containerd.grpc.v1.cri", toolkit_repo)

    before = {"service": node.service("containerd"), "file": node.stat(CONFIG)}
    second = node.deploy(data=data)
    assert_no_change(second)
    assert {"service": node.service("containerd"), "file": node.stat(CONFIG)} == before


def test_containerd_21_missing_config_created_from_its_own_default_v3_and_runs_through_the_nvidia_runtime(
    start_node, sid_containerd_image, toolkit_repo
):
    """The toolkit is tests/toolkit_repo.py's: the STAND-IN packages (test id standin-toolkit), NVIDIA's own debs
    only with GPU_NODE_LAB (real-toolkit); containerd, Docker, runc and systemd are Debian's, real (sid's
    containerd in the node image). No GPU."""
    node = start_node(image=sid_containerd_image)
    # Debian ships a version 2 config.toml even with 2.1: remove it, so the deploy takes the
    # binary's own `containerd config default` (version 3).
    node.sh(f"rm {CONFIG} && systemctl restart containerd")
    data = {"stages": "toolkit,runtimes", "container_runtimes": "containerd", **toolkit_repo.data()}

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert "containerd | Install containerd" not in first.changed_operations()
    assert "is missing: creating it from `containerd config default`" in first.stderr
    text = node.read(CONFIG)
    assert text.startswith("version = 3\n")
    assert node.sh("containerd --version").stdout.split()[2].startswith("2.1.")
    assert_wired(node, "io.containerd.cri.v1.runtime", [])
    assert not node.sh(f"ls {CONFIG}{BACKUP_INFIX}* 2>/dev/null || true").stdout.strip()

    run_through_nvidia_handler(node, "io.containerd.cri.v1.runtime", toolkit_repo)

    before = {"service": node.service("containerd"), "file": node.stat(CONFIG)}
    second = node.deploy(data=data)
    assert_no_change(second)
    assert {"service": node.service("containerd"), "file": node.stat(CONFIG)} == before


RUNTIMES_ONLY = {"stages": "runtimes", "container_runtimes": "containerd", "service_restart_timeout": "10"}
# A site policy that refuses any config naming nvidia at start: it stands in for a candidate
# `config dump` accepts but containerd rejects when it starts (the same failure to systemd).
REFUSE_NVIDIA_DROPIN = """[Service]
ExecStartPre=/bin/sh -c '! grep -q nvidia /etc/containerd/config.toml || { echo "policy: no nvidia runtime here" >&2; exit 1; }'
"""


def test_unparsable_config_is_left_byte_for_byte_and_a_rejected_restart_rolls_back(node):
    # containerd installed and running, on a config that is not TOML.
    assert node.deploy(data={**RUNTIMES_ONLY, "stages": "runtimes"}).returncode == 0
    broken = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n  sandbox_image = "pause"\n'
    node.write(CONFIG, broken)
    before = {"file": node.stat(CONFIG), "service": node.service("containerd")}

    result = node.deploy(data=RUNTIMES_ONLY, json_output=False)
    assert result.returncode != 0
    error = [line for line in result.run_output.splitlines() if "is not valid TOML" in line]
    assert error and CONFIG in error[0] and re.search(r"line \d+ col \d+", error[0]), result.explain()
    assert {"file": node.stat(CONFIG), "service": node.service("containerd")} == before
    assert node.is_active("containerd")

    # A valid config whose wired version the service refuses at start: restored, active again.
    valid = (FIXTURES / "imports" / "input.toml").read_text().replace('"registry.toml"', '"/etc/containerd/x/*.toml"')
    node.write(CONFIG, valid)
    node.write("/etc/systemd/system/containerd.service.d/policy.conf", REFUSE_NVIDIA_DROPIN)
    node.sh("systemctl daemon-reload && systemctl restart containerd")
    assert node.is_active("containerd")

    rejected = node.deploy(data=RUNTIMES_ONLY, json_output=False)
    assert rejected.returncode != 0
    assert "containerd did not come back on the new /etc/containerd/config.toml" in rejected.output, rejected.explain()
    assert "policy: no nvidia runtime here" in rejected.output  # the first error: why it failed
    assert "is active again" in rejected.output  # the second: the rollback's outcome
    assert node.read(CONFIG) == valid
    wait_for(lambda: node.is_active("containerd"), timeout=30, what="containerd active after rollback")
    kept = node.sh(f"ls {CONFIG}.gpu-node-rejected-*").stdout.split()
    assert len(kept) == 1 and "nvidia" in node.read(kept[0])


def test_containerd_21_with_a_version_1_config_is_refused_naming_the_version_file_untouched(
    start_node, sid_containerd_image, toolkit_repo
):
    """A node upgraded to containerd 2.x that kept its version 1 config (no `version`, CRI settings
    under plugins.cri, as older k3s templates wrote it): 2.x ignores plugins.cri, so wiring it would
    never run. Refused before any change. sid's containerd is in the node image."""
    node = start_node(image=sid_containerd_image)
    version_1 = VERSION_1_CONFIG
    node.write(CONFIG, version_1)
    node.sh("systemctl restart containerd")
    before = {"service": node.service("containerd"), "file": node.stat(CONFIG)}

    result = node.deploy(data={**RUNTIMES_ONLY, **toolkit_repo.data()}, json_output=False)
    assert result.returncode != 0
    assert f"{CONFIG} is a version 1 config" in result.output
    assert "ignores its CRI settings (plugins.cri)" in result.output
    assert "Traceback" not in result.output
    assert {"service": node.service("containerd"), "file": node.stat(CONFIG)} == before


OUT_OF_ORDER = {
    # The project's own configs of each shape, always run.
    "own-child-table-before-parent": lambda: (FIXTURES / "eks-al2-child-before-parent" / "input.toml").read_text(),
    "own-keys-split-from-sub-tables": lambda: (FIXTURES / "k3s-split-tables" / "input.toml").read_text(),
    # As the EKS AL2 AMI and k3s wrote them (GPU_NODE_CORPUS; skipped without it).
    "corpus-eks-al2": lambda: corpus_file("containerd/eks-al2-containerd-config.toml").read_text(),
    "corpus-k3s-v2-template": lambda: corpus_file("containerd/k3s-v2-template-defaults.toml").read_text(),
}


@pytest.mark.parametrize("shape", sorted(OUT_OF_ORDER))
def test_out_of_order_configs_are_wired_verified_and_rerun_unchanged(
    shape, start_node, containerd_image, toolkit_repo, tmp_path
):
    """A child table before its parent (with an `imports` glob, as the EKS AL2 AMI writes it) and a
    table's keys split from its sub-tables (as k3s generates it), on Debian's containerd 1.6: wired,
    containerd's own dump and verify agree, a re-run changes nothing."""
    text = OUT_OF_ORDER[shape]()
    node = start_node(image=containerd_image)
    node.write(CONFIG, text)
    node.sh("systemctl restart containerd")
    assert node.is_active("containerd"), f"containerd does not start on {shape} as written"
    report = tmp_path / "report.json"
    data = {
        "stages": "toolkit,runtimes,verify",
        "container_runtimes": "containerd",
        "verify_report_path": str(report),
        **toolkit_repo.data(),
    }

    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert WIRE_OP in first.changed_operations()
    steps = {step["name"]: step for step in json.loads(report.read_text())["nodes"][0]["steps"]}
    assert steps["containerd_config"]["status"] == "pass", steps["containerd_config"]
    comments = [line.strip() for line in text.splitlines() if line.strip().startswith("#")]
    assert_wired(node, "io.containerd.grpc.v1.cri", comments)

    before = {"service": node.service("containerd"), "file": node.stat(CONFIG)}
    assert_no_change(node.deploy(data=data))
    assert {"service": node.service("containerd"), "file": node.stat(CONFIG)} == before
