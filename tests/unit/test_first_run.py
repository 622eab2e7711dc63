"""
What docs/first-run.md says a first run changes on a live host, where no other test shows it: the
initramfs rebuilt once for the nouveau blacklist (and not again), and ``first_boot_unit=false``
leaving the first-boot unit out of the run. Plans on pyinfra's @fake connector.
"""

from __future__ import annotations

import hashlib

import pytest
from plan import run_plan, settings_for

from deploy.distros.families import detect_platform
from deploy.operations.files import digest_read
from deploy.stages import steps_for
from deploy.tasks.kernel import BLACKLIST_PATH, kernel_prerequisites, managed_files, read_files


def platform(distro_id: str):
    return detect_platform({"name": distro_id, "major": 9, "release_meta": {"ID": distro_id}}, "x86_64")


def kernel_files(blacklist_in_place: bool) -> list:
    """The kernel stage's files on the node: all in place but the blacklist, or that too."""
    facts = [(digest_read(path), "absent") for path in read_files()]
    for path, text in managed_files().items():
        if path != BLACKLIST_PATH or blacklist_in_place:
            facts.append((digest_read(path), ["644 root:root", f"{hashlib.sha256(text.encode()).hexdigest()}  file"]))
    return facts


# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
@pytest.mark.usefixtures("both_modes")
@pytest.mark.parametrize(
    "distro_id, tool", [("debian", "update-initramfs -u"), ("rocky", "dracut -f"), ("arch", "mkinitcpio -P")]
)
def test_the_initramfs_is_rebuilt_when_the_nouveau_blacklist_is_written_and_not_once_it_is_in_place(distro_id, tool):
    settings = settings_for(kernel_modules_load=False)
    first = run_plan(kernel_prerequisites, settings, platform(distro_id), facts=kernel_files(blacklist_in_place=False))
    assert first.op_names() == [
        "Kernel prerequisites | Blacklist nouveau and nova",
        "Kernel prerequisites | Rebuild the initramfs after blacklisting nouveau",
    ]
    assert len(first.ran(tool)) == 1, first.commands
    again = run_plan(kernel_prerequisites, settings, platform(distro_id), facts=kernel_files(blacklist_in_place=True))
    assert again.op_names() == [] and not again.ran(tool.split()[0])


def test_first_boot_unit_false_leaves_the_first_boot_unit_out_of_the_run():
    assert "first boot" in [step.name for step in steps_for(settings_for())]
    assert "first boot" not in [step.name for step in steps_for(settings_for(first_boot_unit=False))]
