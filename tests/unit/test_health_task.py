"""The health check's stage (deploy/tasks/health.py) planned on a @fake node, its archive run by an
isolated python3 as its unit runs it, and the first-boot unit running the check once at boot."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from plan import run_plan, settings_for

from deploy.health.xids import xid_event
from deploy.node.first_boot import pci_devices
from deploy.operations.files import digest_read
from deploy.tasks import archives, boot, health

TIMER_FILE = f"{health.UNIT_DIR}/{health.TIMER}"


def in_place(settings=None, enabled: bool = True, **overrides) -> list:
    """The facts of a node where the check is installed as ``settings`` want it (``overrides``: path -> lines)."""
    facts = []
    for path, (content, mode) in health.wanted_files(settings or settings_for()).items():
        data = content.encode() if isinstance(content, str) else content
        facts.append(
            (digest_read(path), overrides.get(path, [f"{mode} root:root", f"{hashlib.sha256(data).hexdigest()}  file"]))
        )
    facts.append((health.units_read(), [f"{health.TIMER} enabled"] if enabled else []))
    return facts


HEALTH_CHECK_IN_PLACE = in_place()


def test_a_node_without_the_check_gets_its_files_a_reload_and_the_timer_enabled_and_started():
    plan = run_plan(health.health_check_units, settings_for(), facts=[(health.units_read(), [])], unstated="default")
    names = [name.removeprefix("Health check | ") for name in plan.op_names()]
    assert names == [
        *(f"Put {path} (the health check)" for path in health.wanted_files(settings_for())),
        "Reload systemd's units (the health check's units changed)",
        f"Enable {health.TIMER} (the health check every 1min; started now)",
    ]
    assert plan.ran("systemctl daemon-reload")
    assert plan.ran(f"systemctl start {health.TIMER}") and plan.ran(f"systemctl enable {health.TIMER}")


def test_a_node_with_the_check_in_place_gets_no_operation_and_no_command():
    plan = run_plan(health.health_check_units, settings_for(), facts=HEALTH_CHECK_IN_PLACE)
    assert plan.op_names() == []
    assert all("sha256sum" in command or "is-enabled" in command for command in plan.commands), plan.commands


def test_a_changed_interval_rewrites_the_timer_alone_and_reloads():
    settings = settings_for(health_check_interval="5min", health_silent_after="30min")
    plan = run_plan(health.health_check_units, settings, facts=in_place())
    assert plan.op_names() == [
        f"Health check | Put {TIMER_FILE} (the health check)",
        "Health check | Reload systemd's units (the health check's units changed)",
    ]
    timer = health.wanted_files(settings)[TIMER_FILE][0]
    assert "OnBootSec=5min\nOnUnitActiveSec=5min\n" in timer


def test_the_first_boot_unit_runs_the_check_once_unless_health_check_is_off():
    def unit(**settings) -> str:
        return boot.wanted_files(settings_for(**settings))[f"{boot.UNIT_DIR}/{boot.SERVICE}"][0]

    run = f"ExecStartPost=-/usr/bin/python3 -I {archives.HEALTH.path} --config /etc/gpu-node/health-check.json\n"
    assert run in unit()
    assert "ExecStartPost" not in unit(health_check=False) and "health check" not in unit(health_check=False)


def test_the_archive_is_the_same_bytes_each_time_and_runs_under_python3_isolated(tmp_path):
    archive = archives.HEALTH.content()
    assert archive == archives.HEALTH.content()
    path = tmp_path / "health.pyz"
    path.write_bytes(archive)
    helped = subprocess.run([sys.executable, "-I", str(path), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert helped.returncode == 0 and "--npd" in helped.stdout and sorted(tmp_path.iterdir()) == [path]
    report, state = tmp_path / "state" / "health.json", tmp_path / "state" / "health.state"
    config = tmp_path / "health-check.json"
    config.write_text(json.dumps({"report_path": str(report), "state_path": str(state)}))
    # as the unit runs it, but with the settings' owner check starting at the test's folder (this
    # machine's /tmp, 1777, fails it)
    run = (
        f"import sys; sys.path.insert(0, {str(path)!r}); from gpu_node_health.health.check import main; "
        f"sys.exit(main(['--npd', '--config', {str(config)!r}], top={str(tmp_path)!r}))"
    )
    result = subprocess.run([sys.executable, "-I", "-c", run], capture_output=True, text=True)
    written = json.loads(report.read_text())
    assert written["version"] == 1 and len(result.stdout.splitlines()) == 1, result.stdout + result.stderr
    # this machine's own PCI bus: every test machine has no NVIDIA GPU, so it is healthy with none
    assert [gpu["pci"] for gpu in written["gpus"]] == [gpu["slot"] for gpu in pci_devices("/sys")["gpus"]]
    if not written["gpus"]:
        assert (result.returncode, result.stdout) == (0, "healthy: no NVIDIA GPU on the PCI bus\n")


@pytest.mark.parametrize("archive", [archives.BOOT, archives.HEALTH], ids=lambda archive: archive.package)
def test_every_module_of_each_archive_imports_from_it_with_the_standard_library_alone(archive, tmp_path):
    """A node's python3 has the standard library and whatever its distribution installed: each module
    an archive carries imports from the archive alone, under ``-S`` too (no site-packages: this
    venv's pydantic or yaml would hide an import the node lacks, which ``-I`` alone keeps)."""
    path = tmp_path / "program.pyz"
    path.write_bytes(archive.content())
    modules = [f"{archive.package}.{name.removesuffix('.py').replace('/', '.')}" for name in archive.modules]
    run = (
        f"import importlib, sys; sys.path.insert(0, {str(path)!r})\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} - set(sys.stdlib_module_names)))"
    )
    result = subprocess.run([sys.executable, "-I", "-S", "-c", run], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout == f"{['__main__', archive.package]}\n"


def test_xid_lines_of_each_layout_the_driver_writes():
    assert xid_event("NVRM: Xid (PCI:0000:3b:00): 79, pid=2177, name=python3, GPU has fallen off the bus.").line == (
        "Xid 79 on 0000:3b:00.0: GPU fallen off the bus"
    )
    assert xid_event("NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007").gpu == "0000:01:00.0"  # older drivers
    assert xid_event("NVRM: Xid (PCI:00000000:3B:00.1): 48, pid='<unknown>'").gpu == "0000:3b:00.1"
    assert (
        xid_event(
            "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain P2P)"
        ).severity
        == "needs attention"
    )
    for other in ("NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014", "NVRM: Xid (PCI:zz:3b:00): 79", "Xid 79", ""):
        assert xid_event(other) is None
