"""
NVIDIA's mock NVML (nvml-mock, from NVIDIA's k8s-test-infra) as the driver root of a lab node,
laid out by the lab's own code. No nvml-mock pod runs; the root holds what the programs that read a
driver root look for:

- ``usr/lib64/libnvidia-ml.so.<driver version>`` and the ``libnvidia-ml.so.1`` name programs
  open: the mock library, taken from the lab's nvml-mock image. It answers NVML calls from the GPU
  profile it finds at ``config/config.yaml``, two folders above its own;
- ``config/config.yaml``: one of nvml-mock's GPU profiles (a100, t4), data read from the corpus
  (env ``GPU_NODE_CORPUS``, ``nvml-mock/<profile>.yaml``), with ``system.num_devices`` set to the
  number of GPUs the lab wants (the library reads the count there);
- ``dev/nvidia<N>``, ``dev/nvidiactl``, ``dev/nvidia-uvm``, ``dev/nvidia-uvm-tools``: character
  device nodes (195 is NVIDIA's registered major) for the nvidia runtime to inject into GPU
  containers; nothing opens them. Made on nodes only, never on this machine;
- ``proc/driver/nvidia/version``: the version line NVIDIA's kernel module shows there.

The device plugin (``nvidia_driver_root``) and the nvidia runtime (``nvidia-container-cli.root``)
are pointed at this root.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from corpus import CORPUS_ENV, corpus_root

from lab import LabMissing

MOCK_DRIVER_ROOT = "/var/lib/nvml-mock/driver"
NVIDIA_MAJOR = 195
UVM_MAJOR = 510  # dynamic on a real driver; any free number serves a device nothing opens


class CorpusMissing(LabMissing):
    """A corpus file the lab needs (an nvml-mock profile) is not there."""


def profile_file(profile: str) -> Path:
    path = corpus_root() / "nvml-mock" / f"{profile}.yaml"
    if not path.is_file():
        raise CorpusMissing(
            f"{path} is missing: set {CORPUS_ENV} to the corpus folder holding nvml-mock/{profile}.yaml"
        )
    return path


def profile_document(profile: str) -> dict:
    return yaml.safe_load(profile_file(profile).read_text())


def products(profile: str) -> list[str]:
    """The product name of each GPU the profile declares (its own name, or the default one)."""
    document = profile_document(profile)
    return [device.get("name") or document["device_defaults"]["name"] for device in document["devices"]]


def lay_out(root: Path, profile: str, gpus: int | None = None, library: Path | None = None) -> Path:
    """The driver root (without device nodes) in the local folder ``root``, for ``gpus`` GPUs of
    ``profile`` (all it declares by default); ``library`` defaults to the lab image's."""
    from lab import assets

    document = profile_document(profile)
    declared = len(document["devices"])
    if gpus is not None and not 0 < gpus <= declared:
        raise ValueError(f"profile {profile} declares {declared} GPUs, not {gpus}")
    document["system"]["num_devices"] = gpus or declared
    version = document["system"]["driver_version"]
    library = library or assets.nvml_mock_library()

    lib64 = root / "usr" / "lib64"
    lib64.mkdir(parents=True)
    shutil.copyfile(library, lib64 / f"libnvidia-ml.so.{version}")
    (lib64 / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (root / "proc" / "driver" / "nvidia" / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}\n"
    )
    (root / "dev").mkdir()
    return root


def device_nodes_script(root: str, gpus: int) -> str:
    """Shell that makes the root's device nodes (run inside a node container)."""
    nodes = [(f"nvidia{index}", NVIDIA_MAJOR, index) for index in range(gpus)]
    nodes += [("nvidiactl", NVIDIA_MAJOR, 255), ("nvidia-uvm", UVM_MAJOR, 0), ("nvidia-uvm-tools", UVM_MAJOR, 1)]
    lines = ["set -eu", f"mkdir -p {root}/dev"]
    lines += [
        f"[ -c {root}/dev/{name} ] || mknod -m 666 {root}/dev/{name} c {major} {minor}" for name, major, minor in nodes
    ]
    return "\n".join(lines) + "\n"


def install(node, profile: str, gpus: int | None = None) -> int:
    """The mock driver root at MOCK_DRIVER_ROOT on a node container; returns its GPU count."""
    from harness import run

    from lab import assets

    local = assets.scratch_dir("nvml-mock-")
    try:
        root = lay_out(local / "driver", profile, gpus)
        count = yaml.safe_load((root / "config" / "config.yaml").read_text())["system"]["num_devices"]
        node.sh(f"rm -rf {MOCK_DRIVER_ROOT} && mkdir -p {Path(MOCK_DRIVER_ROOT).parent}")
        run(["docker", "cp", str(root), f"{node.id}:{MOCK_DRIVER_ROOT}"])
        node.sh(device_nodes_script(MOCK_DRIVER_ROOT, count))
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return count
