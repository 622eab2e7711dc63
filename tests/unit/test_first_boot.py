"""
The first-boot program (deploy/node/first_boot.py) over a sysfs PCI tree of a real topology
(tests/pci_tree.py), a module tree with modules.dep, unit folders, and a command runner that
answers modinfo, modprobe, systemctl and nvidia-smi as they answer on a node; and the zip
application the stage installs (deploy/tasks/boot.py), run by this machine's python3.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pci_tree
import pytest
from disk_flushes import flushes_around_its_rename, record_flushes

from deploy.node import first_boot, root_files
from deploy.node.boot_settings import REPORT_PATH, BootSettings
from deploy.node.first_boot import Boot, Host
from deploy.reports.node_report import NodeRecord, Step, report_json
from deploy.tasks import boot as boot_task

KERNEL = "6.1.0-28-amd64"
LICENSES = {"open": "Dual MIT/GPL", "proprietary": "NVIDIA"}


class NodeCommands:
    """What the node's commands answer; ``calls`` keeps each command run."""

    def __init__(self, module_type="proprietary", version="535.261.03", smi_gpus=2, started_ok=True):
        self.module_type, self.version, self.smi_gpus, self.started_ok = module_type, version, smi_gpus, started_ok
        self.calls: list[list[str]] = []

    def __call__(self, args):
        self.calls.append(list(args))
        out, code = "", 0
        if args[0] == "modinfo":
            out = {"version": self.version, "license": LICENSES.get(self.module_type, self.module_type)}[args[2]] + "\n"
        elif args[0] == "nvidia-smi":
            out = "".join(f"GPU {index}: NVIDIA H100 PCIe (UUID: GPU-{index})\n" for index in range(self.smi_gpus))
        elif args[0] == "systemctl" and not self.started_ok:
            code = 1
        return subprocess.CompletedProcess(args, code, out, "failed" if code else "")


def node(
    tmp_path: Path, topology: str | None, module: bool = True, units: tuple[str, ...] = (), **answers
) -> tuple[Host, NodeCommands]:
    sys_root = tmp_path / "sys"
    folder = sys_root / "bus" / "pci" / "devices"
    if topology:
        pci_tree.write(pci_tree.load(topology), folder)
    else:
        folder.mkdir(parents=True)
    modules = tmp_path / "lib-modules" / KERNEL
    modules.mkdir(parents=True)
    dep = "kernel/fs/overlayfs/overlay.ko:\n" + ("updates/dkms/nvidia.ko.xz:\n" if module else "")
    (modules / "modules.dep").write_text(dep)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    for unit in units:
        (unit_dir / unit).write_text("[Unit]\n")
    commands = NodeCommands(**answers)
    return Host(
        sys_root=str(sys_root),
        modules_root=str(tmp_path / "lib-modules"),
        kernel=KERNEL,
        unit_dirs=(str(unit_dir),),
        run=commands,
    ), commands


def boot(host: Host, **settings) -> tuple[bool, Boot]:
    run = Boot(BootSettings(**{"kernel_modules_load": False, **settings}), host)
    return run.run(), run


def statuses(run: Boot) -> dict[str, str]:
    return {step["name"]: step["status"] for step in run.steps}


def test_a_pcie_node_with_the_module_its_gpus_need_passes_and_says_the_load_was_skipped(tmp_path):
    host, commands = node(tmp_path, "pcie-only")
    ok, run = boot(host)
    assert ok, run.steps
    assert statuses(run) == {
        "gpus": "pass",
        "kernel module": "pass",
        "module load": "skip",
        "cdi spec": "skip",
        "persistenced": "skip",
        "fabric manager": "skip",
        "verify": "skip",
    }
    load = next(step for step in run.steps if step["name"] == "module load")
    assert "kernel_modules_load=false" in load["reason"]
    assert not any(call[0] == "modprobe" for call in commands.calls)
    assert run.record["kernel_module_type"] == "proprietary" and run.record["driver"] == "535.261.03"


