"""
A repository the node's package manager cannot read, on the dnf and zypper nodes (tests/family_images.py,
tests/family_zypper.py: the real dnf 4.14 and zypper 1.14): a repository file naming a port on
127.0.0.1 where nothing listens. dnf then lists nothing at all, zypper skips it and lists the rest;
an install stops at it (dnf's metadata, the zypper refresh the install runs first). The driver stage's
preflight reads what the manager offers: it names that repository and the manager's reason in a
warning, before any change. The runs are planned on the node (pyinfra --dry: the facts are read for
real, nothing is executed), so the node is as it was.
"""

from __future__ import annotations

import pytest
from family_images import ROCKY9_DNF, family_node
from family_zypper import LEAP156_ZYPPER
from harness import ensure_docker
from standin_toolkit import refused_url, unfetched_keys

REPOSITORY = "[mirror]\nname=mirror\nbaseurl={url}/repo\nenabled=1\nautorefresh=1\ngpgcheck=0\n"


@pytest.mark.parametrize(
    "image, folder, reason, settings",
    [
        (
            ROCKY9_DNF,
            "/etc/yum.repos.d",
            "Cannot download repomd.xml",
            lambda url: {"nvidia_driver_branch": "550", "nvidia_cuda_repo_url": url, **unfetched_keys()},
        ),
        (
            LEAP156_ZYPPER,
            "/etc/zypp/repos.d",
            "Couldn't connect to server",
            lambda url: {"nvidia_driver_repo_url": url, "nvidia_cuda_repo_url": url, **unfetched_keys()},
        ),
    ],
    ids=["dnf", "zypper"],
)
def test_the_driver_stages_preflight_names_a_repository_the_manager_cannot_read_and_why(
    image, folder, reason, settings
):
    ensure_docker()
    node = family_node(image).start()
    try:
        url = refused_url()
        node.write(f"{folder}/mirror.repo", REPOSITORY.format(url=url))
        before = node.sh(f"ls {folder}; rpm -qa | sort").stdout
        result = node.deploy(
            data={"stages": "driver", "allow_insecure_repositories": "true", **settings(url)},
            json_output=False,
            extra_args=["--dry"],
        )
        manager = "dnf" if image is ROCKY9_DNF else "zypper"
        warnings = [
            line for line in result.run_output.splitlines() if f"{manager} cannot read repository 'mirror'" in line
        ]
        assert len(warnings) == 1, result.explain()
        assert reason in warnings[0] and "an install would stop at it" in warnings[0], warnings[0]
        assert "Traceback" not in result.output
        # the same read without the broken repository warns of nothing: the check above can fail
        node.sh(f"rm {folder}/mirror.repo")
        healthy = node.deploy(
            data={"stages": "driver", "allow_insecure_repositories": "true", **settings(url)},
            json_output=False,
            extra_args=["--dry"],
        )
        assert "cannot read" not in healthy.output, healthy.explain()
        node.write(f"{folder}/mirror.repo", REPOSITORY.format(url=url))
        assert node.sh(f"ls {folder}; rpm -qa | sort").stdout == before
    finally:
        node.remove()
