"""A tiny local image for nested containers: Debian's static busybox, built once and cached."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from cri.proto import CACHE, _run

IMAGE = "gpu-node-test/verify-busybox:1"
APPLETS = ("sh", "sleep", "echo", "cat", "true")


def busybox_image_tar() -> Path:
    """`docker save` of a FROM-scratch image with busybox (ENTRYPOINT sleeps: usable as a pause image)."""
    tar = CACHE / "verify-busybox.tar"
    if tar.exists():
        return tar
    tar.parent.mkdir(parents=True, exist_ok=True)
    debs = sorted(tar.parent.glob("busybox-static_*.deb"))
    if not debs:
        _run(["apt-get", "download", "busybox-static"], cwd=tar.parent)
        debs = sorted(tar.parent.glob("busybox-static_*.deb"))
    with tempfile.TemporaryDirectory() as workdir:
        extracted, rootfs = Path(workdir) / "deb", Path(workdir) / "rootfs"
        _run(["dpkg-deb", "-x", str(debs[-1]), str(extracted)])
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(extracted / "bin" / "busybox", rootfs / "bin" / "busybox")
        for applet in APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        archive = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True).stdout
        result = subprocess.run(
            ["docker", "import", "-c", 'ENTRYPOINT ["/bin/sleep", "3600"]', "-", IMAGE],
            input=archive, capture_output=True,
        )
        if result.returncode != 0:
            raise RuntimeError(result.stderr.decode()[-2000:])
    partial = tar.with_suffix(".partial")
    _run(["docker", "save", "-o", str(partial), IMAGE])
    partial.rename(tar)
    return tar


def import_into_node(node, names: list[str], namespace: str = "k8s.io") -> None:
    """Import the image into the node's containerd and tag it with each of ``names``."""
    tar = busybox_image_tar()
    _run(["docker", "cp", str(tar), f"{node.id}:/tmp/verify-busybox.tar"])
    node.sh(f"ctr -n {namespace} images import /tmp/verify-busybox.tar && rm -f /tmp/verify-busybox.tar")
    for name in names:
        node.sh(f"ctr -n {namespace} images tag --force docker.io/{IMAGE} {name}")
