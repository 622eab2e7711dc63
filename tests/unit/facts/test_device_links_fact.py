"""NvidiaDeviceLinks: its own command run by sh over device nodes made here (mknod, as root)."""

from __future__ import annotations

import os
import subprocess

import pytest

from deploy.facts.devices import NvidiaDeviceLinks, missing_links

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root: the suite runs as root in CI")


def test_each_nvidia_character_device_is_listed_with_its_major_minor(tmp_path):
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    subprocess.run(["mknod", str(dev / "nvidia200"), "c", "195", "200"], check=True)
    subprocess.run(["mknod", str(dev / "nvidia-caps" / "nvidia-cap1"), "c", "508", "1"], check=True)
    (dev / "nvidia-not-a-device").write_text("")
    command = NvidiaDeviceLinks().command(dev_dir=str(dev))
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    devices = NvidiaDeviceLinks().process(output.splitlines())
    by_id = {device["id"]: device for device in devices}
    assert set(by_id) == {"195:200", "508:1"}
    assert by_id["195:200"]["node"] == str(dev / "nvidia200")
    # No machine has a 201st GPU's /dev/char link: it reads as missing
    assert by_id["195:200"]["link"] is None and by_id["195:200"] in missing_links(devices)


def test_a_link_to_another_node_is_missing():
    devices = NvidiaDeviceLinks().process(["node 195:0 /dev/nvidia0 /dev/nvidia0", "node 195:1 /dev/nvidia1 /dev/sda"])
    assert [device["id"] for device in missing_links(devices)] == ["195:1"]
