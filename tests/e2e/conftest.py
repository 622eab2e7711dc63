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
