"""
The test lab (tests/lab/, docs/lab.md): its one setting, GPU_NODE_LAB, without a default; the
unpacking of the upstream release formats, run for real on small archives each test builds in
those formats (a server tarball with ``kubernetes/server/bin/<name>``, crictl's tarball, image
archives as ``docker save`` and OCI layouts write them); the mock driver root laid out from a
profile; and the end-of-run count of the tests that skipped for want of the lab or the corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import lab
import pytest
import yaml
from lab import assets, nvml_mock
from lab import dra as dra_lab
from lab_assets import needs_lab, skip_summary

REPO = Path(__file__).resolve().parents[2]
SERVER_PATH = "kubernetes/server/bin"


@pytest.fixture
def lab_dir(tmp_path, monkeypatch) -> Path:
    """An empty lab folder as GPU_NODE_LAB, and a throwaway unpack cache."""
    folder = tmp_path / "lab"
    folder.mkdir()
    monkeypatch.setenv(lab.LAB_ENV, str(folder))
    monkeypatch.setattr(assets, "CACHE", tmp_path / "cache")
    return folder


def tar_bytes(files: dict[str, bytes], compression: str = "", links: dict[str, str] | None = None) -> bytes:
    """A tar holding ``files`` (executable) and symbolic ``links`` (name -> target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buffer.getvalue()


def docker_archive(tags: list[str], layers: list[dict[str, bytes]]) -> bytes:
    """An image archive in ``docker save``'s format: manifest.json, a config, one tar per layer."""
    files = {"0123abcd.json": b'{"architecture": "amd64", "os": "linux"}'}
    names = []
    for index, layer in enumerate(layers):
        names.append(f"layer{index}/layer.tar")
        files[names[-1]] = tar_bytes(layer)
    files["manifest.json"] = json.dumps([{"Config": "0123abcd.json", "RepoTags": tags, "Layers": names}]).encode()
    return tar_bytes(files)


def oci_layout(name: str, layer: bytes, platforms: bool = True) -> bytes:
    """An OCI image layout (index.json, blobs/sha256/...); ``platforms``: the image is an index of an
    arm64 and an amd64 manifest, as multi-platform images are."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[f"blobs/sha256/{digest[7:]}"] = data
        return {"digest": digest, "size": len(data)}

    def manifest(layer_data: bytes) -> dict:
        config = blob(b'{"os": "linux"}')
        return {
            **blob(json.dumps({"schemaVersion": 2, "config": config, "layers": [blob(layer_data)]}).encode()),
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
        }

    top = manifest(gzip.compress(layer))
    if platforms:
        other = manifest(gzip.compress(tar_bytes({"usr/local/lib/libnvidia-ml.so.9.9.9": b"arm64"})))
        index = {
            "schemaVersion": 2,
            "manifests": [
                {**other, "platform": {"os": "linux", "architecture": "arm64"}},
                {**top, "platform": {"os": "linux", "architecture": "amd64"}},
            ],
        }
        top = {**blob(json.dumps(index).encode()), "mediaType": "application/vnd.oci.image.index.v1+json"}
    top["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.split(":")[-1]}
    index_json = {"schemaVersion": 2, "manifests": [top]}
    return tar_bytes(
        {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": json.dumps(index_json).encode(), **blobs}
    )


def server_tarball(folder: Path, version: str | None = assets.KUBERNETES_VERSION, leave_out: str = "") -> Path:
    """kubernetes-server-linux-amd64.tar.gz as the release lays it out; each binary a script
    printing its name; kube-scheduler.tar an image archive; ``version`` in kube-apiserver.docker_tag."""
    files = {
        f"{SERVER_PATH}/{name}": f"#!/bin/sh\necho {name} {{}}\n".encode()
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
    }
    files[f"{SERVER_PATH}/kube-scheduler.tar"] = docker_archive(
        [f"registry.k8s.io/kube-scheduler-amd64:{assets.KUBERNETES_VERSION}"], [{"usr/local/bin/kube-scheduler": b"x"}]
    )
    if version:
        files[f"{SERVER_PATH}/kube-apiserver.docker_tag"] = f"{version}\n".encode()
    files.pop(f"{SERVER_PATH}/{leave_out}", None)
    path = folder / assets.SERVER_TARBALL
    path.write_bytes(tar_bytes(files, "gz"))
    return path


# --- The setting --------------------------------------------------------------------------------


def test_without_gpu_node_lab_every_lab_file_is_refused_in_one_line_naming_the_setting(monkeypatch):
    """No default folder: unset (or empty), the lab is absent, whatever exists beside the repository."""
    for value in (None, "", "  "):
        if value is None:
            monkeypatch.delenv(lab.LAB_ENV, raising=False)
        else:
            monkeypatch.setenv(lab.LAB_ENV, value)
        assert not lab.configured()
        with pytest.raises(lab.LabMissing) as missing:
            lab.lab_path(assets.SERVER_TARBALL)
        message = str(missing.value)
        assert message == lab.UNSET and "\n" not in message
        assert "GPU_NODE_LAB is unset" in message and "docs/lab.md" in message


def test_a_gpu_node_lab_that_is_not_a_folder_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(lab.LAB_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(lab.LabMissing, match=f"GPU_NODE_LAB={tmp_path / 'nowhere'} is not a folder"):
        lab.lab_root()


def test_a_file_the_lab_lacks_is_named_with_the_setting(lab_dir):
    with pytest.raises(lab.LabMissing) as missing:
        assets.crictl()
    assert str(missing.value) == (
        f"{assets.CRICTL_TARBALL} is missing from the lab (GPU_NODE_LAB={lab_dir}): see docs/lab.md"
    )


# --- Release tarballs ---------------------------------------------------------------------------


def test_server_binaries_come_out_of_kubernetes_server_bin_executable(lab_dir):
    server_tarball(lab_dir)
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"):
        binary = assets.kubernetes_binary(name)
        assert subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout == f"{name} {{}}\n"


def test_server_binaries_are_unpacked_once_and_again_when_the_tarball_changes(lab_dir, monkeypatch):
    tarball = server_tarball(lab_dir)
    first = assets.kubernetes_binary("kubelet")
    with monkeypatch.context() as patched:
        patched.setattr(assets.tarfile, "open", lambda *args, **kwargs: pytest.fail("re-read an unchanged tarball"))
        assert assets.kubernetes_binary("kubelet") == first
    files = {f"{SERVER_PATH}/{name}": f"new {name}".encode() for name in assets.SERVER_FILES}
    tarball.write_bytes(tar_bytes(files, "gz"))
    os.utime(tarball, ns=(0, tarball.stat().st_mtime_ns + 1))
    assert assets.kubernetes_binary("kubelet").read_bytes() == b"new kubelet"


def test_a_server_tarball_without_a_binary_names_it(lab_dir):
    server_tarball(lab_dir, leave_out="kubelet")
    with pytest.raises(lab.LabMissing, match=f"{assets.SERVER_TARBALL} holds no {SERVER_PATH}/kubelet"):
        assets.kubernetes_binary("kubectl")


def test_a_truncated_download_is_named_not_a_traceback(lab_dir):
    tarball = server_tarball(lab_dir)
    tarball.write_bytes(tarball.read_bytes()[: tarball.stat().st_size // 2])
    with pytest.raises(lab.LabMissing, match=f"{assets.SERVER_TARBALL} is not a tarball Python reads .*fetch it again"):
        assets.kubernetes_binary("kubelet")


def test_a_server_tarball_of_another_release_is_refused_naming_both_versions(lab_dir):
    server_tarball(lab_dir, version="v1.29.2")
    with pytest.raises(lab.LabMissing) as refused:
        assets.kubernetes_binary("kube-scheduler")
    assert "is Kubernetes v1.29.2; the lab tests are written for v1.28.7" in str(refused.value)


def test_a_server_tarball_without_its_version_record_is_used(lab_dir):
    server_tarball(lab_dir, version=None)
    assert assets.kubernetes_binary("kubectl").is_file()


def test_the_control_plane_image_is_named_by_the_tag_its_archive_records(lab_dir):
    server_tarball(lab_dir)
    archive, image = assets.kubernetes_image("kube-scheduler")
    assert image == "registry.k8s.io/kube-scheduler-amd64:v1.28.7"
    with tarfile.open(archive) as tar:
        assert archive.name == "kube-scheduler.tar" and "manifest.json" in tar.getnames()


def test_crictl_comes_out_of_its_release_tarball(lab_dir):
    script = b"#!/bin/sh\necho crictl version 1.36.0\n"
    (lab_dir / assets.CRICTL_TARBALL).write_bytes(tar_bytes({"crictl": script}, "gz"))
    binary = assets.crictl()
    assert subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout == "crictl version 1.36.0\n"


# --- Image archives -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image, spelled",
    [
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("nvidia/cuda:12.4.0-base", "docker.io/nvidia/cuda:12.4.0-base"),
        ("ghcr.io/nvidia/nvml-mock", "ghcr.io/nvidia/nvml-mock:latest"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("registry.k8s.io/pause@sha256:abc", "registry.k8s.io/pause@sha256:abc"),
    ],
)
def test_image_names_are_spelled_as_containerd_records_them(image, spelled):
    assert assets.normalized(image) == spelled


def test_an_image_is_found_by_the_tag_its_docker_archive_records_whatever_the_file_is_called(lab_dir):
    (lab_dir / "images").mkdir()
    (lab_dir / "images" / "a.tar").write_bytes(docker_archive(["busybox:1.36"], [{"bin/busybox": b"x"}]))
    plugin = lab_dir / "images" / "saved-by-hand.tar"
    plugin.write_bytes(
        docker_archive(
            [assets.IMAGES["device-plugin"]],
            [
                {"usr/bin/nvidia-device-plugin": b"lower layer", "usr/bin/other": b"y"},
                {"usr/bin/nvidia-device-plugin": b"upper layer"},
            ],
        )
    )
    assert assets.image_archive("device-plugin") == (plugin, assets.IMAGES["device-plugin"])
    assert assets.find_image("docker.io/library/busybox:1.36")[0] == lab_dir / "images" / "a.tar"
    binary = assets.device_plugin_binary()
    assert binary.read_bytes() == b"upper layer" and os.access(binary, os.X_OK)


def test_a_file_an_upper_layer_whites_out_is_not_in_the_image(lab_dir):
    (lab_dir / "images").mkdir()
    (lab_dir / "images" / "plugin.tar").write_bytes(
        docker_archive(
            [assets.IMAGES["device-plugin"]],
            [
                {"usr/bin/nvidia-device-plugin": b"lower layer"},
                {"usr/bin/.wh.nvidia-device-plugin": b""},
            ],
        )
    )
    with pytest.raises(lab.LabMissing, match="holds no usr/bin/nvidia-device-plugin"):
        assets.device_plugin_binary()


def test_the_mock_library_comes_out_of_an_oci_layout_through_its_amd64_manifest(lab_dir):
    (lab_dir / "images").mkdir()
    layer = tar_bytes(
        {"usr/local/lib/libnvidia-ml.so.550.163.01": b"mock nvml"},
        links={"usr/local/lib/libnvidia-ml.so.1": "libnvidia-ml.so.550.163.01"},
    )
    (lab_dir / "images" / "nvml-mock.tar").write_bytes(oci_layout(assets.IMAGES["nvml-mock"], layer))
    library = assets.nvml_mock_library()
    assert (library.name, library.read_bytes()) == ("libnvidia-ml.so.550.163.01", b"mock nvml")


def test_an_image_no_archive_holds_is_named_with_how_to_save_it(lab_dir):
    (lab_dir / "images").mkdir()
    (lab_dir / "images" / "other.tar").write_bytes(docker_archive(["busybox:1.36"], [{"bin/busybox": b"x"}]))
    with pytest.raises(lab.LabMissing) as missing:
        assets.image_archive("pause")
    assert "holds registry.k8s.io/pause:3.9: docker pull it, then docker save it there" in str(missing.value)


def test_a_file_in_images_that_is_no_image_archive_is_named(lab_dir):
    (lab_dir / "images").mkdir()
    (lab_dir / "images" / "notes.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(lab.LabMissing, match="notes.tar is not an image archive"):
        assets.image_archive("pause")


# --- The mock driver root -------------------------------------------------------------------------

# A profile in nvml-mock's shape, written for this test (the real ones are in the corpus).
PROFILE = {
    "version": "1.0",
    "system": {"driver_version": "550.1.2", "cuda_version": "12.4"},
    "device_defaults": {"name": "Test GPU 16GB", "memory": {"total_bytes": 17179869184}},
    "devices": [{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": "GPU-1", "name": "Other GPU"}],
}


@pytest.fixture
def corpus(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "corpus"
    (folder / "nvml-mock").mkdir(parents=True)
    (folder / "nvml-mock" / "test.yaml").write_text(yaml.safe_dump(PROFILE))
    monkeypatch.setenv(nvml_mock.CORPUS_ENV, str(folder))
    return folder


def test_the_driver_root_holds_the_library_under_the_profiles_driver_version_and_the_profile(tmp_path, corpus):
    library = tmp_path / "libnvidia-ml.so.550.163.01"
    library.write_bytes(b"mock nvml")
    root = nvml_mock.lay_out(tmp_path / "driver", "test", gpus=1, library=library)
    assert (root / "usr/lib64/libnvidia-ml.so.1").resolve() == root / "usr/lib64/libnvidia-ml.so.550.1.2"
    assert (root / "usr/lib64/libnvidia-ml.so.1").read_bytes() == b"mock nvml"
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    assert config == {**PROFILE, "system": {**PROFILE["system"], "num_devices": 1}}
    assert (root / "proc/driver/nvidia/version").read_text().split()[:2] == ["NVRM", "version:"]
    assert "550.1.2" in (root / "proc/driver/nvidia/version").read_text()
    assert nvml_mock.products("test") == ["Test GPU 16GB", "Other GPU"]
    all_gpus = nvml_mock.lay_out(tmp_path / "all", "test", library=library)
    assert yaml.safe_load((all_gpus / "config/config.yaml").read_text())["system"]["num_devices"] == 2
    with pytest.raises(ValueError, match="declares 2 GPUs, not 3"):
        nvml_mock.lay_out(tmp_path / "three", "test", gpus=3, library=library)


def test_a_profile_the_corpus_lacks_names_gpu_node_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv(nvml_mock.CORPUS_ENV, str(tmp_path / "no-corpus"))
    with pytest.raises(nvml_mock.CorpusMissing) as missing:
        nvml_mock.profile_file("a100")
    assert isinstance(missing.value, lab.LabMissing)  # lab users skip on it as on any lab file
    assert f"{tmp_path / 'no-corpus'}/nvml-mock/a100.yaml is missing: set GPU_NODE_CORPUS" in str(missing.value)


# --- The end-of-run count -------------------------------------------------------------------------


def test_skips_are_counted_by_the_setting_their_reason_names_first():
    lines = skip_summary(
        [
            lab.UNSET,
            f"nvidia-container-toolkit is missing from the lab ({lab.LAB_ENV}=/x): see docs/lab.md",
            "/c/nvml-mock/a100.yaml is missing: set GPU_NODE_CORPUS to the corpus folder",
            "no docker here",
        ]
    )
    assert lines == [
        "2 tests need the lab: set GPU_NODE_LAB, see docs/lab.md",
        "1 test needs the corpus: set GPU_NODE_CORPUS, see docs/lab.md",
    ]
    assert skip_summary(["no docker here"]) == []


def lab_checks():
    """(what, check) for each file docs/lab.md lists; a check returns the files it unpacked or found."""
    yield (
        assets.SERVER_TARBALL,
        lambda: [
            *map(
                assets.kubernetes_binary,
                ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"),
            ),
            assets.kubernetes_image("kube-scheduler")[0],
        ],
    )
    yield assets.CRICTL_TARBALL, lambda: [assets.crictl()]
    yield (
        f"{dra_lab.SERVER_FOLDER}/{assets.SERVER_TARBALL}",
        lambda: [
            *map(
                dra_lab.kubernetes_binary,
                ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"),
            )
        ],
    )
    yield "nvidia-container-toolkit/*.deb", lambda: sorted(lab.lab_path("nvidia-container-toolkit").glob("*.deb"))
    for key, image in assets.IMAGES.items():
        yield image, lambda key=key: [assets.image_archive(key)[0]]
    yield "nvml-mock's libnvidia-ml", lambda: [assets.nvml_mock_library()]
    yield "the device plugin binary", lambda: [assets.device_plugin_binary()]
    yield assets.INSPECT_GPUSHARE, lambda: [assets.kubectl_inspect_gpushare()]


def absent_from_the_lab() -> list[str]:
    """Runs every check; the files docs/lab.md lists that the lab lacks. A file the lab holds in
    another form raises LabMissing naming it."""
    absent = []
    for what, check in lab_checks():
        try:
            found = check()
        except lab.LabFileMissing:
            absent.append(what)
            continue
        assert found and all(path.stat().st_size > 0 for path in found), what
    return absent


@needs_lab
def test_every_file_the_lab_holds_is_in_a_published_form_the_tests_read():
    """Run with GPU_NODE_LAB set: each file docs/lab.md lists that the lab holds unpacks (one in
    another form fails here, naming it); files it lacks are named in the skip."""
    absent = absent_from_the_lab()
    if absent:
        pytest.skip(f"{lab.LAB_ENV}={lab.lab_root()} lacks {', '.join(absent)} (see docs/lab.md)")


def test_a_lab_of_every_listed_file_in_its_published_form_passes_the_check_and_one_in_another_form_fails(lab_dir):
    server_tarball(lab_dir)
    (lab_dir / dra_lab.SERVER_FOLDER).mkdir()
    server_tarball(lab_dir / dra_lab.SERVER_FOLDER, "v1.34.0")
    (lab_dir / assets.CRICTL_TARBALL).write_bytes(tar_bytes({"crictl": b"crictl"}, "gz"))
    (lab_dir / "nvidia-container-toolkit").mkdir()
    (lab_dir / "nvidia-container-toolkit" / "nvidia-container-toolkit_1.20.0-1_amd64.deb").write_bytes(b"deb")
    (lab_dir / "images").mkdir()
    contents = {
        "nvml-mock": {"usr/local/lib/libnvidia-ml.so.550.163.01": b"mock"},
        "device-plugin": {"usr/bin/nvidia-device-plugin": b"plugin"},
    }
    for key, image in assets.IMAGES.items():
        (lab_dir / "images" / f"{key}.tar").write_bytes(docker_archive([image], [contents.get(key, {"f": b"x"})]))
    (lab_dir / assets.INSPECT_GPUSHARE).write_bytes(b"plugin")
    assert absent_from_the_lab() == []

    (lab_dir / assets.CRICTL_TARBALL).write_bytes(tar_bytes({"bin/crictl": b"crictl"}, "gz"))
    with pytest.raises(lab.LabMissing, match=f"{assets.CRICTL_TARBALL} holds no crictl"):
        absent_from_the_lab()


def test_a_run_without_gpu_node_lab_ends_with_one_line_counting_the_tests_that_need_it(tmp_path):
    """The tests/conftest.py hook, in a real pytest run; the line is not one of pytest's own."""
    env = {key: value for key, value in os.environ.items() if key != lab.LAB_ENV}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(REPO),
            f"{Path(__file__)}::test_every_file_the_lab_holds_is_in_a_published_form_the_tests_read",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "1 test needs the lab: set GPU_NODE_LAB, see docs/lab.md" in lines, result.stdout
    assert any(line.startswith("SKIPPED [1]") and line.endswith(lab.UNSET) for line in lines), result.stdout