def test_the_report_is_the_projects_node_report_format(tmp_path):
    host, _ = node(tmp_path, "pcie-only")
    _, run = boot(host)
    report = run.report()
    (node_json,) = report["nodes"]
    fields = {key: value for key, value in node_json.items() if key not in ("ok", "steps")}
    record = NodeRecord(**fields, steps=[Step(**step) for step in node_json["steps"]])
    # deploy/reports/node_report.py, the controller's report, makes the same JSON of the same record
    assert report_json([record]) == report


def test_no_module_for_the_running_kernel_fails_that_step_and_stops_the_boot(tmp_path):
    host, _ = node(tmp_path, "pcie-only", module=False)
    ok, run = boot(host)
    assert not ok
    assert run.steps[-1]["name"] == "kernel module" and run.steps[-1]["status"] == "fail"
    assert f"no nvidia module for the running kernel {KERNEL}" in run.steps[-1]["reason"]
    assert run.report()["ok"] is False


def test_blackwell_gpus_with_the_proprietary_module_fail_naming_the_module_type_they_need(tmp_path):
    host, _ = node(tmp_path, "hgx-b200", module_type="proprietary", version="570.86.10")
    ok, run = boot(host)
    assert not ok
    assert run.steps[-1]["name"] == "kernel module"
    assert "the GPUs need the open kernel modules" in run.steps[-1]["reason"]
    assert "is proprietary" in run.steps[-1]["reason"]


def test_an_nvswitch_node_without_fabric_manager_installed_fails_at_fabric_manager(tmp_path):
    host, _ = node(tmp_path, "hgx-h100")
    ok, run = boot(host)
    assert not ok
    assert run.steps[-1]["name"] == "fabric manager"
    assert (
        "NVSwitch" in run.steps[-1]["reason"]
        and "nvidia-fabricmanager.service is not installed" in run.steps[-1]["reason"]
    )


def test_with_modules_loaded_it_loads_starts_the_services_and_verifies_the_gpu_count(tmp_path):
    units = (first_boot.PERSISTENCED, first_boot.FABRIC_MANAGER)
    host, commands = node(tmp_path, "hgx-h100", units=units, smi_gpus=8)
    ok, run = boot(host, kernel_modules_load=True, cdi="false")
    assert ok, run.steps
    assert ["modprobe", "nvidia"] in commands.calls and ["modprobe", "nvidia_uvm"] in commands.calls
    assert ["systemctl", "start", first_boot.PERSISTENCED] in commands.calls
    assert ["systemctl", "start", first_boot.FABRIC_MANAGER] in commands.calls
    assert statuses(run)["verify"] == "pass"


def test_fewer_gpus_answering_than_the_pci_bus_shows_fails_verify(tmp_path):
    host, _ = node(tmp_path, "pcie-only", units=(first_boot.PERSISTENCED,), smi_gpus=1)
    ok, run = boot(host, kernel_modules_load=True, cdi="false")
    assert not ok
    assert run.steps[-1]["name"] == "verify" and "answered 1 GPU(s) of the 2" in run.steps[-1]["reason"]


def test_a_node_without_gpus_passes_unless_require_gpu(tmp_path):
    host, _ = node(tmp_path, None)
    assert boot(host)[0]
    ok, run = boot(host, require_gpu=True)
    assert not ok and run.steps[-1]["name"] == "gpus"


def test_the_archive_is_the_same_bytes_each_time_and_runs_under_python3_isolated(tmp_path):
    archive = boot_task.boot_archive()
    assert archive == boot_task.boot_archive()
    path = tmp_path / "boot.pyz"
    path.write_bytes(archive)
    report = tmp_path / "state" / "report.json"
    config = tmp_path / "boot.json"
    config.write_text(json.dumps({"kernel_modules_load": False, "report_path": str(report)}))
    # as the unit runs it, but with the settings' owner check starting at the test's folder (this
    # machine's /tmp, 1777, fails it: test_settings_root_alone_may_write_are_refused_in_one_line...)
    run = (
        f"import sys; sys.path.insert(0, {str(path)!r}); from gpu_node_boot.node.first_boot import main; "
        f"sys.exit(main([{str(config)!r}], top={str(tmp_path)!r}))"
    )
    result = subprocess.run([sys.executable, "-I", "-c", run], capture_output=True, text=True)
    # this machine's PCI bus has no NVIDIA GPU: the boot passes, saying so, and writes its report
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu-node boot: gpus: skip: no NVIDIA GPU on the PCI bus" in result.stdout
    written = json.loads(report.read_text())
    assert written["ok"] is True and written["version"] == 1
    assert oct(report.stat().st_mode & 0o777) == "0o600"


