"""nvidia-smi parsing on fixture outputs (tests/fixtures/nvidia-smi, see its README for sources)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from deploy.facts.verification import (
    SMI_QUERY,
    VerifyReadout,
    explain_smi_failure,
    parse_smi_query,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"


def fixture(name: str) -> tuple[int, str, str]:
    """(exit code, command, output) of one fixture file."""
    meta, body = {}, []
    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("# ") and ":" in line and not body:
            key, _, value = line[2:].partition(":")
            meta[key.strip()] = value.strip()
        else:
            body.append(line)
    return int(meta["exit"]), meta["command"], "\n".join(body)


def verify_state(exit_code: int, output: str, listing: str = "") -> dict:
    """VerifyReadout.process on the lines its script prints for this nvidia-smi."""
    lines = [
        "pci 0000:01:00.0 0x20b0 0x030200",
        "smi_path /usr/bin/nvidia-smi",
        f"smi_rc {exit_code}",
        "smi_out " + base64.b64encode(output.encode()).decode(),
    ]
    if listing:
        lines.append("smi_list " + base64.b64encode(listing.encode()).decode())
    return VerifyReadout().process(lines)


def test_fixtures_are_for_the_query_the_fact_runs():
    for name in ("one-gpu.txt", "several-gpus.txt", "na-fields.txt", "exit-9.txt", "version-mismatch.txt"):
        _, command, _ = fixture(name)
        assert command == f"nvidia-smi {SMI_QUERY}"
    assert SMI_QUERY == "--query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits"


def test_one_gpu():
    code, _, output = fixture("one-gpu.txt")
    state = verify_state(code, output)
    assert state["smi"]["gpus"] == [
        {
            "index": 0,
            "uuid": "GPU-36c9561a-02ef-5c4d-3733-f0a56c42dc45",
            "name": "A100-SXM4-40GB",
            "memory_mib": 40536,
            "driver_version": "450.203.03",
        }
    ]


def test_several_gpus_keep_their_order_and_uuids():
    code, _, output = fixture("several-gpus.txt")
    _, _, listing = fixture("several-gpus-list.txt")
    state = verify_state(code, output, listing)
    gpus = state["smi"]["gpus"]
    assert [gpu["index"] for gpu in gpus] == [0, 1, 2, 3]
    assert {gpu["name"] for gpu in gpus} == {"Tesla V100-SXM2-16GB"}
    assert [gpu["uuid"] for gpu in gpus] == [gpu["uuid"] for gpu in state["smi"]["list"]]
    assert all(gpu["mig_devices"] == [] for gpu in state["smi"]["list"])


def test_na_and_not_supported_fields_become_none_not_values():
    code, _, output = fixture("na-fields.txt")
    first, second = parse_smi_query(output.splitlines())
    assert first == {
        "index": 0,
        "uuid": None,
        "name": "GeForce GT 540M",
        "memory_mib": None,
        "driver_version": "390.48",
    }
    assert second == {"index": 1, "uuid": None, "name": None, "memory_mib": None, "driver_version": "390.48"}


def test_mig_enabled_lists_the_mig_devices_under_their_gpu():
    _, _, listing = fixture("mig-list.txt")
    code, _, output = fixture("mig-query.txt")
    state = verify_state(code, output, listing)
    (gpu,) = state["smi"]["list"]
    assert gpu["uuid"] == state["smi"]["gpus"][0]["uuid"] == "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
    assert [device["profile"] for device in gpu["mig_devices"]] == ["1g.5gb"] * 7
    assert gpu["mig_devices"][6] == {
        "profile": "1g.5gb",
        "index": 6,
        "uuid": "MIG-7df6b45c-a92d-5e09-8540-a6b389968c31",
    }


def test_exit_9_is_explained_as_driver_not_loaded():
    code, _, output = fixture("exit-9.txt")
    state = verify_state(code, output)
    assert state["smi"]["exit_code"] == 9 and state["smi"]["gpus"] == []
    why = explain_smi_failure(code, output)
    assert why.startswith("exit 9: NVIDIA driver is not loaded")


@pytest.mark.parametrize("exit_code", [18, 255])
def test_version_mismatch_is_explained_whatever_the_exit_code(exit_code):
    _, _, output = fixture("version-mismatch.txt")
    why = explain_smi_failure(exit_code, output)
    assert why.startswith("Driver/library version mismatch (NVML library 570.124)")
    assert "reboot" in why and "kernel module" in why


def test_nvml_unknown_error_says_the_kernel_driver_is_missing():
    code, _, output = fixture("nvml-unknown-error.txt")
    why = explain_smi_failure(code, output)
    assert why.startswith("exit 255: Failed to initialize NVML: Unknown Error")
    assert "kernel driver" in why


def test_unknown_exit_codes_still_say_something():
    assert explain_smi_failure(15, "") == "exit 15: a GPU has fallen off the bus or is otherwise inaccessible"
    assert explain_smi_failure(42, "boom") == "exit 42: unknown error: boom"


def test_rows_with_the_wrong_number_of_fields_are_ignored_not_misread():
    assert parse_smi_query(["0, GPU-x, name", "garbage", ""]) == []


def test_failed_query_output_is_never_parsed_as_gpus():
    # A query that exits non-zero may still print CSV-looking text; only exit 0 counts.
    state = verify_state(6, "0, GPU-a, b, 1, 2")
    assert state["smi"]["gpus"] == []
