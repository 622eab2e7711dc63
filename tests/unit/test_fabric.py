"""
Fabric detection (deploy/driver/fabric.py) from our sysfs fixtures of real topologies
(tests/fixtures/fabric/: HGX A100, HGX H100, HGX B200, a GB200 NVL72 compute tray, a PCIe-only
server): each fixture is written as a PCI device folder, NodeSurvey's real command runs over it,
and its output goes through NodeSurvey.process and fabric_of.
"""

from __future__ import annotations

import subprocess

import pytest
from pci_tree import load, topologies, write

from deploy.driver.fabric import NVLINK5_MODULES_LOAD_PATH, Fabric, fabric_of, modules_load_text
from deploy.facts.nvidia import NodeSurvey

SYSFS_PCI = "/sys/bus/pci/devices"


def read_node(tree) -> dict:
    """NodeSurvey's own command, its PCI folder pointed at ``tree``."""
    command = NodeSurvey().command()
    assert SYSFS_PCI in command
    result = subprocess.run(["sh", "-c", command.replace(SYSFS_PCI, str(tree))], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return NodeSurvey().process(result.stdout.splitlines())


@pytest.mark.parametrize("path", topologies(), ids=lambda path: path.stem)
def test_fabric_of_each_topology_through_hoststate(path, tmp_path):
    topology = load(path)
    node = read_node(write(topology, tmp_path / "devices"))
    fabric = fabric_of(node)
    assert fabric.kind == topology["expected"]["kind"], fabric.evidence
    assert list(fabric.devices) == topology["expected"]["devices"]
    # the command saw every NVIDIA GPU of the fixture, and every Mellanox physical function
    gpus = {
        device["slot"]
        for device in topology["devices"]
        if device["vendor"] == "0x10de" and device["class"].startswith("0x03")
    }
    assert {gpu["slot"] for gpu in node["gpus"]} == gpus
    physical = {
        device["slot"] for device in topology["devices"] if device["vendor"] == "0x15b3" and "physfn" not in device
    }
    assert {device["slot"] for device in node["mellanox"]} == physical


def test_hgx_b200_needs_fabric_manager_nvlsm_and_ib_umad_and_names_its_bridges(tmp_path):
    fabric = fabric_of(read_node(write(load("hgx-b200"), tmp_path / "devices")))
    assert (fabric.needs_fabric_manager, fabric.needs_nvlsm, fabric.modules) == (True, True, ("ib_umad",))
    assert "0000:ab:00.0, 0000:ab:00.1" in fabric.evidence and "SW_MNG" in fabric.evidence


def test_b200_virtual_function_is_not_read_and_nics_are_not_switch_management(tmp_path):
    node = read_node(write(load("hgx-b200"), tmp_path / "devices"))
    slots = {device["slot"]: device["switch_management"] for device in node["mellanox"]}
    assert "0000:18:00.2" not in slots  # the VF
    assert slots["0000:18:00.0"] is False and slots["0000:ac:00.0"] is False and slots["0000:ab:00.1"] is True


@pytest.mark.parametrize("name, board", [("hgx-a100", "HGX A100, NVLink 3"), ("hgx-h100", "HGX H100/H200, NVLink 4")])
def test_nvswitch_boards_need_fabric_manager_only(name, board, tmp_path):
    fabric = fabric_of(read_node(write(load(name), tmp_path / "devices")))
    assert (fabric.needs_fabric_manager, fabric.needs_nvlsm, fabric.modules) == (True, False, ())
    assert board in fabric.evidence


@pytest.mark.parametrize("name", ["pcie-only", "gb200-nvl72-compute-tray"])
def test_nodes_without_nvswitch_need_none_of_it(name, tmp_path):
    fabric = fabric_of(read_node(write(load(name), tmp_path / "devices")))
    assert (fabric.needs_fabric_manager, fabric.needs_nvlsm, fabric.modules) == (False, False, ())
    assert modules_load_text(fabric, "# header\n") is None


def test_an_nvidia_bridge_that_is_no_known_nvswitch_does_not_count():
    # nForce-era NVIDIA functions (e.g. MCP55's Ethernet, 10de:0373) report class 0x0680 too
    node = NodeSurvey().process(["pci 0000:00:08.0 0x0373 0x068000", "kernel 6.1.0-18-amd64"])
    assert node["switches"] and fabric_of(node).kind == "none"
    assert "10de:0373 is not a known NVSwitch" in fabric_of(node).evidence


def test_modules_load_text_for_nvlink5():
    fabric = Fabric("nvlink5", "two bridges", ("0000:ab:00.0",))
    assert NVLINK5_MODULES_LOAD_PATH.startswith("/etc/modules-load.d/")
    assert modules_load_text(fabric, "# header\n") == "# header\nib_umad\n"


def test_mellanox_lines_with_missing_fields_are_ignored():
    node = NodeSurvey().process(["mellanox 0000:29:00.0 0x1021", "mellanox 0000:2a:00.0 0x1021 0x020700 SW_MNG"])
    assert node["mellanox"] == [
        {"slot": "0000:2a:00.0", "device": "0x1021", "class": "0x020700", "switch_management": True}
    ]