def test_the_report_is_flushed_to_disk_before_its_rename_and_its_folder_after(tmp_path, monkeypatch):
    """A power loss after the boot leaves its whole report, the last one or this one: the report is
    flushed before the rename, and the rename itself by the folder's flush after it."""
    host, _ = node(tmp_path, "pcie-only")
    report = tmp_path / "state" / "boot-report.json"
    config = tmp_path / "boot.json"
    config.write_text(json.dumps({"kernel_modules_load": False, "report_path": str(report)}))
    calls = record_flushes(monkeypatch)
    assert first_boot.main([str(config)], host=host, top=str(tmp_path)) == 0
    assert flushes_around_its_rename(calls, str(report)) == ["file flushed", "renamed", "folder flushed"]


def test_a_report_that_cannot_be_written_fails_the_boot_in_one_line(tmp_path, capsys):
    """A report the disk will not take (here its folder is a file) is one line naming it after the
    steps' lines, exit 1, never a traceback: the unit's journal is where the site reads why."""
    host, _ = node(tmp_path, "pcie-only")
    (tmp_path / "state").write_text("a file where the report's folder goes\n")
    report = tmp_path / "state" / "boot-report.json"
    config = tmp_path / "boot.json"
    config.write_text(json.dumps({"kernel_modules_load": False, "report_path": str(report)}))
    assert first_boot.main([str(config)], host=host, top=str(tmp_path)) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[-1].startswith(f"gpu-node boot: report: fail: cannot write {report}: "), said


def test_an_unreadable_settings_file_fails_in_one_line(tmp_path, capsys):
    config = tmp_path / "boot.json"
    config.write_text("{not json")
    assert first_boot.main([str(config)], top=str(tmp_path)) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"gpu-node boot: settings: fail: cannot read {config}")


