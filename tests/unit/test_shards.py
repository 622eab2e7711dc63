"""The e2e shards of scripts/test (tests/shards.py): every file runs in exactly one shard, the
DKMS files together and in their order, and the loads come out even."""

from __future__ import annotations

from pathlib import Path

import pytest
import shards

FILES = [f"test_{name}.py" for name in "abcdefgh"] + sorted(shards.SAME_SHARD[0])


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_file_runs_in_exactly_one_shard(count):
    assigned = shards.assign(FILES, count)
    assert len(assigned) == count
    assert sorted(name for shard in assigned for name in shard) == sorted(FILES)


def test_the_files_that_build_dkms_share_a_shard():
    assigned = shards.assign(FILES, 3)
    holding = [index for index, shard in enumerate(assigned) if set(shard) & set(shards.SAME_SHARD[0])]
    assert len(holding) == 1
    assert set(shards.SAME_SHARD[0]) <= set(assigned[holding[0]])


def test_the_file_that_builds_the_driver_runs_before_the_files_that_load_its_build(monkeypatch):
    monkeypatch.setattr(shards, "SAME_SHARD", (("test_y.py", "test_b.py"),))
    e2e, unit = Path("tests/e2e"), Path("tests/unit")
    collected = [
        unit / "test_y.py",
        e2e / "test_a.py",
        e2e / "test_b.py",
        e2e / "test_c.py",
        e2e / "test_y.py",
        e2e / "test_z.py",
    ]
    assert shards.run_order(collected) == [
        unit / "test_y.py",
        e2e / "test_a.py",
        e2e / "test_y.py",
        e2e / "test_b.py",
        e2e / "test_c.py",
        e2e / "test_z.py",
    ]
    assert [
        shards.dkms_builds(path)
        for path in (e2e / "test_y.py", e2e / "test_b.py", unit / "test_y.py", e2e / "test_c.py")
    ] == ["keeps", "loads", None, None]


def test_the_longest_files_go_to_different_shards(monkeypatch):
    monkeypatch.setattr(shards, "SECONDS", {"test_a.py": 900, "test_b.py": 800, "test_c.py": 100, "test_d.py": 100})
    first, second = shards.assign(["test_a.py", "test_b.py", "test_c.py", "test_d.py"], 2)
    assert "test_a.py" in first and "test_b.py" in second
    loads = [sum(shards.SECONDS[name] for name in shard) for shard in (first, second)]
    assert sorted(loads) == [900, 1000]


@pytest.mark.parametrize(
    "value, message", [("2/1", "between 1 and n"), ("x", "expected k/n"), ("0/2", "between 1 and n")]
)
def test_a_bad_shard_setting_stops_in_one_line(monkeypatch, value, message):
    monkeypatch.setenv("GPU_NODE_E2E_SHARD", value)
    with pytest.raises(SystemExit, match=message):
        shards.this_shard()


def test_shards_probe_separate_port_ranges(monkeypatch):
    offsets = []
    for value in ("1/3", "2/3", "3/3"):
        monkeypatch.setenv("GPU_NODE_E2E_SHARD", value)
        offsets.append(shards.port_offset())
    assert len(set(offsets)) == 3


def test_seconds_per_file_sums_an_e2e_files_phases_and_leaves_unit_tests_out():
    class Report:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration

    reports = [
        Report("tests/e2e/test_a.py::test_one", 10.4),
        Report("tests/e2e/test_a.py::test_two", 5.0),
        Report("tests/e2e/test_b.py::test_one", 20.0),
        Report("tests/unit/test_c.py::test_one", 99.0),
    ]
    assert shards.seconds_per_file(reports) == {"test_b.py": 20, "test_a.py": 15}
