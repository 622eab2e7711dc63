"""
The node's health check (deploy/health/check.py) on a STAND-IN node (tests/standin_health_node.py:
a folder with sysfs, /proc and the module trees as the driver lays them out, and stand-in
journalctl, nvidia-smi, systemctl and modinfo on its own path): what it reads, what it decides,
what it writes (health.json valid against the shipped schema), what it prints, and its exit status.
Nothing here writes to this machine's kernel log: the Xid lines are the stand-in journalctl's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
from disk_flushes import flushes_around_its_rename, record_flushes
from standin_health_node import DRIVER, KERNEL, PCIE, StandInNode, stand_in_node, xid_message
from standin_nvidia_smi import MISMATCH, MISMATCH_EXIT, StandInGpu

from deploy.foundations import node_text
from deploy.health import check, journal
from deploy.health.node import printable
from deploy.health.settings import STATE_PATH, HealthSettings

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "deploy" / "schemas" / "health-report.schema.json").read_text())
FALLEN = "GPU has fallen off the bus."


def run(node: StandInNode, capsys, *args: str) -> tuple[int, list[str], dict]:
    """The check's main on ``node`` (its settings file written as the deploy writes it): (exit
    status, what it printed, the report it wrote, checked against the shipped schema)."""
    config = node.root / "etc" / "health-check.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({key: getattr(node.settings, key) for key in vars(node.settings)}))
    code = check.main([*args, "--config", str(config)], host=node.host, top=str(node.root))
    printed = capsys.readouterr().out.splitlines()
    report = json.loads(node.report_path.read_text())
    errors = [
        f"{list(error.absolute_path)}: {error.message}"
        for error in jsonschema.Draft202012Validator(SCHEMA).iter_errors(report)
    ]
    assert not errors, errors
    return code, printed, report


def lines(report: dict) -> list[tuple[str, str]]:
    return [(problem["severity"], problem["line"]) for problem in report["problems"]]


def test_a_healthy_node_exits_0_and_reports_each_gpu_the_driver_and_nvml_see(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (0, ["healthy: 2 GPU(s)"])
    assert report["status"] == "healthy" and report["healthy"] is True and report["problems"] == []
    assert [(gpu["pci"], gpu["seen_by_driver"], gpu["name"], gpu["ecc_uncorrected"]) for gpu in report["gpus"]] == [
        (pci, True, "NVIDIA H100 PCIe", 0) for pci in PCIE
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", report["checked_at"])
    # the kernel's entries of this boot from its start, on the first run
    assert node.calls("journalctl") == [
        "--no-pager --quiet --output=json --output-fields=MESSAGE,_BOOT_ID --boot=0 _TRANSPORT=kernel"
    ]


def test_an_xid_79_makes_the_node_unhealthy_until_the_next_boot_read_once_from_the_journals_cursor(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    node.log_kernel("usb 1-1: new device", xid_message(PCIE[1], 79, FALLEN))
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (1, ["Xid 79 on 0000:ca:00.0: GPU fallen off the bus"])
    assert report["problems"][0] == {
        "kind": "xid",
        "gpu": PCIE[1],
        "severity": "fatal",
        "line": "Xid 79 on 0000:ca:00.0: GPU fallen off the bus",
    }
    # the next run reads after the last entry read: the Xid is not counted twice, and stays
    node.log_kernel(xid_message(PCIE[1], 79, FALLEN))
    code, _, report = run(node, capsys, "--npd")
    assert node.calls("journalctl")[-1].endswith("--after-cursor=s=stand-in;i=2 _TRANSPORT=kernel")
    assert code == 1 and lines(report)[0] == (
        "fatal",
        "Xid 79 on 0000:ca:00.0: GPU fallen off the bus (2 times this boot)",
    )
    code, _, report = run(node, capsys, "--npd")
    assert code == 1 and "(2 times this boot)" in lines(report)[0][1]
    # a new boot: the Xids of the last one are not this boot's GPUs' state
    node.new_boot("9" * 32)
    assert run(node, capsys, "--npd")[:2] == (0, ["healthy: 2 GPU(s)"])


def test_forget_xids_after_a_gpu_reset_forgets_this_boots_xids_until_now_and_keeps_those_after(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    node.log_kernel(xid_message(PCIE[0], 48, "DBE"))
    assert run(node, capsys)[0] == 1
    node.log_kernel(xid_message(PCIE[0], 48, "DBE"))  # before the reset, not yet read
    assert run(node, capsys, "--forget-xids")[:1] == (0,)
    assert run(node, capsys)[0] == 0
    node.log_kernel(xid_message(PCIE[1], 79, FALLEN))
    assert lines(run(node, capsys)[2]) == [("fatal", "Xid 79 on 0000:ca:00.0: GPU fallen off the bus")]


@pytest.mark.parametrize(
    ("xid", "text", "severity", "status"),
    [
        (48, "An uncorrectable double bit error (DBE) has been detected", "needs reset", 1),
        (94, "Contained: SM (0x1). RST: No, D-RST: No", "needs reset", 1),
        (95, "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No", "needs reset", 1),
        (119, "Timeout after 6s of waiting for RPC response from GPU0 GSP!", "needs reset", 1),
        (74, "NVLink: fatal error detected on link 3", "needs reset", 1),
        (13, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)", "informational", 0),
        (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "fatal", 1),
        (154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "needs reset", 1),
        (999, "something new", "informational", 0),
    ],
)
def test_each_xid_is_classified_from_the_table(tmp_path, capsys, xid, text, severity, status):
    node = stand_in_node(tmp_path)
    node.log_kernel(xid_message(PCIE[0], xid, text))
    code, _, report = run(node, capsys)
    assert code == status
    assert [(problem["kind"], problem["gpu"], problem["severity"]) for problem in report["problems"]] == [
        ("xid", PCIE[0], severity)
    ]


def test_a_gpu_on_the_pci_bus_that_nvml_does_not_answer_for_is_fatal_standin_nvidia_smi(tmp_path, capsys):
    """The driver lists both GPUs of the PCI fixture; the stand-in nvidia-smi answers for one."""
    node = stand_in_node(tmp_path, smi_gpus=PCIE[:1])
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (1, ["GPU 0000:ca:00.0 is seen by the driver but not by NVML"])
    # without /proc/driver/nvidia/gpus, nvidia-smi's answer is what the driver sees
    node.loaded(DRIVER)
    (node.root / "proc" / "driver" / "nvidia" / "gpus").rmdir()
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (1, ["GPU 0000:ca:00.0 is on the PCI bus but not seen by the driver"])
    assert [gpu["seen_by_driver"] for gpu in report["gpus"]] == [True, False]


def test_a_library_an_updater_moved_under_the_loaded_module_is_a_mismatch_standin_nvidia_smi(tmp_path, capsys):
    """The update put NVML 550.54.15 in place (the old library gone) while 535.261.03 stays loaded and
    the running kernel's module was not rebuilt: NVML refuses (the stand-in says so, as nvidia-smi does)."""
    node = stand_in_node(tmp_path)
    node.library("550.54.15")
    node.smi(failure=(MISMATCH_EXIT, MISMATCH))
    code, printed, report = run(node, capsys, "--npd")
    assert code == 1 and printed == ["loaded module 535.261.03, NVML library 550.54.15: version mismatch (reload th..."]
    assert lines(report) == [
        (
            "needs attention",
            "loaded module 535.261.03, NVML library 550.54.15: version mismatch (reload the driver or reboot)",
        ),
        ("needs attention", f"the running kernel {KERNEL}'s nvidia module is 535.261.03, the driver 550.54.15"),
    ]
    # NVML's refusal alone (no library file found): its own line
    node.library(None)
    assert lines(run(node, capsys)[2])[0] == (
        "needs attention",
        "NVML refuses the loaded module: driver/library version mismatch",
    )


