"""Fixtures that start real node containers; every test here is an e2e test."""

from __future__ import annotations

from pathlib import Path

import family_images
import pci_tree
import pytest
import shards
import toolkit_repo as toolkit_repo_module
from harness import Node, ensure_docker, keep_dkms_builds, load_dkms_builds, node_image, wait_for


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def image() -> str:
    ensure_docker()
    return node_image()


@pytest.fixture(scope="session")
def kept_dkms_builds(tmp_path_factory) -> Path:
    """The DKMS builds this pytest keeps for the files that install the same driver after (tests/shards.py
    SAME_SHARD)."""
    return tmp_path_factory.mktemp("dkms-builds")


@pytest.fixture
def start_node(image, request, kept_dkms_builds):
    """Start node containers for one test; each is removed by id afterwards. In a SAME_SHARD file the
    nodes keep what DKMS built there for the run, or load what was kept (tests/shards.py)."""
    started: list[Node] = []
    booted: list[Node] = []
    builds = shards.dkms_builds(request.path)

    def start(extra_run_args: list[str] | None = None, image: str = image) -> Node:
        node = Node(image=image, extra_run_args=extra_run_args or [])
        started.append(node)
        booted.append(node.start())
        if builds == "loads":
            load_dkms_builds(node, kept_dkms_builds)
        return node

    yield start
    try:
        if builds == "keeps":
            for node in booted:
                keep_dkms_builds(node, kept_dkms_builds)
    finally:
        for node in started:
            node.remove()


@pytest.fixture
def node(start_node) -> Node:
    return start_node()


@pytest.fixture(scope="session")
def containerd_image(image) -> str:
    """The node image with Debian's containerd 1.6 installed (tests/family_images.py BOOKWORM_CONTAINERD)."""
    return family_images.family_image(family_images.BOOKWORM_CONTAINERD)


@pytest.fixture(scope="session")
def sid_containerd_image(image) -> str:
    """The node image with sid's containerd 2.1 installed (tests/family_images.py sid_containerd_image)."""
    return family_images.sid_containerd_image()


@pytest.fixture
def containerd_node(start_node, containerd_image) -> Node:
    """A node with Debian's containerd 1.6 installed and running, for a test whose subject is not its install."""
    node = start_node(image=containerd_image)
    wait_for(lambda: node.is_active("containerd"), timeout=60, what="containerd active")
    return node


@pytest.fixture
def start_topology_node(start_node, tmp_path):
    """Start a node container whose /sys/bus/pci/devices is the named topology fixture
    (tests/fixtures/fabric/, written by tests/pci_tree.py), read-only: a container cannot be given
    PCI devices, but every read of the PCI bus goes through that folder."""

    def start(name: str) -> Node:
        tree = pci_tree.write(pci_tree.load(name), tmp_path / name / "devices")
        for path in [tmp_path, *tmp_path.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        return start_node(["-v", f"{tree}:/sys/bus/pci/devices:ro"])

    return start


TOOLKIT_KIND, TOOLKIT_WHY = toolkit_repo_module.which_toolkit()


def pytest_report_header():
    return f"toolkit for e2e tests: {TOOLKIT_WHY}"


@pytest.fixture(scope="session", params=[TOOLKIT_KIND])
def toolkit_repo(request, tmp_path_factory):
    """The NVIDIA Container Toolkit in a local signed repository served on 127.0.0.1
    (tests/toolkit_repo.py): NVIDIA's debs from the lab (GPU_NODE_LAB), else the STAND-IN packages.
    Its id, ``real-toolkit`` or ``standin-toolkit``, is part of each test's name.

    Yields the ToolkitRepo (``kind``, ``version``, ``url``, ``root``, ``data(...)``, ``runtime_created``).
    """
    root = tmp_path_factory.mktemp("toolkit-repo") / "stable"
    with toolkit_repo_module.served(root) as repo:
        yield repo


@pytest.fixture(scope="session")
def real_toolkit_repo(toolkit_repo):
    """The REAL toolkit only: skips with one line naming GPU_NODE_LAB when the stand-in is served."""
    if toolkit_repo.kind != toolkit_repo_module.REAL:
        pytest.skip(
            "needs the real NVIDIA Container Toolkit: set GPU_NODE_LAB to a folder holding NVIDIA's debs (docs/lab.md)"
        )
    return toolkit_repo


@pytest.fixture(scope="session")
def standin_toolkit_repo(tmp_path_factory):
    """The STAND-IN toolkit repository (tests/standin_toolkit.py), served on 127.0.0.1: two
    versions and the repository faults the real toolkit cannot show.

    Yields the StandinRepo (``url``, ``keys_url``, ``key``, ``other_key``, ``data(wrong_key=False,
    version=None, key=..., ...)``).
    """
    import standin_toolkit

    with standin_toolkit.served(tmp_path_factory.mktemp("standin-toolkit") / "stable") as repo:
        yield repo
