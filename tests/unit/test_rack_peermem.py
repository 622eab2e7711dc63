"""
GPUDirect RDMA's nvidia-peermem, pure (deploy/rack/peermem.py): the OFED version `ofed_info -s` prints,
a pairing outside NVIDIA's published support named in one line, and where gpudirect_rdma=auto wants it.
"""

from __future__ import annotations

import pytest

from deploy.rack.peermem import FIRST_SUPPORTED_OFED, ofed_version, pairing_line, wants_peermem


@pytest.mark.parametrize(
    "printed, version",
    [
        ("MLNX_OFED_LINUX-24.10-1.1.4.0:", "24.10-1.1.4.0"),
        ("OFED-internal-25.04-0.6.1:", "25.04-0.6.1"),
        ("MLNX_OFED_LINUX-4.9-7.1.0.0:", "4.9-7.1.0.0"),
        ("", None),
        ("command not found", None),
    ],
)
def test_the_ofed_version_is_read_from_what_ofed_info_prints(printed, version):
    assert ofed_version(printed) == version


def test_an_ofed_older_than_nvidias_first_supported_one_is_named_in_one_line():
    line = pairing_line("4.9-7.1.0.0", 550)
    assert line == (
        f"OFED 4.9-7.1.0.0 is older than {FIRST_SUPPORTED_OFED}, the first NVIDIA supports nvidia-peermem "
        "with (its peer-direct fix): install DOCA-OFED"
    )
    assert pairing_line("5.3-1.0.0.1.43", 550) is None
    assert pairing_line("24.10-1.1.4.0", 570) is None
    assert pairing_line("5.2-2.2.0.0", 570) is not None


def test_a_driver_without_nvidia_peermem_is_named_and_the_inbox_stack_has_no_version_to_pair():
    assert "driver branch 465 has no nvidia-peermem" in pairing_line("24.10-1.1.4.0", 465)
    assert pairing_line(None, 570) is None


def test_auto_wants_peermem_where_a_gpu_and_a_connectx_rdma_function_are_on_the_bus():
    gpu = [{"slot": "0000:3b:00.0"}]
    nic = [{"slot": "0000:29:00.0", "switch_management": False}]
    bridge = [{"slot": "0000:05:00.0", "switch_management": True}]
    assert wants_peermem("auto", nic, gpu)
    assert not wants_peermem("auto", bridge, gpu)  # an NVLink5 switch-management bridge is no RDMA NIC
    assert not wants_peermem("auto", nic, [])
    assert wants_peermem("true", [], []) and not wants_peermem("false", nic, gpu)
