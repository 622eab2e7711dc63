"""
verify's CUDA check (cuInit through the driver's libcuda.so.1, by the node's python3 with ctypes)
on real bookworm node containers, through deploy/verify.py as a user runs it.

- Debian's REAL libcuda1 (bookworm non-free, 535.x) on a node without a GPU: what the real library
  answers is what the report names.
- The outcomes a GPU node would give run against STAND-IN driver libraries (tests/standin_libcuda:
  our own C source, compiled with gcc, named for their answer) put where the driver's library
  lives, so the same read loads and calls it: 0 with 2 devices, 802 on an NVSwitch node, 100.

A container cannot be given PCI devices: where the outcome depends on the node's GPUs and
NVSwitches, the PCI answer is a topology fixture (tests/fixtures/fabric/, written by
tests/pci_tree.py) bind-mounted read-only over /sys/bus/pci/devices, the folder NodeSurvey reads.
"""

from __future__ import annotations

import json

import pytest
from harness import run
from standin_libcuda import DRIVER_LIBRARY, standin_libcuda  # noqa: F401 (the fixture)

VERIFY_DATA = {"container_runtimes": "containerd", "nvidia_toolkit_install": "false"}
NON_FREE = (
    "sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "
    "/etc/apt/sources.list.d/debian.sources"
)


def verify(node, report, **data) -> dict:
    """deploy/verify.py on ``node``; the node's record from the report it writes."""
    result = node.deploy(
        data={**VERIFY_DATA, "verify_report_path": str(report), **data},
        deploy_file="deploy/verify.py",
        json_output=False,
    )
    assert report.exists(), result.explain()
    (record,) = json.loads(report.read_text())["nodes"]
    record["exit_code"] = result.returncode
    return record


def step(record: dict, name: str) -> dict:
    return next(step for step in record["steps"] if step["name"] == name)


def test_debian_real_libcuda1_on_a_node_without_gpu_is_named_by_what_the_library_answers(node, tmp_path):
    """Before libcuda1 the library does not load; with Debian's real libcuda1 cuInit runs and fails
    with the library's own name for it: reported beside "no NVIDIA GPU", and a failure with
    require_gpu. The kernel module type, persistence and Fabric Manager are reported as not there."""
    before = verify(node, tmp_path / "before.json")
    assert step(before, "cuda") == {
        "name": "cuda",
        "status": "skip",
        "reason": "no NVIDIA GPU (the driver's CUDA library does not load: libcuda.so.1: cannot open shared "
        "object file: No such file or directory)",
    }
    assert before["cuda"] == "no libcuda.so.1"

    node.sh(
        f"{NON_FREE} && apt-get update -q && DEBIAN_FRONTEND=noninteractive "
        "apt-get install -y -q --no-install-recommends libcuda1",
        timeout=900,
    )
    real = node.sh(f"readlink -f {DRIVER_LIBRARY}").stdout.strip()
    version = node.sh("dpkg-query -W -f '${Version}' libcuda1").stdout.split("-")[0]
    assert real == f"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{version}", real

    record = verify(node, tmp_path / "real.json")
    answer = f"cuInit: CUDA error 100 CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected ({real})"
    assert step(record, "cuda") == {"name": "cuda", "status": "skip", "reason": f"no NVIDIA GPU ({answer})"}
    assert record["cuda"] == "error 100 CUDA_ERROR_NO_DEVICE"
    assert step(record, "kernel_module_type")["reason"] == "no NVIDIA GPU: no nvidia kernel module loaded or installed"
    assert step(record, "persistence")["status"] == "skip"
    assert step(record, "fabric_manager")["status"] == "skip"
    assert record["fabric_manager"] == "not needed"

    strict = verify(node, tmp_path / "strict.json", require_gpu="true")
    assert step(strict, "cuda") == {"name": "cuda", "status": "fail", "reason": answer}
    assert strict["exit_code"] != 0


@pytest.mark.parametrize(
    "topology, standin, status, reason",
    [
        (
            "pcie-only",
            "standin-cuda-ok-2-devices",
            "pass",
            f"cuInit: 2 CUDA device(s), the driver supports CUDA 12.2 ({DRIVER_LIBRARY})",
        ),
        (
            "hgx-h100",
            "standin-cuda-system-not-ready-802",
            "fail",
            "Fabric Manager not running (CUDA error 802 CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized; "
            "4 NVSwitch device(s) (HGX H100/H200, NVLink 4) on the PCI bus, nvidia-fabricmanager not installed): "
            "systemctl enable --now nvidia-fabricmanager",
        ),
        (
            "pcie-only",
            "standin-cuda-no-device-100",
            "fail",
            f"cuInit: CUDA error 100 CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected ({DRIVER_LIBRARY})",
        ),
    ],
)
def test_standin_libcuda_where_the_drivers_library_lives_is_loaded_called_and_named(
    start_topology_node,
    standin_libcuda,  # noqa: F811 - the fixture
    tmp_path,
    topology,
    standin,
    status,
    reason,
):
    """The read loads whatever libcuda.so.1 the node's loader finds: the STAND-IN, copied to the
    driver's place (ldconfig run, as the package's trigger does)."""
    node = start_topology_node(topology)
    library = standin_libcuda(standin)
    run(["docker", "cp", str(library), f"{node.id}:{DRIVER_LIBRARY}"])
    node.sh("ldconfig")
    record = verify(node, tmp_path / "report.json")
    assert step(record, "cuda") == {"name": "cuda", "status": status, "reason": reason}
    if status == "fail":
        assert record["exit_code"] != 0 and "cuda" in [
            step["name"] for step in record["steps"] if step["status"] == "fail"
        ]
    if topology == "hgx-h100":
        assert step(record, "fabric_manager")["status"] == "fail"
        assert record["fabric_manager"] == "not installed"
        assert record["cuda"] == "error 802 CUDA_ERROR_SYSTEM_NOT_READY"
    else:
        assert step(record, "fabric_manager")["status"] == "skip"
        assert record["fabric_manager"] == "not needed"
