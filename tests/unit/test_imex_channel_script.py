"""
deploy/shell/imex_channel.sh, the boot unit's script of imex_channels=device-node, run for real in a scratch
root (tests/shell_sandbox.py): channel0 made under the major number /proc/devices gives
nvidia-caps-imex-channels, kept when it is right, made again when the major changed, and one line where the
driver registered none.
"""

from __future__ import annotations

import os

import pytest
from shell_sandbox import Sandbox, build_template

from deploy.foundations import shell_scripts

CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("sandbox") / "template")


@pytest.fixture
def box(template, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the scratch root is a chroot, and device nodes need root")
    return Sandbox.clone(template, tmp_path / "root")


def make_channel(box, devices: str):
    (box.root / "standin").mkdir(exist_ok=True)
    (box.root / "standin/devices").write_text(devices)
    return box.run(shell_scripts.script("imex_channel", proc_devices="/standin/devices", channel=CHANNEL))


def test_channel0_is_made_under_the_drivers_major_readable_and_writable_by_all(box):
    ran = make_channel(box, "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n")
    assert ran.status == 0, ran.stderr
    device = os.stat(box.root / CHANNEL.lstrip("/"))
    assert (os.major(device.st_rdev), os.minor(device.st_rdev)) == (234, 0)
    assert device.st_mode & 0o777 == 0o666
    again = make_channel(box, "Character devices:\n237 nvidia-caps-imex-channels\n")
    assert again.status == 0 and os.major(os.stat(box.root / CHANNEL.lstrip("/")).st_rdev) == 237


def test_no_registered_channel_device_is_one_line_and_nothing_made(box):
    ran = make_channel(box, "Character devices:\n195 nvidia\n")
    assert ran.status == 1
    assert ran.stderr.strip() == (
        "gpu-node: no nvidia-caps-imex-channels in /standin/devices (is the nvidia module "
        "loaded?): no IMEX channel made"
    )
    assert not (box.root / CHANNEL.lstrip("/")).exists()
