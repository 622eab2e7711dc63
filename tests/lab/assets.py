"""
The lab's real upstream software, from one setting: env ``GPU_NODE_LAB``, else ``../shared/lab``
next to the repository when it exists. ``.xz`` files are decompressed once into ``.cache/lab/``
and checked against the folder's ``SHA256SUMS`` (sums of the uncompressed files); etcd comes
from Debian's ``etcd-server`` package (downloaded and unpacked, never installed), the CNI
plugins from Debian's ``containernetworking-plugins`` (its ``loopback`` plugin).
"""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from lab import LabMissing, expected_sums, lab_path, lab_root, sha256

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "lab"
KUBERNETES_VERSION = "v1.28.7"
CRICTL_VERSION = "v1.36.0"
TOOLKIT_VERSION = "1.20.0"

IMAGES = {
    "pause": ("pause-3.9.tar", "registry.k8s.io/pause:3.9"),
    "device-plugin": ("k8s-device-plugin-v0.20.0.tar.xz", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    "nvml-mock": ("nvml-mock-latest.tar.xz", "ghcr.io/nvidia/nvml-mock:latest"),
    "gpushare-extender": ("k8s-gpushare-schd-extender-1.11-d170d8a.tar.xz",
                          "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a"),
    "gpushare-plugin": ("k8s-gpushare-plugin-v2-1.11-aff8a23.tar.xz",
                        "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23"),
}


def lab_dir() -> Path:
    """The lab folder, once it holds the Kubernetes binaries (else LabMissing naming what to provide)."""
    root = lab_root()
    lab_path("kubernetes", KUBERNETES_VERSION, "SHA256SUMS")
    return root


def _checked(folder: str, name: str, mode: int = 0o644) -> Path:
    """``<lab>/<folder>/<name>[.xz]`` uncompressed at ``.cache/lab/<folder>/<name>``, its sum checked."""
    source_dir = lab_dir() / folder
    plain = name[:-3] if name.endswith(".xz") else name
    wanted = expected_sums(source_dir).get(plain)
    if wanted is None:
        raise LabMissing(f"{source_dir / 'SHA256SUMS'} has no sum for {plain}")
    target = CACHE / folder / plain
    stamp = target.with_name(target.name + ".sha256")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == wanted \
            and target.stat().st_mtime_ns <= stamp.stat().st_mtime_ns:
        return target
    source = source_dir / name
    if not source.exists():
        raise LabMissing(f"lab file missing: {source}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    opener = lzma.open if name.endswith(".xz") else open
    with opener(source, "rb") as reader, partial.open("wb") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)
    actual = sha256(partial)
    if actual != wanted:
        partial.unlink()
        raise LabMissing(f"{source}: SHA-256 {actual} does not match {wanted} in SHA256SUMS")
    partial.chmod(mode)
    partial.rename(target)
    stamp.write_text(wanted + "\n")
    return target


def kubernetes_binary(name: str) -> Path:
    """kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or kubectl."""
    return _checked(f"kubernetes/{KUBERNETES_VERSION}", f"{name}.xz", 0o755)


def crictl() -> Path:
    return _checked("bin", f"crictl-{CRICTL_VERSION}.xz", 0o755)


def kubectl_inspect_gpushare() -> Path:
    return _checked("bin", "kubectl-inspect-gpushare-v0.3.0.xz", 0o755)


def image_archive(key: str) -> tuple[Path, str]:
    """(image archive for ``ctr images import``, the image name it holds)."""
    archive, image = IMAGES[key]
    return _checked("images", archive), image


def _from_image(key: str, prefix: str, folder_name: str) -> list[Path]:
    """
    The files of a lab image whose path starts with ``prefix`` (e.g. ``usr/bin/nvidia-device-plugin``),
    taken from its archive (checked against SHA256SUMS) into ``.cache/lab/<folder_name>/``, once.
    """
    import json
    import tarfile

    archive, _image = image_archive(key)
    wanted = archive.with_name(archive.name + ".sha256").read_text().strip()
    folder = CACHE / folder_name
    stamp = folder / "from.sha256"
    if stamp.exists() and stamp.read_text().strip() == wanted:
        return sorted(path for path in folder.iterdir() if path != stamp)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tarfile.open(archive) as image:
        manifest = json.load(image.extractfile("manifest.json"))
        for layer_name in manifest[0]["Layers"]:
            with tarfile.open(fileobj=image.extractfile(layer_name)) as layer:
                for member in layer.getmembers():
                    if member.isfile() and member.name.lstrip("./").startswith(prefix):
                        target = folder / Path(member.name).name
                        target.write_bytes(layer.extractfile(member).read())
                        target.chmod(member.mode & 0o755)
    found = sorted(folder.iterdir())
    if not found:
        raise LabMissing(f"{archive} holds no {prefix}*")
    stamp.write_text(wanted + "\n")
    return found


def nvml_mock_library() -> Path:
    """
    NVIDIA's mock ``libnvidia-ml.so.<driver>`` (k8s-test-infra v0.3.0) from the lab's nvml-mock image:
    the library its setup copies into a node's driver root. It reads ``<driver root>/config/config.yaml``
    beside its ``usr/lib64`` folder.
    """
    return _from_image("nvml-mock", "usr/local/lib/libnvidia-ml.so.", "nvml-mock")[0]


def device_plugin_binary() -> Path:
    """NVIDIA's ``nvidia-device-plugin`` v0.20.0 (cgo, needs only glibc) from the lab's image."""
    return _from_image("device-plugin", "usr/bin/nvidia-device-plugin", "device-plugin")[0]


def _apt_unpack(package: str, folder: Path, sources_line: str | None = None) -> Path:
    """``apt-get download`` + ``dpkg -x`` a Debian package into ``folder/root`` (nothing installed)."""
    root = folder / "root"
    if (folder / "done").exists():
        return root
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "debs").mkdir(parents=True)
    options: list[str] = []
    if sources_line:
        # A throwaway apt config: the machine's own sources stay untouched.
        for sub in ("lists/partial", "cache/archives/partial"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / "sources.list").write_text(sources_line + "\n")
        options = [
            "-o", f"Dir::Etc::SourceList={folder / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::State::Lists={folder / 'lists'}", "-o", f"Dir::Cache={folder / 'cache'}",
            "-o", "Acquire::Check-Valid-Until=false", "-o", "Acquire::Languages=none",
        ]
        subprocess.run(["apt-get", *options, "update", "-q"], check=True, capture_output=True)
    result = subprocess.run(["apt-get", *options, "download", package], cwd=folder / "debs",
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise LabMissing(f"apt-get download {package} failed: {result.stderr.strip()[-300:]}")
    deb = sorted((folder / "debs").glob(f"{package}_*.deb"))[-1]
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    (folder / "done").write_text(deb.name + "\n")
    return root


def etcd() -> Path:
    """Debian's etcd binary (package ``etcd-server``), unpacked under .cache/lab, not installed."""
    root = _apt_unpack("etcd-server", CACHE / "etcd-server")
    binary = root / "usr" / "bin" / "etcd"
    if not binary.exists():
        raise LabMissing(f"etcd-server unpacked without usr/bin/etcd ({root})")
    return binary


def cni_plugins() -> Path:
    """The folder of Debian's containernetworking-plugins (the lab uses its ``loopback``)."""
    root = _apt_unpack("containernetworking-plugins", CACHE / "cni-plugins-bookworm")
    folder = root / "usr" / "lib" / "cni"
    for plugin in ("loopback",):
        if not (folder / plugin).exists():
            raise LabMissing(f"Debian's containernetworking-plugins has no {plugin} plugin ({folder})")
    return folder


def prepare_all() -> None:
    """Everything a cluster needs, decompressed and checked (raises LabMissing naming what to provide)."""
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"):
        kubernetes_binary(name)
    crictl()
    for key in IMAGES:
        image_archive(key)
    etcd()
    cni_plugins()


def scratch_dir(prefix: str) -> Path:
    (CACHE / "run").mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=CACHE / "run"))
