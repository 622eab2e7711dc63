"""A tiny local image for nested containers: Debian's static busybox, built once and cached."""

from __future__ import annotations

from pathlib import Path

import harness
from harness import run as _run

IMAGE = "gpu-node-test/verify-busybox:1"
APPLETS = ("sh", "sleep", "echo", "cat", "true")


def busybox_image_tar() -> Path:
    """The image with an ENTRYPOINT that sleeps: usable as a pause image."""
    return harness.busybox_image_tar(IMAGE, APPLETS, entrypoint=["/bin/sleep", "3600"])


def import_into_node(node, names: list[str], namespace: str = "k8s.io") -> None:
    """Import the image into the node's containerd and tag it with each of ``names``."""
    tar = busybox_image_tar()
    _run(["docker", "cp", str(tar), f"{node.id}:/tmp/verify-busybox.tar"])
    node.sh(f"ctr -n {namespace} images import /tmp/verify-busybox.tar && rm -f /tmp/verify-busybox.tar")
    for name in names:
        node.sh(f"ctr -n {namespace} images tag --force docker.io/{IMAGE} {name}")