def test_a_missing_settings_file_is_one_line_and_exit_2_writing_no_report(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        first_boot.main([str(tmp_path / "absent.json")])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"{Path(sys.argv[0]).name}: {tmp_path / 'absent.json'}: no such file (see --help)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("setting", ["auto", "open"])
def test_the_config_the_stage_writes_is_read_back_by_the_boot(setting, tmp_path):
    from plan import settings_for

    config = tmp_path / "boot.json"
    config.write_text(boot_task.boot_config(settings_for(nvidia_kernel_modules=setting, kernel_modules_load=False)))
    read = BootSettings.from_file(str(config), top=str(tmp_path))
    assert read.nvidia_kernel_modules == setting and read.kernel_modules_load is False
    assert read.report_path == REPORT_PATH


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"kernel_modules_load": "false"}', "kernel_modules_load is str, not bool"),
        ('{"require_gpu": 1}', "require_gpu is int, not bool"),
        ('{"report_path": ["/etc/cron.d/x"]}', "report_path is list, not str"),
        ('{"report_path": "var/lib/report.json"}', "report_path is not an absolute path"),
        ('{"no_such_setting": true}', "unknown setting 'no_such_setting'"),
        ("[]", "holds list, not the boot settings"),
        ("[" * 50_000, "nests values deeper than JSON settings do"),
    ],
)
def test_boot_settings_of_the_wrong_shape_are_one_line_naming_the_setting(tmp_path, capsys, text, problem):
    """Each setting of its type, nothing unknown, nesting bounded: the boot unit reads this file as root."""
    config = tmp_path / "boot.json"
    config.write_text(text)
    with pytest.raises(ValueError, match=re.escape(problem)):
        BootSettings.from_text(text, str(config))
    assert first_boot.main([str(config)], top=str(tmp_path)) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and problem in out[0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["boot.json"]  # no report


def test_boot_settings_larger_than_the_bound_or_not_utf8_are_one_line(tmp_path, capsys):
    config = tmp_path / "boot.json"
    config.write_bytes(b'{"cdi": "' + b"a" * root_files.MAX_SETTINGS_BYTES + b'"}')
    assert first_boot.main([str(config)], top=str(tmp_path)) == 1
    assert "is larger than the boot settings are (64 KiB)" in capsys.readouterr().out
    config.write_bytes(b'{"cdi": "\xff"}')
    assert first_boot.main([str(config)], top=str(tmp_path)) == 1
    assert "is not UTF-8 text" in capsys.readouterr().out


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


@needs_root
@pytest.mark.parametrize(
    "layout",
    [
        "file of another user",
        "file group-writable",
        "folder others may write",
        "file a symbolic link",
        "folder a symbolic link",
        "machine's /tmp",
    ],
)
def test_boot_settings_root_alone_may_not_write_are_refused_in_one_line_writing_no_report(tmp_path, capsys, layout):
    """The boot unit runs as root at every boot: a settings file another user can write (or a link to
    one) would choose its report_path and what the boot does; refused, naming it, nothing written."""
    top = tmp_path / "root"
    folder = top / "etc" / "gpu-node"
    folder.mkdir(parents=True)
    for each in (top, top / "etc", folder):
        each.chmod(0o755)
    report = top / "report.json"
    config = folder / "boot.json"
    config.write_text(json.dumps({"kernel_modules_load": False, "report_path": str(report)}))
    config.chmod(0o644)
    named = str(config)
    if layout == "file of another user":
        os.chown(config, 1000, 1000)
        problem = f"{config} is owned by uid 1000, not root"
    elif layout == "file group-writable":
        config.chmod(0o664)
        problem = f"{config} is writable by its group or others (mode 0664)"
    elif layout == "folder others may write":
        folder.chmod(0o777)
        problem = f"{folder} is writable by its group or others (mode 0777)"
    elif layout == "file a symbolic link":
        (folder / "real.json").write_text(config.read_text())
        config.unlink()
        config.symlink_to(folder / "real.json")
        problem = f"{config} is a symbolic link (not followed)"
    elif layout == "folder a symbolic link":
        (top / "elsewhere").mkdir(mode=0o755)
        (folder / "boot.json").rename(top / "elsewhere" / "boot.json")
        folder.rmdir()
        folder.symlink_to(top / "elsewhere")
        problem = f"{folder} is a symbolic link (not followed)"
    else:  # the walk from the machine's own / meets /tmp (1777) above the test's folder
        problem = "/tmp is writable by its group or others (mode 1777)"
    result = first_boot.main([named], top=str(top) if layout != "machine's /tmp" else "/")
    out = capsys.readouterr().out.splitlines()
    assert result == 1 and len(out) == 1, out
    assert problem in out[0] and "reads its settings only from a file root alone can change" in out[0]
    assert not report.exists()


def test_the_boot_settings_are_the_settings_they_name_with_their_types_and_defaults():
    """BootSettings is standard library only (the archive carries no settings model): each field is
    the setting it names, of its type (text for a choice or a path) and with its default, and the
    stage writes exactly those settings' values."""
    from dataclasses import fields

    from deploy.settings import DEFAULTS, SETTING_FIELDS, parse_settings
    from deploy.settings.fields import unwrap

    named = {each.name: each.metadata.get("setting", each.name) for each in fields(BootSettings)}
    assert named.pop("report_path") is None
    for name, setting in named.items():
        annotation = unwrap(SETTING_FIELDS[setting].annotation)[0]
        python_type = bool if annotation is bool else str
        field_of = BootSettings.__dataclass_fields__[name]
        assert (field_of.type, field_of.default) == (python_type.__name__, DEFAULTS[setting]), name
    changed = parse_settings(
        {
            "kernel_modules_load": False,
            "nvidia_kernel_modules": "open",
            "cdi": "false",
            "nvidia_driver_root": "/run/nvidia/driver",
            "require_gpu": True,
            "nvidia_persistenced": False,
            "fabric_manager_install": False,
        }
    )
    written = BootSettings.from_text(boot_task.boot_config(changed), "boot.json")
    assert {name: getattr(written, name) for name in named} == {
        name: getattr(changed, setting) for name, setting in named.items()
    }
    assert written.report_path == REPORT_PATH