def test_the_next_boots_kernel_without_a_module_of_the_driver_is_named_with_what_chose_it(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    node.kernel("6.1.0-30-amd64", None)
    code, _, report = run(node, capsys)
    assert code == 1 and lines(report) == [
        (
            "needs attention",
            "the next boot's kernel 6.1.0-30-amd64 has no nvidia module of driver 535.261.03: booted, "
            "the node has no GPU (the newest installed kernel, GRUB's first entry)",
        )
    ]
    (node.root / "etc" / "default").mkdir(parents=True)
    (node.root / "etc" / "default" / "grub").write_text("GRUB_DEFAULT=saved\n")
    (node.root / "boot" / "grub").mkdir()
    (node.root / "boot" / "grub" / "grubenv").write_text(f"saved_entry=gnulinux-{KERNEL}-advanced\n")
    assert run(node, capsys)[:1] == (0,)  # GRUB starts the running kernel next
    node.kernel("6.1.0-30-amd64", "550.54.15")
    (node.root / "boot" / "grub" / "grubenv").write_text("next_entry=gnulinux-6.1.0-30-amd64-advanced\n")
    assert lines(run(node, capsys)[2]) == [
        (
            "needs attention",
            "the next boot's kernel 6.1.0-30-amd64 has no nvidia module of driver 535.261.03 (it has "
            "550.54.15): booted, the node has no GPU (GRUB's next_entry gnulinux-6.1.0-30-amd64-advanced)",
        )
    ]


def test_memory_errors_retired_pages_and_row_remaps_per_gpu_standin_nvidia_smi(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    node.smi(
        gpus=[
            StandInGpu(PCIE[0], ecc_uncorrected="3", remap_pending="Yes"),
            StandInGpu(PCIE[1], remap_failure="Yes", retired_single="2", retired_double="1", retired_pending="Yes"),
        ]
    )
    code, printed, report = run(node, capsys, "--npd")
    assert code == 1 and printed == ["GPU 0000:ca:00.0: row remapping failed (the GPU needs service) (and 2 more)"]
    assert lines(report) == [
        ("fatal", "GPU 0000:ca:00.0: row remapping failed (the GPU needs service)"),
        ("needs reset", "GPU 0000:17:00.0: row remap pending (active after a GPU reset)"),
        ("needs reset", "GPU 0000:ca:00.0: page retirement pending (active after a GPU reset)"),
        ("informational", "GPU 0000:17:00.0: 3 uncorrectable ECC error(s) since the driver loaded"),
    ]
    assert [(gpu["ecc_uncorrected"], gpu["retired_pages"], gpu["pending_row_remap"]) for gpu in report["gpus"]] == [
        (3, None, True),
        (0, 3, False),
    ]


def test_services_persistenced_fabric_manager_where_nvswitches_are_and_imex_where_enabled(tmp_path, capsys):
    node = stand_in_node(tmp_path, topology="hgx-h100")
    node.units(
        {
            "nvidia-persistenced.service": ("loaded", "failed", "enabled"),
            "nvidia-imex.service": ("loaded", "inactive", "enabled"),
        }
    )
    code, _, report = run(node, capsys)
    assert code == 1 and lines(report) == [
        ("needs attention", "nvidia-persistenced.service is failed"),
        ("needs attention", "NVSwitches on the PCI bus, but nvidia-fabricmanager.service is not installed"),
        ("needs attention", "nvidia-imex.service is inactive"),
    ]
    assert node.calls("systemctl") == [
        "show --property=Id,LoadState,ActiveState,UnitFileState -- "
        "nvidia-persistenced.service nvidia-fabricmanager.service nvidia-imex.service"
    ]
    node.units(
        {
            "nvidia-persistenced.service": ("loaded", "active", "enabled"),
            "nvidia-fabricmanager.service": ("loaded", "active", "enabled"),
            "nvidia-imex.service": ("loaded", "inactive", "disabled"),
        }
    )  # IMEX not configured here
    assert run(node, capsys)[0] == 0


def test_a_node_without_the_driver_loaded_and_without_nvidia_smi(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    (node.root / "bin" / "nvidia-smi").unlink()
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (2, ["nvidia-smi is not installed: ECC, retired pages, row remaps not read"])
    assert report["status"] == "unknown"
    node.loaded(None)
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (1, ["the nvidia module is not loaded: 2 GPU(s) on the PCI bus unused"])
    assert [gpu["seen_by_driver"] for gpu in report["gpus"]] == [False, False]


def test_a_node_without_a_gpu_is_healthy_and_reads_nothing_else(tmp_path, capsys):
    node = stand_in_node(tmp_path, topology="pcie-only")
    for device in (node.root / "sys" / "bus" / "pci" / "devices").iterdir():
        (device / "vendor").write_text("0x8086\n")
    assert run(node, capsys, "--npd")[:2] == (0, ["healthy: no NVIDIA GPU on the PCI bus"])
    assert node.calls("journalctl") == [] and node.calls("nvidia-smi") == []


def test_one_journal_line_per_change_of_state_and_none_from_npd_runs(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    assert run(node, capsys)[1] == [f"gpu-node health: healthy: healthy: 2 GPU(s) ({node.report_path})"]
    assert run(node, capsys)[1] == []
    node.log_kernel(xid_message(PCIE[0], 48, "DBE"))
    assert run(node, capsys, "--npd")[1] == ["Xid 48 on 0000:17:00.0: uncorrectable (double-bit) ECC error"]
    assert run(node, capsys)[1] == [
        f"gpu-node health: unhealthy: Xid 48 on 0000:17:00.0: uncorrectable (double-bit) ECC error ({node.report_path})"
    ]
    node.log_kernel(xid_message(PCIE[0], 48, "DBE"))  # the same Xid again: no new state
    assert run(node, capsys)[1] == []


# --- what the node gives is untrusted: bounded, checked, escaped ------------------------------------

ESCAPES = "\x1b[2K\r\x1b]0;owned\x07\x9b"


def test_hostile_kernel_lines_and_tool_output_are_bounded_and_escaped_never_a_traceback(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    entries = [
        "not json",
        "[1, 2]",
        json.dumps({"MESSAGE": {"a": 1}}),
        "[" * 100_000,
        json.dumps(
            {
                "MESSAGE": list(b"NVRM: Xid (PCI:0000:17:00): 79, \xff\x1b[2K"),
                "_BOOT_ID": "3f0c6a3e2b1d4c5e8f7a9b0c1d2e3f40",
                "__CURSOR": "c" * 10_000,
            }
        ),
        json.dumps(
            {
                "MESSAGE": f"NVRM: Xid (PCI:0000:ca:00): 13, {ESCAPES}",
                "_BOOT_ID": "3f0c6a3e2b1d4c5e8f7a9b0c1d2e3f40",
                "__CURSOR": "s=ok",
            }
        ),
        json.dumps({"MESSAGE": "NVRM: Xid (PCI:0000:ca:00): 79, an earlier boot's", "_BOOT_ID": "0" * 32}),
    ]
    node.write_journal("\n".join(entries) + "\n")
    node.smi(gpus=[StandInGpu(PCIE[0], name=f"H100{ESCAPES}"), StandInGpu(PCIE[1], ecc_uncorrected="9" * 40)])
    (node.root / "proc" / "driver" / "nvidia" / "version").write_text("garbage\x00" * 1000)
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (1, ["Xid 79 on 0000:17:00.0: GPU fallen off the bus"])
    assert [problem["line"] for problem in report["problems"]] == [
        "Xid 79 on 0000:17:00.0: GPU fallen off the bus",
        "Xid 13 on 0000:ca:00.0: graphics engine exception (usually the application's)",
    ]
    assert report["gpus"][0]["name"] == printable(f"H100{ESCAPES}") and "\x1b" not in report["gpus"][0]["name"]
    assert report["gpus"][1]["ecc_uncorrected"] is None  # no number nvidia-smi gives
    state = json.loads(Path(node.settings.state_path).read_text())
    assert state["cursor"] == "s=ok"  # the oversized cursor not kept


def test_digits_other_than_ascii_are_no_number_not_a_failed_check(tmp_path, capsys):
    """str.isdigit holds for "²", which int() refuses: a number the node gives is ASCII digits, else
    no reading (one GPU's ECC count, one entry's time), never the whole check unknown."""
    node = stand_in_node(tmp_path)
    node.log_kernel(xid_message(PCIE[1], 13, "exception"))
    node.entries[0]["__MONOTONIC_TIMESTAMP"] = "\u00b2"
    node.write_journal()
    node.smi(gpus=[StandInGpu(PCIE[0], ecc_uncorrected="\u00b2", retired_single="\u0663"), StandInGpu(PCIE[1])])
    code, printed, report = run(node, capsys, "--npd")
    assert (code, printed) == (0, ["healthy: 2 GPU(s)"])
    assert (report["gpus"][0]["ecc_uncorrected"], report["gpus"][0]["retired_pages"]) == (None, None)
    assert lines(report) == [
        ("informational", "Xid 13 on 0000:ca:00.0: graphics engine exception (usually the application's)")
    ]


def test_a_version_or_xid_number_in_digits_other_than_ascii_is_none(tmp_path, capsys):
    """Python's \\d matches every script's digits: "٧٩" is no Xid 79, "٥٣٥.٢٦١.٠٣" (sysfs's) no driver version."""
    node = stand_in_node(tmp_path)
    node.log_kernel("NVRM: Xid (PCI:0000:17:00): \u0667\u0669, pid=1234, GPU has fallen off the bus.")
    (node.root / "sys" / "module" / "nvidia" / "version").write_text("\u0665\u0663\u0665.\u0662\u0666\u0661\n")
    assert run(node, capsys, "--npd")[:2] == (0, ["healthy: 2 GPU(s)"])


def test_more_kernel_lines_than_a_run_reads_are_read_on_by_the_next(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(journal, "MAX_ENTRIES", 3)
    node = stand_in_node(tmp_path)
    node.log_kernel(*[f"line {index}" for index in range(5)], xid_message(PCIE[0], 79, FALLEN))
    code, _, report = run(node, capsys)
    assert code == 0 and lines(report) == [
        ("informational", "more kernel lines since the last check than one run reads: the next run reads on")
    ]
    code, _, report = run(node, capsys)
    assert code == 1 and node.calls("journalctl")[-1].endswith("--after-cursor=s=stand-in;i=3 _TRANSPORT=kernel")


def test_a_cursor_the_journal_no_longer_holds_reads_this_boot_from_its_start(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    node.log_kernel(xid_message(PCIE[0], 79, FALLEN))
    run(node, capsys)
    node.entries[0]["__CURSOR"] = "s=rotated;i=1"  # journald rotated the file the cursor was in
    node.write_journal()
    code, _, report = run(node, capsys)
    assert node.calls("journalctl")[-1].endswith("--boot=0 _TRANSPORT=kernel")
    assert code == 1 and lines(report) == [("fatal", "Xid 79 on 0000:17:00.0: GPU fallen off the bus")]  # not twice


@pytest.mark.parametrize(
    "state", ["{not json", '{"version": 1, "xids": "all"}', "[]", '{"version": 1, "xids": [{"gpu": 1}]}', "[" * 100_000]
)
def test_a_state_file_that_is_not_what_a_run_writes_starts_over_from_this_boots_start(tmp_path, capsys, state):
    node = stand_in_node(tmp_path)
    node.log_kernel(xid_message(PCIE[0], 79, FALLEN))
    Path(node.settings.state_path).write_text(state)
    code, _, report = run(node, capsys)
    assert code == 1 and lines(report) == [("fatal", "Xid 79 on 0000:17:00.0: GPU fallen off the bus")]


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda path: path.chmod(0o666), "health.state is writable by its group or others (mode 0666)"),
        (lambda path: path.parent.chmod(0o777), "is writable by its group or others (mode 0777)"),
        (lambda path: (path.rename(path.with_name("elsewhere")), path.symlink_to("elsewhere")), "a symbolic link"),
        (lambda path: (path.unlink(), os.mkfifo(path)), "health.state is not a regular file"),
    ],
    ids=["file-0666", "folder-0777", "symlink", "fifo"],
)
def test_a_state_file_another_user_may_write_is_refused_in_one_line_with_exit_2(tmp_path, capsys, make, says):
    """Its Xids would make the node unhealthy (and its text reach the report unchecked); a FIFO
    there would hang every run: read only as the settings are (deploy/node/root_files.py)."""
    node = stand_in_node(tmp_path)
    state = Path(node.settings.state_path)
    state.write_text(
        json.dumps(
            {
                "version": 1,
                "boot_id": "3f0c6a3e2b1d4c5e8f7a9b0c1d2e3f40",
                "xids": [{"gpu": ESCAPES[:16], "xid": 79, "severity": "fatal", "meaning": "planted", "count": 1}],
            }
        )
    )
    make(state)
    config = node.root / "etc" / "health-check.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"report_path": node.settings.report_path, "state_path": node.settings.state_path}))
    assert check.main(["--config", str(config)], host=node.host, top=str(node.root)) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("gpu-node health: unknown: state: ") and says in line
    assert check.main(["--npd", "--config", str(config)], host=node.host, top=str(node.root)) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("state: ") and len(line) <= 80
    assert not node.report_path.exists()


def test_settings_another_user_may_write_are_refused_in_one_line_with_exit_2(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    config = node.root / "etc" / "health-check.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("{}")
    config.chmod(0o666)
    assert check.main(["--npd", "--config", str(config)], host=node.host, top=str(node.root)) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line == "settings: health-check.json is writable by its group or others (mode 0666)"
    config.chmod(0o644)
    config.write_text('{"report_path": "relative.json"}')
    assert check.main(["--config", str(config)], host=node.host, top=str(node.root)) == 2
    assert "report_path is not an absolute path" in capsys.readouterr().out
    assert not node.report_path.exists()


def test_the_control_character_escape_is_node_texts():
    """deploy/health/node.py's printable is node_text's, written again for the standard library alone."""
    for text in (ESCAPES, "\udc80\x7f\x00tab\there", "plain", "\u2028 line separator is printable"):
        assert printable(text) == node_text.printable(text)


def test_the_nvml_library_folders_are_the_installed_kernels_facts():
    from deploy.driver.next_boot import NVML_LIBRARY_FOLDERS

    script = (REPO / "deploy" / "shell" / "installed_kernels.sh").read_text()
    listed = re.search(r"for lib in (.*?); do", script, re.S)[1].replace("\\\n", " ").split()
    assert tuple(listed) == NVML_LIBRARY_FOLDERS


def test_the_health_settings_are_the_settings_of_their_names_and_the_stage_writes_them():
    """HealthSettings (standard library only, on the node) has each setting's type and default, and
    what deploy/tasks/health.py writes reads back as the settings given (red with a field changed)."""
    from dataclasses import fields

    from deploy.settings import DEFAULTS, SETTING_FIELDS, parse_settings
    from deploy.settings.fields import unwrap
    from deploy.tasks import health as health_task

    named = {each.name: each.metadata.get("setting", each.name) for each in fields(HealthSettings)}
    assert (named.pop("report_path"), named.pop("state_path")) == (None, None)
    for name, setting in named.items():
        annotation = unwrap(SETTING_FIELDS[setting].annotation)[0]
        field_of = HealthSettings.__dataclass_fields__[name]
        assert (field_of.type, field_of.default) == ((bool if annotation is bool else str).__name__, DEFAULTS[setting])
    changed = parse_settings(
        {"nvidia_persistenced": False, "fabric_manager_install": False, "nvidia_driver_root": "/run/nvidia/driver"}
    )
    written = HealthSettings.from_text(health_task.health_config(changed), "health-check.json")
    assert {name: getattr(written, name) for name in named} == {
        name: getattr(changed, setting) for name, setting in named.items()
    }
    assert (written.report_path, written.state_path) == ("/var/lib/gpu-node/health.json", STATE_PATH)


def test_the_check_never_writes_anything_but_its_report_and_state(tmp_path, capsys):
    node = stand_in_node(tmp_path)
    run(node, capsys, "--npd")
    before = {path for path in tmp_path.rglob("*") if "state" not in path.parts}
    run(node, capsys, "--npd")
    after = {path for path in tmp_path.rglob("*") if "state" not in path.parts}
    assert sorted(path.name for path in (tmp_path / "state").iterdir()) == ["health.json", "health.state"]
    assert after - before == set(node.root.glob("bin/*.log")) - before
    assert os.stat(node.report_path).st_mode & 0o777 == 0o600


def test_the_report_and_the_state_are_flushed_to_disk_before_their_rename_and_their_folder_after(
    tmp_path, capsys, monkeypatch
):
    """A power loss after the rename leaves the whole file: health.json (what the fleet view reads)
    and the state (a refused one starts afresh, its Xids forgotten) are each flushed before the
    rename, and the rename itself by the folder's flush after it."""
    node = stand_in_node(tmp_path)
    calls = record_flushes(monkeypatch)
    run(node, capsys, "--npd")
    for path in (node.settings.report_path, node.settings.state_path):
        assert flushes_around_its_rename(calls, path) == ["file flushed", "renamed", "folder flushed"], path


def test_the_docs_xid_table_is_the_checks():
    from deploy.health.xids import XIDS

    page = (REPO / "docs" / "health.md").read_text()
    table = page[page.index("| Xid | severity | meaning |") :].split("\n\n")[0].splitlines()[2:]
    rows = {
        int(cells[0]): (cells[1], cells[2])
        for cells in ([cell.strip() for cell in line.strip("|").split("|")] for line in table)
    }
    assert rows == {xid: (found.severity, found.meaning) for xid, found in XIDS.items()}


def test_two_runs_never_at_once_the_second_waits_for_the_lock_then_says_unknown(tmp_path, capsys, monkeypatch):
    import fcntl

    monkeypatch.setattr(check, "LOCK_SECONDS", 0.3)
    node = stand_in_node(tmp_path)
    config = node.root / "etc" / "health-check.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"report_path": node.settings.report_path, "state_path": node.settings.state_path}))
    held = os.open(Path(node.settings.state_path).parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert check.main(["--npd", "--config", str(config)], host=node.host, top=str(node.root)) == 2
    finally:
        os.close(held)
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("another health check has held ") and not node.report_path.exists()
    assert check.main(["--npd", "--config", str(config)], host=node.host, top=str(node.root)) == 0


def test_a_failure_no_reading_foresaw_is_unknown_in_one_line_never_a_traceback(tmp_path, capsys, monkeypatch):
    from deploy.health import readings

    def broken(*args, **kwargs):
        raise RuntimeError("a reading no test foresaw")

    monkeypatch.setattr(readings, "units", broken)
    node = stand_in_node(tmp_path)
    config = node.root / "etc" / "health-check.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"report_path": node.settings.report_path, "state_path": node.settings.state_path}))
    assert check.main(["--npd", "--config", str(config)], host=node.host, top=str(node.root)) == 2
    assert capsys.readouterr().out.splitlines() == ["the check failed: RuntimeError: a reading no test foresaw"]
