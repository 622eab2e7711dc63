"""The first-boot stage (deploy/tasks/boot.py) planned on a @fake node: what it puts and enables on a
node without it, and nothing (no operation, no command) on a node where it is in place."""

from __future__ import annotations

import hashlib

from plan import run_plan, settings_for

from deploy.operations.files import digest_read
from deploy.tasks import boot

SETTINGS = {"kernel_modules_load": False}


def in_place(settings=None, **overrides) -> list:
    """The facts of a node where the unit is installed as ``settings`` want it (``overrides``: path -> lines)."""
    facts = []
    for path, (content, mode) in boot.wanted_files(settings or settings_for(**SETTINGS)).items():
        data = content.encode() if isinstance(content, str) else content
        facts.append(
            (digest_read(path), overrides.get(path, [f"{mode} root:root", f"{hashlib.sha256(data).hexdigest()}  file"]))
        )
    facts.append((boot.units_read(), [f"{boot.SERVICE} enabled", f"{boot.TARGET} enabled"]))
    return facts


BOOT_UNIT_IN_PLACE = in_place()


def test_a_node_without_the_unit_gets_its_files_a_reload_and_both_units_enabled_not_started():
    plan = run_plan(boot.first_boot_unit, settings_for(**SETTINGS), facts=[(boot.units_read(), [])], unstated="default")
    names = [name.removeprefix("First-boot unit | ") for name in plan.op_names()]
    assert [name for name in names if name.startswith("Put ")] == [
        f"Put {path} (the first-boot unit)" for path in boot.wanted_files(settings_for(**SETTINGS))
    ]
    assert plan.ran("systemctl daemon-reload")  # where systemd runs
    assert plan.ran(f"systemctl --root=/ enable {boot.SERVICE} {boot.TARGET}")
    assert not plan.ran("systemctl start") and not plan.ran("enable --now")


def test_a_node_with_the_unit_in_place_gets_no_operation_and_no_command():
    plan = run_plan(boot.first_boot_unit, settings_for(**SETTINGS), facts=BOOT_UNIT_IN_PLACE)
    assert plan.op_names() == []
    # only the reads, which a run's preflight makes in its one combined command
    assert all("sha256sum" in command or "is-enabled" in command for command in plan.commands), plan.commands


def test_a_changed_setting_rewrites_only_the_boot_settings_without_a_reload():
    plan = run_plan(
        boot.first_boot_unit,
        settings_for(kernel_modules_load=False, nvidia_kernel_modules="open"),
        facts=BOOT_UNIT_IN_PLACE,
    )
    assert plan.op_names() == ["First-boot unit | Put /etc/gpu-node/boot.json (the first-boot unit)"]
    assert not plan.ran("daemon-reload")
