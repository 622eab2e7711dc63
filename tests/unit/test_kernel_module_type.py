"""
The kernel module type decision (deploy/driver/module_type.py), the branch lists' fact (deploy/facts/
gpu_support.py) and the one-version choice (deploy/driver/versions.py), with the table checked
against Debian's real nvidia-detect lists read from the archive at test time.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import debian_archive
import pytest

from deploy.driver import module_type
from deploy.driver.versions import VersionRefusal, choose, matching
from deploy.facts.gpu_support import GpuSupportLists

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpus"
A100, H100, GH200, B200, V100, P100, UNKNOWN = "0x20b0", "0x2330", "0x2342", "0x2901", "0x1db4", "0x15f8", "0x0a00"


def gpu(device: str, slot: str = "0000:3b:00.0") -> dict:
    return {"slot": slot, "device": device, "class": "0x030200"}


@pytest.mark.parametrize(
    "device, branch, expected",
    [
        (B200, 570, "open"),
        (GH200, 535, "open"),
        (A100, 535, "proprietary"),
        (A100, 560, "open"),
        (H100, 550, "proprietary"),
        (H100, 580, "open"),
        (V100, 580, "proprietary"),
        (P100, 535, "proprietary"),
    ],
)
def test_auto_follows_the_architecture_and_the_branch(device, branch, expected):
    assert module_type.decide_kernel_module_type("auto", [gpu(device)], branch).kernel_module_type == expected


def test_no_gpu_takes_the_branchs_default():
    assert module_type.decide_kernel_module_type("auto", [], 535).kernel_module_type == "proprietary"
    assert module_type.decide_kernel_module_type("auto", [], 570).kernel_module_type == "open"


@pytest.mark.parametrize(
    "setting, device, named",
    [
        ("proprietary", B200, "Blackwell"),
        ("proprietary", GH200, "Grace Hopper"),
        ("open", V100, "Volta"),
        ("open", P100, "Pascal"),
    ],
)
def test_an_explicit_kernel_module_type_the_gpu_cannot_use_is_refused_naming_it(setting, device, named):
    with pytest.raises(module_type.KernelModuleTypeRefusal) as refused:
        module_type.decide_kernel_module_type(setting, [gpu(device)], 570)
    assert f"0x{int(device, 16):04x} ({named})" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("setting", ["open", "proprietary"])
def test_turing_to_hopper_take_either_when_asked(setting):
    assert (
        module_type.decide_kernel_module_type(setting, [gpu(A100), gpu(H100, "0000:3c:00.0")], 535).kernel_module_type
        == setting
    )


def test_gpus_with_no_common_kernel_module_type_are_refused():
    with pytest.raises(module_type.KernelModuleTypeRefusal, match="allow no common kernel module type"):
        module_type.decide_kernel_module_type("auto", [gpu(B200), gpu(V100, "0000:3c:00.0")], 570)


def test_an_unknown_device_id_takes_the_branchs_default_with_a_warning_naming_it():
    decision = module_type.decide_kernel_module_type("auto", [gpu(UNKNOWN)], 535)
    assert decision.kernel_module_type == "proprietary"
    assert any("0x0a00" in line for line in decision.warnings)


def lists() -> dict:
    return GpuSupportLists().process((FIXTURES / "lists-output.txt").read_text().splitlines())


def test_the_fact_reads_the_json_open_feature_and_the_ids_files():
    found = lists()
    [(path, devices)] = found["json"].items()
    assert devices == {0x1DB4: False, 0x20B0: True, 0x2330: True}
    assert found["ids"]["nvidia-open.ids"] == [0x20B0]


def test_the_branchs_own_json_wins_over_the_table():
    # the fixture's json says its branch drives H100 only with... the open modules where it says so
    branch_list = module_type.branch_list_from(lists(), None, "535")
    assert branch_list.open_known
    # an ID the table does not know, that the branch's list says the open modules drive
    own = module_type.BranchList(
        source="test", supported=frozenset({0x0A00}), open_ids=frozenset({0x0A00}), open_known=True
    )
    assert module_type.decide_kernel_module_type("open", [gpu(UNKNOWN)], 535, own).kernel_module_type == "open"
    closed = module_type.BranchList(source="test", supported=frozenset({0x20B0}), open_known=True)
    with pytest.raises(module_type.KernelModuleTypeRefusal):
        module_type.decide_kernel_module_type("open", [gpu(A100)], 535, closed)


# The real bookworm case: nvidia-driver 535.309.01 in the security archive, the open module only at 535.261.03.
BOOKWORM = {
    "nvidia-driver": ["535.309.01-0+deb12u1", "535.261.03-1"],
    "nvidia-smi": ["535.309.01-0+deb12u1", "535.261.03-1"],
    "nvidia-open-kernel-dkms": ["535.261.03-1"],
    "nvidia-kernel-dkms": ["535.309.01-0+deb12u1", "535.261.03-1"],
}
OPEN = ["nvidia-driver", "nvidia-smi", "nvidia-open-kernel-dkms"]


def test_the_open_kernel_modules_pin_every_package_to_the_one_version_they_all_have():
    assert choose(OPEN, BOOKWORM, {}, None, "open") == dict.fromkeys(OPEN, "535.261.03-1")


def test_agreeing_candidates_are_left_to_apt():
    assert set(choose(["nvidia-driver", "nvidia-kernel-dkms"], BOOKWORM, {}, None, "x").values()) == {None}


def test_a_running_newer_driver_is_never_silently_downgraded():
    installed = {
        "nvidia-driver": {"version": "535.309.01-0+deb12u1"},
        "nvidia-smi": {"version": "535.309.01-0+deb12u1"},
    }
    with pytest.raises(VersionRefusal) as refused:
        choose(OPEN, BOOKWORM, installed, None, "the open kernel modules")
    assert "535.309.01 is newer than 535.261.03" in str(refused.value)
    assert choose(OPEN, BOOKWORM, installed, "535.261.03-1", "x") == dict.fromkeys(OPEN, "535.261.03-1")


def test_no_common_version_is_refused_naming_the_versions_found():
    with pytest.raises(VersionRefusal, match="nvidia-open-kernel-dkms 535.247.01"):
        choose(OPEN, {**BOOKWORM, "nvidia-open-kernel-dkms": ["535.247.01-1"]}, {}, None, "x")


def test_fabric_manager_must_match_the_drivers_upstream_version():
    offered = {"nvidia-fabricmanager-535": ["535.274.02-1", "535.261.03-1"]}
    assert matching(["nvidia-fabricmanager-535"], offered, "535.261.03", "FM") == {
        "nvidia-fabricmanager-535": "535.261.03-1"
    }
    with pytest.raises(VersionRefusal, match="535.274.02"):
        matching(["nvidia-fabricmanager-535"], offered, "535.309.01", "FM")


def debian_ids(suite: str = "bookworm") -> dict[str, list[int]]:
    """Debian's nvidia-detect .ids lists, downloaded from the archive now (never kept in the repo)."""
    try:
        options = debian_archive._options(debian_archive.lists(suite, "amd64"), "amd64")
    except RuntimeError as error:
        pytest.skip(f"Debian's archive unreachable: {error}")
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            ["apt-get", *options, "-o", f"Dir::Cache::archives={folder}", "download", "nvidia-detect"],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        [deb] = Path(folder).glob("nvidia-detect_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), f"{folder}/x"], check=True)
        return {
            path.name: [module_type.device_id(line) for line in path.read_text().split() if line]
            for path in Path(folder, "x/usr/share/nvidia").glob("*.ids")
        }


def test_the_table_knows_every_gpu_debians_535_driver_drives_and_its_open_list_allows_open():
    ids = debian_ids()
    unknown = [hex(device) for device in ids["nvidia.ids"] if module_type.architecture(device) is None]
    assert unknown == []
    closed = [
        hex(device)
        for device in ids["nvidia-open.ids"]
        if "open" not in module_type.module_types_of(module_type.architecture(device))
    ]
    assert closed == []


def test_a_gpu_only_the_branchs_list_knows_is_named_by_its_id_where_it_decides_the_type():
    # 0x0a00 is in no architecture range of the table; the branch's list drives it with the proprietary modules
    # only, against the branch's default (open): the reason names the GPU, where it had no architecture to name.
    closed = module_type.BranchList(source="test", supported=frozenset({0x0A00}), open_known=True)
    decision = module_type.decide_kernel_module_type("auto", [gpu(UNKNOWN)], 580, closed)
    assert decision.kernel_module_type == "proprietary"
    assert decision.why == "0x0a00 GPUs work only with the proprietary kernel modules"
