"""
The lab's upstream files (env ``GPU_NODE_LAB``, see docs/lab.md), unpacked from the formats their
projects publish them in; nothing in the lab is repacked or renamed for the tests:

- ``kubernetes-server-linux-amd64.tar.gz``: ``kubernetes/server/bin/<name>``, the binaries and the
  control-plane images as ``<name>.tar`` archives;
- ``crictl-<version>-linux-amd64.tar.gz``: ``crictl``;
- ``images/*.tar``: image archives as ``docker save`` and ``skopeo copy docker-archive:`` write
  them (``manifest.json``), or OCI layouts (``index.json``). An image is found by the name and tag
  its archive records, whatever the archive file is called;
- ``kubectl-inspect-gpushare``: the published binary, used as it is.

What is unpacked lands in ``.cache/lab/`` and is unpacked again when its archive changes (size or
modification time). etcd comes from Debian's ``etcd-server`` package and the CNI ``loopback``
plugin from Debian's ``containernetworking-plugins`` (downloaded and unpacked, never installed).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

from lab import LAB_DOC, LabFileMissing, LabMissing, lab_path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "lab"
KUBERNETES_VERSION = "v1.28.7"
CRICTL_VERSION = "v1.36.0"
SERVER_TARBALL = "kubernetes-server-linux-amd64.tar.gz"
SERVER_BIN = "kubernetes/server/bin"
# Unpacked together: one pass over the server tarball (hundreds of MB) serves them all.
SERVER_FILES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "kube-scheduler.tar",
)
# The release's own version record beside the binaries (the image tag of kube-apiserver).
SERVER_VERSION_FILE = "kube-apiserver.docker_tag"
CRICTL_TARBALL = f"crictl-{CRICTL_VERSION}-linux-amd64.tar.gz"
IMAGES_DIR = "images"
INSPECT_GPUSHARE = "kubectl-inspect-gpushare"

IMAGES = {
    "pause": "registry.k8s.io/pause:3.9",
    "device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
    "nvml-mock": "ghcr.io/nvidia/nvml-mock:latest",
    "gpushare-extender": "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-schd-extender:1.11-d170d8a",
    "gpushare-plugin": "registry.cn-hangzhou.aliyuncs.com/acs/k8s-gpushare-plugin:v2-1.11-aff8a23",
    # the DRA driver for NVIDIA GPUs at dra_driver_version's default (tests/lab/dra.py)
    "dra-driver": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0",
}
DEVICE_PLUGIN_PATH = "usr/bin/nvidia-device-plugin"
# nvml-mock's image keeps its libnvidia-ml under a full driver version (x.y.z).
NVML_MOCK_LIBRARY = re.compile(r"usr/local/lib/libnvidia-ml\.so\.\d+\.\d+(\.\d+)?")


# --- Tar archives ---------------------------------------------------------------------------------


def _plain(name: str) -> str:
    """A member's path without a leading ``./`` or ``/``."""
    return name[2:] if name.startswith("./") else name.lstrip("/")


def _stamp(source: Path) -> str:
    info = source.stat()
    return f"{source.resolve()} {info.st_size} {info.st_mtime_ns}"


def unpack(archive: Path, members: dict[str, str], folder: Path, optional: frozenset[str] = frozenset()) -> Path:
    """
    ``members`` (path in the tar ``archive`` -> file name) unpacked into ``folder`` in one pass,
    kept until the archive changes. A member not in ``optional`` that the archive lacks raises
    LabMissing naming it.
    """
    stamp = folder / ".unpacked-from"
    wanted = f"{_stamp(archive)} {sorted(members.items())}"
    if stamp.exists() and stamp.read_text() == wanted:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", dir=folder.parent))
    try:
        found = set()
        try:
            with tarfile.open(archive) as tar:
                for info in tar:
                    name = _plain(info.name)
                    if name in members and (info.isfile() or info.islnk()):
                        target = partial / members[name]
                        with tar.extractfile(info) as reader, target.open("wb") as writer:
                            shutil.copyfileobj(reader, writer, 1 << 20)
                        target.chmod(0o755 if info.mode & 0o111 else 0o644)
                        found.add(name)
        except (tarfile.TarError, EOFError, zlib.error) as error:
            raise LabMissing(f"{archive.name} is not a tarball Python reads ({error}): fetch it again") from None
        missing = sorted(set(members) - found - optional)
        if missing:
            raise LabMissing(f"{archive.name} holds no {', '.join(missing)}: is it the file {LAB_DOC} names?")
        (partial / stamp.name).write_text(wanted)
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


