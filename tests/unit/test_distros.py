"""Distro detection from pyinfra's facts into the per-family table."""

from __future__ import annotations

import pytest

from deploy.distros import FAMILIES, UnsupportedPlatform, detect_platform


def distribution(distro_id: str, id_like: str = "", **meta):
    return {"name": distro_id, "major": None, "minor": None,
            "release_meta": {"ID": distro_id, "ID_LIKE": id_like, **meta}}


@pytest.mark.parametrize(
    ("distro_id", "family"),
    [
        ("debian", "debian"), ("ubuntu", "ubuntu"), ("rhel", "rhel"), ("rocky", "rhel"),
        ("almalinux", "rhel"), ("centos", "rhel"), ("fedora", "fedora"), ("amzn", "amazon"),
        ("opensuse-leap", "suse"), ("opensuse-tumbleweed", "suse"), ("sles", "suse"), ("arch", "arch"),
    ],
)
def test_each_supported_distro_maps_to_its_family(distro_id, family):
    assert detect_platform(distribution(distro_id), "x86_64").family.name == family


def test_derivatives_follow_id_like():
    assert detect_platform(distribution("linuxmint", "ubuntu debian"), "x86_64").family.name == "ubuntu"


def test_arm64_maps_to_nvidias_sbsa_repository_arch():
    platform = detect_platform(distribution("ubuntu", VERSION_CODENAME="noble"), "aarch64")
    assert (platform.deb_arch, platform.cuda_arch, platform.codename) == ("arm64", "sbsa", "noble")


def test_unsupported_distro_names_itself_and_what_is_supported():
    with pytest.raises(UnsupportedPlatform) as raised:
        detect_platform(distribution("alpine"), "x86_64")
    message = str(raised.value)
    assert "'alpine'" in message and "debian" in message and "arch" in message


def test_unsupported_arch_is_refused():
    with pytest.raises(UnsupportedPlatform, match="'ppc64le'"):
        detect_platform(distribution("debian"), "ppc64le")


def test_every_family_names_its_initramfs_tool_and_containerd_package():
    for family in FAMILIES:
        assert family.initramfs_command.split()[0] in ("update-initramfs", "dracut", "mkinitcpio")
        assert family.containerd_package
