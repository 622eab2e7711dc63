"""
The fleet view reads what nodes sent as untrusted input (issue 44), in both its modes: the folder
mode (``python -m gpu_node.fleet.from_reports FOLDER FLEET.json``: main() over a real folder) and the
SSH mode (deploy/fleet_view.py over @fake nodes whose NodeReports answer is what the fact's own
command prints over a real folder). Each hostile report (tests/hostile_reports.py) is one line naming
its file and what is wrong; every other node's row is still printed, written and paged; the exit
status is non-zero (over SSH: that host fails, the others do not); nothing a node wrote reaches the
terminal with its control characters.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import struct
from pathlib import Path

import pytest
from hostile_reports import (
    ENTRIES,
    EVIL_FILE_NAME,
    RAW_CONTROL,
    WRONG_TYPES,
    case_id,
    evil_report,
    failing_report,
    passing_report,
    thirty_mb,
    wrong_type_file,
)
from plan import QUICK, Node, run_inventory
from pyinfra.api import Inventory
from pyinfra.api.connect import disconnect_all
from test_fleet_from_reports import REPO, reports_folder_output

from deploy.facts.reports import MAX_NODE_REPORTS, NodeReports
from deploy.fleet import from_reports as fleet_from_reports
from deploy.foundations import node_text

FIELD_CASES = [
    pytest.param(wrong_type_file(where, value), where.split(".")[-1], id=case_id(where, value))
    for where, value in WRONG_TYPES
]
ENTRY_CASES = [pytest.param(entry.write, entry.says, id=entry.id) for entry in ENTRIES]


def folder_of_two(tmp_path: Path) -> Path:
    """A folder with gpu-good's passing report and gpu-failed's failed one."""
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "gpu-good.json").write_text(json.dumps(passing_report("gpu-good")))
    (folder / "gpu-failed.json").write_text(json.dumps(failing_report("gpu-failed")))
    return folder


def run_folder_mode(folder: Path, tmp_path: Path, capsys) -> tuple[int, str, list[str], dict]:
    """main() over ``folder``: (exit status, the table, the problem lines, the fleet JSON's rows by host)."""
    out_json = tmp_path / "fleet.json"
    status = fleet_from_reports.main([str(folder), str(out_json)])
    out, err = capsys.readouterr()
    page = out_json.with_suffix(".html").read_text(encoding="utf-8")
    for text in (out, err, page):
        assert not RAW_CONTROL.search(text), RAW_CONTROL.search(text)
    rows = {row["host"]: row for row in json.loads(out_json.read_text())["nodes"]}
    assert all(f'data-host="{host}"' in page for host in ("gpu-good", "gpu-failed"))
    return status, out, err.splitlines(), rows


def assert_the_others_shown(out: str, rows: dict) -> None:
    assert rows["gpu-good"]["status"] == "converged" and rows["gpu-failed"]["status"] == "failed"
    assert "gpu-failed failed in: report gpu-failed.json: kernel_module" in out
    # the fleet table's row (the driver table's comes after it)
    assert [line.split()[:2] for line in out.splitlines() if line.strip().startswith("gpu-good ")][0] == [
        "gpu-good",
        "converged",
    ]


@pytest.mark.parametrize(("write", "says"), FIELD_CASES + ENTRY_CASES)
def test_folder_mode_names_each_hostile_file_in_one_line_and_shows_every_other_node(write, says, tmp_path, capsys):
    folder = folder_of_two(tmp_path)
    write(folder, "gpu-bad.json")
    status, out, problems, rows = run_folder_mode(folder, tmp_path, capsys)
    assert status == 1
    assert len(problems) == 1 and f"{folder}/gpu-bad.json" in problems[0] and says in problems[0], problems
    assert "gpu-bad" not in rows
    assert_the_others_shown(out, rows)


def test_a_host_two_files_report_is_refused_naming_both_and_a_forged_pass_never_hides_a_failure(tmp_path, capsys):
    """gpu-99.json holding a passing report of gpu-17 beside gpu-17.json's failed one: gpu-17 is
    failed, not converged, and both files are named; a file of two nodes is refused too."""
    folder = folder_of_two(tmp_path)
    (folder / "gpu-17.json").write_text(json.dumps(failing_report("gpu-17")))
    (folder / "gpu-99.json").write_text(json.dumps(passing_report("gpu-17")))
    two = passing_report("gpu-x")
    two["nodes"].append(passing_report("gpu-y")["nodes"][0])
    (folder / "two.json").write_text(json.dumps(two))
    status, out, problems, rows = run_folder_mode(folder, tmp_path, capsys)
    assert status == 1
    assert rows["gpu-17"]["status"] == "failed" and not {"gpu-x", "gpu-y"} & set(rows)
    assert "--> Fleet report: 3 nodes: 1 converged, 0 changed, 2 failed" in out
    assert sorted(problems) == sorted(
        [
            f"gpu-node: gpu-17 is reported by 2 files ({folder}/gpu-17.json, {folder}/gpu-99.json): one node, one file: "
            "none of them read",
            f"gpu-node: {folder}/two.json: not a node report of one node: it holds 2 (one node, one file)",
        ]
    )
    assert_the_others_shown(out, rows)


def test_folder_mode_escapes_control_characters_in_the_table_the_problem_lines_and_the_page(tmp_path, capsys):
    folder = folder_of_two(tmp_path)
    (folder / "gpu-evil.json").write_text(json.dumps(evil_report()))
    (folder / EVIL_FILE_NAME).write_text("{not json")
    status, out, problems, rows = run_folder_mode(folder, tmp_path, capsys)
    assert status == 1
    assert [line for line in out.splitlines() if "gpu-evil" in line and "failed in" in line] == [
        r"    \x1b[2K\rgpu-evil\x1b]0;owned\x07 failed in: report gpu-evil.json: "
        r"\x1b[1A\x1b[2K\rkernel_module\x9b2K"
    ]
    assert r"containerd\x9b2K" in out and r"ok\x1b]0;owned\x07" in out
    assert r'data-host="\x1b[2K\rgpu-evil\x1b]0;owned\x07"' in (tmp_path / "fleet.html").read_text()
    assert problems == [
        f"gpu-node: {folder}/" + r"\x1b[2K\r\x1b]0;owned\x07\udc80junk.json: not a gpu-node report: not JSON: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    ]
    assert_the_others_shown(out, rows)


def bytes_read() -> int:
    """What this process has read so far (the kernel's count of read() calls' bytes)."""
    line = next(line for line in Path("/proc/self/io").read_text().splitlines() if line.startswith("rchar:"))
    return int(line.split()[1])


def test_folder_mode_reads_no_more_of_a_file_than_one_byte_past_the_bound(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    thirty_mb(folder, "big.json")
    before = bytes_read()
    rows, problems = fleet_from_reports.read_folder(str(folder))
    read = bytes_read() - before
    assert rows == [] and len(problems) == 1 and "big.json is larger than gpu-node reads" in problems[0]
    assert node_text.MAX_FILE_BYTES < read < node_text.MAX_FILE_BYTES + 64 * 1024, read


def test_a_file_swapped_for_a_link_or_a_fifo_after_the_listing_is_neither_followed_nor_waited_on(tmp_path):
    """Between the folder's listing (which saw regular files) and the read, each file is replaced: by
    a link to a report elsewhere (the open does not follow it) and by a FIFO no one writes (the open
    does not wait for a writer, and the file is refused once open)."""
    folder = tmp_path / "reports"
    folder.mkdir()
    for name in ("link.json", "fifo.json"):
        (folder / name).write_text(json.dumps(passing_report(name)))
    (tmp_path / "elsewhere.json").write_text(json.dumps(passing_report("gpu-elsewhere")))
    entries = {entry.name: entry for entry in fleet_from_reports.report_entries(folder)}
    (folder / "link.json").unlink()
    os.symlink(tmp_path / "elsewhere.json", folder / "link.json")
    (folder / "fifo.json").unlink()
    os.mkfifo(folder / "fifo.json")
    for entry in entries.values():
        assert entry.is_file(follow_symlinks=False), "the listing's view, as it was"
        with pytest.raises(fleet_from_reports.NotAReport, match="^not a regular file"):
            fleet_from_reports.read_report(folder, entry)


# IN_OPEN from inotify(7): the kernel queues one event per open of a watched file as it happens.
# ctypes, as no package this project installs wraps inotify.
IN_OPEN, INOTIFY_EVENT = 0x20, struct.Struct("iIII")  # struct inotify_event without its name


@contextlib.contextmanager
def opens_of(path: Path):
    """The number of times anything opened ``path`` while the block ran (the list holds it after)."""
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert watch >= 0 and libc.inotify_add_watch(watch, os.fsencode(path), IN_OPEN) >= 0, os.strerror(
        ctypes.get_errno()
    )
    opened: list[int] = []
    try:
        yield opened
        try:
            events = os.read(watch, 4096)
        except BlockingIOError:
            events = b""
        opened.append(len(events) // INOTIFY_EVENT.size)  # a file's events carry no name: one size each
    finally:
        os.close(watch)


def test_folder_mode_never_opens_a_fifo_or_anything_but_a_regular_file(tmp_path, capsys):
    """A FIFO in the folder is named and not opened at all (a device node, which opening may act on,
    is passed over by the same check): inotify sees no open of it, and sees the regular file's."""
    folder = folder_of_two(tmp_path)
    os.mkfifo(folder / "pipe.json")
    with opens_of(folder / "pipe.json") as pipe_opens, opens_of(folder / "gpu-good.json") as report_opens:
        status, out, problems, rows = run_folder_mode(folder, tmp_path, capsys)
    assert pipe_opens == [0] and report_opens == [1]
    assert problems == [
        f"gpu-node: {folder}/pipe.json: not a regular file (a symbolic link, FIFO, device or folder): not read"
    ]


def test_folder_mode_refuses_a_folder_of_more_report_files_than_its_bound_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fleet_from_reports, "MAX_FOLDER_REPORTS", 2, raising=False)
    folder = folder_of_two(tmp_path)
    (folder / "gpu-third.json").write_text(json.dumps(passing_report("gpu-third")))
    assert fleet_from_reports.main([str(folder)]) == 1
    out, err = capsys.readouterr()
    assert (
        out == ""
        and err
        == f"gpu-node: {folder}: holds more than 2 .json files: not read (a fleet's folder holds one report per node)\n"
    )


# --- over SSH ------------------------------------------------------------------------------------


def run_ssh_mode(tmp_path: Path, bad_folder: Path, capsys):
    """deploy/fleet_view.py over @fake/gpu-good (a passing report.json), @fake/gpu-failed (a failed
    one) and @fake/gpu-bad (``bad_folder``): (the plan, the table, the problem lines, the JSON's rows
    by host, without "@fake/")."""
    answers = {"@fake/gpu-bad": reports_folder_output(bad_folder)}
    for name, report in (("gpu-good", passing_report("@local")), ("gpu-failed", failing_report("@local"))):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(report))
        answers[f"@fake/{name}"] = reports_folder_output(folder)
    out_json = tmp_path / "view.json"
    inventory = Inventory(([(name, QUICK) for name in answers], {}), override_data={"fleet_report_path": str(out_json)})
    plan = run_inventory(
        inventory,
        {name: Node(facts=[(NodeReports, answer)]) for name, answer in answers.items()},
        str(REPO / "deploy" / "fleet_view.py"),
    )
    disconnect_all(plan.state)
    out, err = capsys.readouterr()
    page = out_json.with_suffix(".html").read_text(encoding="utf-8")
    for text in (out, err, page, *plan.failures):
        assert not RAW_CONTROL.search(text), RAW_CONTROL.search(text)
    assert plan.error is None, plan.error
    assert sorted(host.name for host in plan.state.failed_hosts) == ["@fake/gpu-bad", "@fake/gpu-failed"]
    rows = {row["host"].removeprefix("@fake/"): row for row in json.loads(out_json.read_text())["nodes"]}
    assert rows["gpu-good"]["status"] == "converged" and rows["gpu-failed"]["status"] == "failed"
    assert "@fake/gpu-failed failed in: report report.json: kernel_module" in out
    return plan, out, [line for line in err.splitlines() if line.startswith("gpu-node: ")], rows


@pytest.mark.parametrize(("write", "says"), FIELD_CASES)
def test_ssh_mode_names_a_hostile_report_fails_that_host_alone_and_shows_every_other_node(
    write, says, tmp_path, capsys
):
    folder = tmp_path / "bad"
    folder.mkdir()
    write(folder, "boot-report.json")
    plan, out, problems, rows = run_ssh_mode(tmp_path, folder, capsys)
    assert len(problems) == 1 and "@fake/gpu-bad: /var/lib/gpu-node/boot-report.json: " in problems[0]
    assert says in problems[0]
    assert rows["gpu-bad"]["status"] == "failed"
    [line] = [line for line in plan.failures if "/var/lib/gpu-node/boot-report.json" in line]
    assert says in line


@pytest.mark.parametrize(("write", "says"), ENTRY_CASES)
def test_ssh_mode_reads_only_regular_files_within_the_bound_and_names_the_others(write, says, tmp_path, capsys):
    """gpu-bad keeps a passing report.json and the entry: its row is report.json's, the entry is named
    in one line and the host fails; the node sends no more than the bound of any file."""
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(passing_report("@local")))
    write(folder, "gpu-bad.json")
    assert all(len(line) < (node_text.MAX_FILE_BYTES + 1) * 4 // 3 + 200 for line in reports_folder_output(folder))
    plan, out, problems, rows = run_ssh_mode(tmp_path, folder, capsys)
    assert len(problems) == 1 and "@fake/gpu-bad: /var/lib/gpu-node/gpu-bad.json" in problems[0]
    assert says in problems[0]
    assert rows["gpu-bad"]["status"] == "converged"


def test_ssh_mode_reads_no_more_report_files_of_a_node_than_its_bound(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    for index in range(MAX_NODE_REPORTS + 2):
        (folder / f"r{index:02d}.json").write_text(json.dumps(passing_report("@local")))
    output = reports_folder_output(folder)
    assert [line.split()[0] for line in output] == ["report"] * MAX_NODE_REPORTS + ["more"]
    # a node that sends more lines than its script would is held to the bound too
    held = NodeReports().process([line for line in output if line.startswith("report")] * 3)
    assert len(held) == MAX_NODE_REPORTS + 1 and held[-1]["not_read"].startswith(f"more than {MAX_NODE_REPORTS}")
    plan, out, problems, rows = run_ssh_mode(tmp_path, folder, capsys)
    assert problems == [
        f"gpu-node: @fake/gpu-bad: /var/lib/gpu-node/r{MAX_NODE_REPORTS:02d}.json: more than "
        f"{MAX_NODE_REPORTS} .json files in the folder: this one and those after it not read"
    ]


def test_ssh_mode_escapes_control_characters_in_the_table_the_problem_lines_and_the_page(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(evil_report()))
    (folder / EVIL_FILE_NAME).write_text("{not json")
    plan, out, problems, rows = run_ssh_mode(tmp_path, folder, capsys)
    assert [line for line in out.splitlines() if "gpu-bad failed in" in line] == [
        r"    @fake/gpu-bad failed in: report report.json: \x1b[1A\x1b[2K\rkernel_module\x9b2K"
    ]
    assert r"containerd\x9b2K" in out and r"ok\x1b]0;owned\x07" in out
    assert problems == [
        r"gpu-node: @fake/gpu-bad: /var/lib/gpu-node/\x1b[2K\r\x1b]0;owned\x07\udc80junk.json: not a gpu-node "
        "report: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    ]
    [line] = plan.failed_with("junk.json")
    assert line.startswith(r"@fake/gpu-bad: /var/lib/gpu-node/\x1b[2K\r\x1b]0;owned\x07\udc80junk.json: ")