# --- Kubernetes and crictl release tarballs -------------------------------------------------------


def server_bin() -> Path:
    """The server tarball's binaries (SERVER_FILES), unpacked; its release checked."""
    tarball = lab_path(SERVER_TARBALL)
    members = {f"{SERVER_BIN}/{name}": name for name in (*SERVER_FILES, SERVER_VERSION_FILE)}
    folder = unpack(
        tarball, members, CACHE / "kubernetes-server", optional=frozenset({f"{SERVER_BIN}/{SERVER_VERSION_FILE}"})
    )
    version_file = folder / SERVER_VERSION_FILE
    if version_file.exists() and version_file.read_text().strip() != KUBERNETES_VERSION:
        raise LabMissing(
            f"{SERVER_TARBALL} is Kubernetes {version_file.read_text().strip()}; the lab tests "
            f"are written for {KUBERNETES_VERSION}: provide that release (see {LAB_DOC})"
        )
    return folder


def kubernetes_binary(name: str) -> Path:
    """kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or kubectl."""
    return server_bin() / name


def kubernetes_image(name: str) -> tuple[Path, str]:
    """(archive, image name) of a control-plane image the server tarball ships (``kube-scheduler``)."""
    archive = server_bin() / f"{name}.tar"
    names = sorted(archive_images(archive))
    if not names:
        raise LabMissing(f"{SERVER_BIN}/{name}.tar in {SERVER_TARBALL} names no image")
    return archive, names[0]


def crictl() -> Path:
    return unpack(lab_path(CRICTL_TARBALL), {"crictl": "crictl"}, CACHE / "crictl") / "crictl"


def kubectl_inspect_gpushare() -> Path:
    """gpushare's published kubectl plugin, as downloaded."""
    return lab_path(INSPECT_GPUSHARE)


# --- Image archives -------------------------------------------------------------------------------


def normalized(image: str) -> str:
    """An image name as containerd spells it: ``pause:3.9`` -> ``docker.io/library/pause:3.9``."""
    name, _, digest = image.partition("@")
    if "/" not in name:
        name = f"library/{name}"
    first = name.split("/", 1)[0]
    if "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def _blob(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _json(tar: tarfile.TarFile, member: str):
    with tar.extractfile(member) as stream:
        return json.load(stream)


def _oci_manifest(tar: tarfile.TarFile, descriptor: dict) -> dict:
    """The image manifest a descriptor names; an index resolves to its linux/amd64 entry."""
    document = _json(tar, _blob(descriptor["digest"]))
    if "manifests" in document:
        for entry in document["manifests"]:
            platform = entry.get("platform", {})
            if (platform.get("os"), platform.get("architecture")) == ("linux", "amd64"):
                return _oci_manifest(tar, entry)
        raise LabMissing(f"image index {descriptor['digest']} has no linux/amd64 image")
    return document


@functools.lru_cache(maxsize=64)
def _images_of(archive: str, _version: str) -> dict[str, tuple[str, ...]]:
    with tarfile.open(archive) as tar:
        names = {_plain(name) for name in tar.getnames()}
        if "manifest.json" in names:
            return {
                normalized(tag): tuple(entry["Layers"])
                for entry in _json(tar, "manifest.json")
                for tag in entry.get("RepoTags") or ()
            }
        if "index.json" in names:
            images = {}
            for descriptor in _json(tar, "index.json").get("manifests", []):
                annotations = descriptor.get("annotations", {})
                name = annotations.get("io.containerd.image.name") or annotations.get(
                    "org.opencontainers.image.ref.name", ""
                )
                # A bare tag ("3.9") names no repository: such an image cannot be looked up by name.
                if "/" in name or ":" in name:
                    layers = _oci_manifest(tar, descriptor)["layers"]
                    images[normalized(name)] = tuple(_blob(layer["digest"]) for layer in layers)
            return images
    return {}


def archive_images(archive: Path) -> dict[str, tuple[str, ...]]:
    """The images an archive holds: name -> its layers' member names, bottom layer first."""
    try:
        return _images_of(str(archive), _stamp(archive))
    except (tarfile.TarError, KeyError, ValueError) as error:
        raise LabMissing(f"{archive} is not an image archive docker save or skopeo writes: {error}") from None


