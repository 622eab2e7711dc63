"""Fixtures that start real node containers; every test here is an e2e test."""

from __future__ import annotations

import pytest

from harness import Node, ensure_docker, node_image


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def image() -> str:
    ensure_docker()
    return node_image()


@pytest.fixture
def start_node(image):
    """Start node containers for one test; each is removed by id afterwards."""
    started: list[Node] = []

    def start(extra_run_args: list[str] | None = None) -> Node:
        node = Node(image=image, extra_run_args=extra_run_args or [])
        started.append(node)
        return node.start()

    yield start
    for node in started:
        node.remove()


@pytest.fixture
def node(start_node) -> Node:
    return start_node()


@pytest.fixture(scope="session")
def toolkit_repo(tmp_path_factory):
    """The REAL NVIDIA Container Toolkit 1.20.0 from the test lab (tests/toolkit_repo.py), in a
    local signed repository served on 127.0.0.1.

    Yields the repository (``root``, ``version``) with ``url`` and ``data(version=None, ...)``: the
    --data that points the toolkit stage at it. Skips, naming what to provide, without the lab.
    """
    import toolkit_repo as real
    from lab import LabMissing

    root = tmp_path_factory.mktemp("toolkit-repo") / "stable"
    try:
        repo = real.build_repo(root)
    except LabMissing as missing:
        pytest.skip(f"the real NVIDIA Container Toolkit is not available: {missing}")
    with real.serve(root) as url:
        repo.url = url
        repo.data = lambda **kwargs: real.deploy_data(url, **kwargs)
        yield repo


@pytest.fixture(scope="session")
def standin_toolkit_repo(tmp_path_factory):
    """The STAND-IN toolkit repository (tests/standin_toolkit.py), served on 127.0.0.1: two
    versions and the repository faults the real toolkit cannot show.

    Yields an object with ``url`` and ``data(wrong_key=False, version=None, key=..., ...)``.
    """
    import standin_toolkit

    root = tmp_path_factory.mktemp("standin-toolkit") / "stable"
    repo = standin_toolkit.build_repo(root)
    with standin_toolkit.serve(root) as url:
        repo.url = url
        repo.data = lambda **kwargs: standin_toolkit.deploy_data(url, **kwargs)
        yield repo