def find_image(image: str) -> tuple[Path, tuple[str, ...]]:
    """(archive, layers) of ``image`` among the lab's ``images/*.tar``."""
    folder = lab_path(IMAGES_DIR)
    wanted = normalized(image)
    for archive in sorted(folder.glob("*.tar")):
        layers = archive_images(archive).get(wanted)
        if layers is not None:
            return archive, layers
    raise LabFileMissing(
        f"no archive in {folder} holds {image}: docker pull it, then docker save it there (see {LAB_DOC})"
    )


def image_archive(key: str) -> tuple[Path, str]:
    """(image archive for ``ctr images import``, the image name it holds)."""
    image = IMAGES[key]
    return find_image(image)[0], image


def image_files(archive: Path, layers: tuple[str, ...], wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The regular files whose path ``wanted`` accepts, as the image's layers stacked up leave
    them: a later layer replaces a file, a whiteout (``.wh.<name>``, ``.wh..wh..opq``) removes it."""
    files: dict[str, bytes] = {}
    with tarfile.open(archive) as outer:
        members = {_plain(info.name): info for info in outer.getmembers()}
        for layer_name in layers:
            with outer.extractfile(members[_plain(layer_name)]) as stream:
                try:
                    layer = tarfile.open(fileobj=stream, mode="r:*")  # noqa: SIM115 - over the stream closed above
                except tarfile.TarError:
                    raise LabMissing(
                        f"{archive}: layer {layer_name} is no tar Python reads (zstd?): save the image with docker save"
                    ) from None
                for info in layer:
                    path = _plain(info.name)
                    folder, _, base = path.rpartition("/")
                    if base == ".wh..wh..opq":
                        files = {name: data for name, data in files.items() if not name.startswith(f"{folder}/")}
                    elif base.startswith(".wh."):
                        gone = f"{folder}/{base[4:]}" if folder else base[4:]
                        files = {
                            name: data
                            for name, data in files.items()
                            if name != gone and not name.startswith(f"{gone}/")
                        }
                    elif wanted(path) and (info.isfile() or info.islnk()):
                        with layer.extractfile(info) as reader:
                            files[path] = reader.read()
    return files


def _from_image(key: str, wanted: Callable[[str], bool], what: str) -> list[Path]:
    """The files of a lab image that ``wanted`` accepts, in ``.cache/lab/<key>/``, once per archive."""
    image = IMAGES[key]
    archive, layers = find_image(image)
    folder = CACHE / key
    stamp = folder / ".unpacked-from"
    source = f"{_stamp(archive)} {image}"
    if stamp.exists() and stamp.read_text() == source:
        return sorted(path for path in folder.iterdir() if path != stamp)
    found = image_files(archive, layers, wanted)
    if not found:
        raise LabMissing(f"{image} in {archive} holds no {what}: is it the image {LAB_DOC} names?")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for path, data in found.items():
        target = folder / Path(path).name
        target.write_bytes(data)
        target.chmod(0o755)
    stamp.write_text(source)
    return sorted(path for path in folder.iterdir() if path != stamp)


def nvml_mock_library() -> Path:
    """NVIDIA's mock ``libnvidia-ml.so.<version>`` from the lab's nvml-mock image."""
    return _from_image("nvml-mock", NVML_MOCK_LIBRARY.fullmatch, "usr/local/lib/libnvidia-ml.so.<version>")[-1]


def device_plugin_binary() -> Path:
    """NVIDIA's ``nvidia-device-plugin`` v0.20.0 (cgo, needs only glibc) from the lab's image."""
    (binary,) = _from_image("device-plugin", DEVICE_PLUGIN_PATH.__eq__, DEVICE_PLUGIN_PATH)
    return binary


# --- Debian packages (the registry has them) ------------------------------------------------------


def _apt_unpack(package: str, folder: Path) -> Path:
    """``apt-get download`` + ``dpkg -x`` a Debian package into ``folder/root`` (nothing installed)."""
    root = folder / "root"
    if (folder / "done").exists():
        return root
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "debs").mkdir(parents=True)
    result = subprocess.run(["apt-get", "download", package], cwd=folder / "debs", capture_output=True, text=True)
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
    if not (folder / "loopback").exists():
        raise LabMissing(f"Debian's containernetworking-plugins has no loopback plugin ({folder})")
    return folder


def scratch_dir(prefix: str) -> Path:
    (CACHE / "run").mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=CACHE / "run"))
