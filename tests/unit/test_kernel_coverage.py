"""
Every installed kernel has an NVIDIA module of the driver's version, the next boot's above all:
the InstalledKernels fact over each family's layout (tests/fixtures/kernels/, stand-ins of the
layouts), the next boot as GRUB or grubby names it, verify's step, the reboot refusal, what the
driver stage builds, and its operations as plan tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan import DEFAULT, PCI_WITH_GPU, Output, carrying, every, node_lines, run_deploy, run_plan, settings_for
from pyinfra.api import deploy

from deploy.distros.families import DEBIAN_DRIVER, KERNEL_METAPACKAGE_HEADERS, detect_platform
from deploy.driver import kernel_coverage
from deploy.facts.installed_kernels import InstalledKernels
from deploy.facts.nvidia import PackagesAvailable
from deploy.reports.node_report import FAIL, PASS, SKIP
from deploy.tasks import kernel_modules as kernel_tasks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
DEBIAN = "debian-second-kernel-without-module.txt"
K1, K2 = "6.1.0-56-amd64", "6.1.0-56-cloud-amd64"


def fact(name: str, *more: str, drop: tuple[str, ...] = ()) -> dict:
    lines = [line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith(drop or "\0")]
    return InstalledKernels().process(lines + list(more))


def test_the_fact_reads_kernels_modules_library_boot_loader_and_held_packages():
    found = fact(DEBIAN)
    assert found["kernels"][K1] == {
        "image": True,
        "headers": True,
        "modules": [{"version": "535.261.03", "path": f"/lib/modules/{K1}/updates/dkms/nvidia-current.ko"}],
    }
    assert found["kernels"][K2] == {"image": True, "headers": False, "modules": []}
    assert found["dkms"] and found["grub_default"] == "0"
    assert kernel_coverage.library_version(found["library"]) == "535.261.03"
    assert found["packages"]["linux-image-amd64"] == {"held": True}
    assert found["packages"]["linux-image-cloud-amd64"] == {"held": False}


def test_a_module_modinfo_gave_no_version_is_kept_without_one():
    found = InstalledKernels().process(
        ["kernel 6.1.0-56-amd64 yes yes", "module 6.1.0-56-amd64  /lib/modules/6.1.0-56-amd64/updates/dkms/nvidia.ko"]
    )
    assert found["kernels"]["6.1.0-56-amd64"]["modules"] == [
        {"version": None, "path": "/lib/modules/6.1.0-56-amd64/updates/dkms/nvidia.ko"}
    ]


def test_debian_next_boot_is_the_newest_under_grub_default_0_and_verify_names_it_without_a_module():
    found = fact(DEBIAN)
    assert kernel_coverage.next_boot(found) == kernel_coverage.NextBoot(
        K2, "the newest installed kernel, GRUB's first entry"
    )
    step = kernel_coverage.boot_kernels_step(found)
    assert step.status == FAIL
    assert step.reason == (
        f"kernel {K2} has no nvidia module of driver 535.261.03 (boots next: the newest installed kernel, "
        f"GRUB's first entry): booted, the node has no GPU; run the driver stage, which builds it with DKMS "
        f"(dkms autoinstall -k {K2})"
    )
    assert kernel_coverage.reboot_refusal(found).startswith(
        f"reboot refused: the next boot starts kernel {K2} has no nvidia module of driver 535.261.03"
    )


def test_grub_saved_entry_names_the_next_boot_and_a_reboot_into_it_is_not_refused():
    found = fact(
        DEBIAN, f"grubenv saved_entry gnulinux-advanced-x>gnulinux-{K1}-advanced-x", drop=("grub_default",)
    ) | {"grub_default": "saved"}
    assert kernel_coverage.next_boot(found).release == K1
    assert kernel_coverage.reboot_refusal(found) is None
    step = kernel_coverage.boot_kernels_step(found)
    assert step.status == FAIL and step.reason.startswith(
        f"kernel {K2} has no nvidia module of driver 535.261.03 (installed; not the next boot's)"
    )
    # a one-time next_entry goes before the saved one
    found["grubenv"]["next_entry"] = f"Debian GNU/Linux, with Linux {K2}"
    assert kernel_coverage.next_boot(found).release == K2 and kernel_coverage.reboot_refusal(found)


def test_every_kernel_with_the_drivers_module_passes_and_names_where_each_came_from():
    found = fact(DEBIAN, f"module {K2} 535.261.03 /lib/modules/{K2}/updates/dkms/nvidia-current.ko")
    step = kernel_coverage.boot_kernels_step(found)
    assert step == kernel_coverage.Step(
        "boot_kernels",
        PASS,
        f"2 installed kernel(s) have the nvidia module 535.261.03: {K2} (DKMS), {K1} (DKMS); "
        f"next boot {K2} (the newest installed kernel, GRUB's first entry)",
    )
    assert kernel_coverage.build_plan(found, "linux-headers-{kernel}") == kernel_coverage.BuildPlan()


def test_a_module_of_another_driver_version_does_not_count():
    found = fact(DEBIAN, f"module {K2} 535.216.03 /lib/modules/{K2}/updates/dkms/nvidia-current.ko")
    step = kernel_coverage.boot_kernels_step(found)
    assert (
        step.status == FAIL
        and f"kernel {K2} has no nvidia module of driver 535.261.03 (it has 535.216.03)" in step.reason
    )


def test_the_driver_stage_builds_for_the_kernel_without_one_after_its_headers():
    plan = kernel_coverage.build_plan(fact(DEBIAN), "linux-headers-{kernel}")
    assert plan == kernel_coverage.BuildPlan(headers=(f"linux-headers-{K2}",), builds=(K2,))


def test_no_kernel_image_or_no_driver_skips():
    assert kernel_coverage.boot_kernels_step(InstalledKernels().process([])).status == SKIP
    bare = InstalledKernels().process([f"kernel {K1} yes no"])
    step = kernel_coverage.boot_kernels_step(bare)
    assert step.status == SKIP and step.reason.startswith("no NVIDIA driver installed")
    headers_only = InstalledKernels().process([f"kernel {K1} no yes", "library /usr/lib/libnvidia-ml.so.535.261.03"])
    assert kernel_coverage.boot_kernels_step(headers_only).status == SKIP  # no image: nothing boots it


def test_dnf_grubby_names_the_next_boot_and_without_dkms_the_kmod_package_is_the_fix():
    found = fact("rocky9-kmod-grubby.txt")
    new = "5.14.0-503.14.1.el9_5.x86_64"
    assert kernel_coverage.next_boot(found) == kernel_coverage.NextBoot(new, "grubby --default-kernel")
    step = kernel_coverage.boot_kernels_step(found)
    assert step.status == FAIL and step.reason.startswith(
        f"kernel {new} has no nvidia module of driver 550.54.15 (boots next: grubby --default-kernel)"
    )
    assert "install the driver's module package for that kernel, or remove the kernel" in step.reason
    assert kernel_coverage.build_plan(found, "kernel-devel-{kernel}") == kernel_coverage.BuildPlan(unbuildable=(new,))


def test_zypper_kmp_modules_in_updates_and_weak_updates_cover_both_kernels():
    step = kernel_coverage.boot_kernels_step(fact("leap15.6-kmp.txt"))
    assert step.status == PASS and "next boot 6.4.0-150600.23.30-default (GRUB's saved_entry" in step.reason
    assert "(a KMP)" in step.reason


def test_pacman_lts_kernel_with_a_module_of_another_version_fails_naming_it():
    found = fact("arch-linux-and-lts.txt")
    assert kernel_coverage.next_boot(found).release == "6.12.1-arch1-1"  # natural order: 12 > 6
    step = kernel_coverage.boot_kernels_step(found)
    assert step.status == FAIL
    assert step.reason.startswith(
        "kernel 6.6.63-1-lts has no nvidia module of driver 565.77 (it has 560.35.03) (installed; not the next boot's)"
    )


@pytest.mark.parametrize(
    "installed, wanted",
    [
        (
            {"linux-image-amd64": True, "linux-image-cloud-amd64": False},
            {"linux-headers-amd64": True, "linux-headers-cloud-amd64": False},
        ),
        ({"linux-image-generic-hwe-24.04": False}, {"linux-headers-generic-hwe-24.04": False}),
        # a release's own, a debug, an unsigned image follow nothing
        (
            {
                "linux-image-6.1.0-56-amd64": False,
                "linux-image-amd64-dbg": False,
                "linux-image-unsigned-6.8.0-31-generic": False,
                "linux-image-6.1.0-56-amd64-unsigned": False,
            },
            {},
        ),
        # in step already: installed, held with its held kernel metapackage
        ({"linux-image-amd64": True, "linux-headers-amd64": True}, {}),
    ],
)
def test_headers_metapackage_follows_the_kernel_metapackage_held_with_it(installed, wanted):
    packages = {name: {"held": held} for name, held in installed.items()}
    assert kernel_coverage.following_headers(packages, KERNEL_METAPACKAGE_HEADERS) == wanted
    assert DEBIAN_DRIVER.headers_following == KERNEL_METAPACKAGE_HEADERS


def debian():
    return detect_platform({"name": "debian", "release_meta": {"ID": "debian"}}, "x86_64")


@deploy("kernels")
def cover(settings, platform):
    kernel_tasks.cover_installed_kernels(settings, platform)


@deploy("reboot")
def refuse():
    kernel_tasks.refuse_reboot_without_module()


def test_the_operation_installs_following_headers_and_the_kernels_headers_then_builds_with_dkms():
    lines = (FIXTURES / DEBIAN).read_text().splitlines()
    plan = run_plan(
        cover,
        settings_for(),
        debian(),
        unstated=DEFAULT,
        facts=[
            (InstalledKernels, lines),
            (
                (
                    PackagesAvailable,
                    {
                        "check": debian().family.package_manager.available_check,
                        "packages": ["linux-headers-cloud-amd64"],
                    },
                ),
                ["yes linux-headers-cloud-amd64"],
            ),
        ],
    )
    installs = plan.matching("apt-get -y")
    assert any("linux-headers-cloud-amd64" in command for command in installs), installs
    assert any(f"linux-headers-{K2}" in command for command in installs), installs
    assert plan.matching(f"dkms autoinstall -k {K2}") and not plan.matching(f"dkms autoinstall -k {K1}")
    assert not plan.failed


def test_a_dkms_build_that_fails_fails_the_host_in_one_line_naming_the_kernel():
    lines = (FIXTURES / DEBIAN).read_text().splitlines()
    plan = run_plan(
        cover,
        settings_for(),
        debian(),
        unstated=DEFAULT,
        facts=[(InstalledKernels, lines)],
        commands={
            "dkms autoinstall": Output(
                stdout=[f"Error! Bad return status for module build on kernel: {K2} (x86_64)"], success=False
            )
        },
    )
    assert plan.refusal == (
        f"DKMS could not build the NVIDIA kernel module for installed kernel {K2} (dkms autoinstall "
        f"-k {K2}): Error! Bad return status for module build on kernel: {K2} (x86_64); see "
        "/var/lib/dkms/*/*/build/make.log on the node"
    )


def test_every_kernel_covered_changes_nothing():
    lines = (FIXTURES / DEBIAN).read_text().splitlines() + [
        f"module {K2} 535.261.03 /lib/modules/{K2}/updates/dkms/nvidia-current.ko",
        "deb install linux-headers-cloud-amd64",
    ]
    plan = run_plan(cover, settings_for(), debian(), facts=[(InstalledKernels, lines)])
    assert [command for command in plan.commands if command != InstalledKernels().command()] == []


def test_a_reboot_into_a_kernel_without_the_module_is_refused_in_one_line():
    lines = (FIXTURES / DEBIAN).read_text().splitlines()
    plan = run_plan(refuse, facts=[(InstalledKernels, lines)])
    assert plan.refusal.startswith(f"reboot refused: the next boot starts kernel {K2} has no nvidia module")
    covered = lines + [f"module {K2} 535.261.03 /lib/modules/{K2}/updates/dkms/nvidia-current.ko"]
    assert not run_plan(refuse, facts=[(InstalledKernels, covered)]).failed


def test_through_the_driver_stage_the_refusal_comes_before_any_drain_or_reboot(monkeypatch, both_modes, caplog):
    """deploy/gpu_node.py with reboot_allowed and drain_before_restart (a stand-in cluster answers
    kubectl, tests/unit/test_drain_plan.py): the driver changed, the next boot's kernel has no module."""
    from test_drain_plan import GPU, NODE, StandInCluster, gpu_host, run_gpu_node

    cluster = StandInCluster()
    gpu = gpu_host(None, NODE, (InstalledKernels, (FIXTURES / DEBIAN).read_text().splitlines()))
    run = run_gpu_node(monkeypatch, cluster, data={"stages": "driver", "reboot_allowed": True}, gpu_answers=gpu)
    assert run.failed and f"reboot refused: the next boot starts kernel {K2} has no nvidia module" in caplog.text
    assert run.index(GPU, "apt-get -y") >= 0, "the driver changed"
    assert run.kubectl_verbs() == ["get"], "the drain's read while preparing, and no cordon or drain"
    assert not [command for command in run.on(GPU) if "reboot )" in command]


def test_through_the_driver_stage_every_installed_kernel_gets_its_headers_and_a_dkms_build(both_modes):
    """deploy/gpu_node.py's driver stage (the driver installed, so changed; no reboot asked): the second
    installed kernel, which has no module, gets its headers and a DKMS build in the same run, and the
    kernel that has one is left alone."""
    from test_driver_plans import DEBIAN_FILES, node

    lines = (FIXTURES / DEBIAN).read_text().splitlines()
    run = run_deploy(
        node(
            "debian-12",
            node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU),
            facts=[
                *DEBIAN_FILES,
                (InstalledKernels, lines),
                (every(PackagesAvailable), carrying("linux-headers-6.1.0-18-amd64", "linux-headers-cloud-amd64")),
            ],
        ),
        data={"stages": "driver"},
    )
    assert run.error is None and not run.failed, run.refusal
    installs = run.matching("apt-get -y")
    assert any(f"linux-headers-{K2}" in command for command in installs), installs
    assert run.ran(f"dkms autoinstall -k {K2}") and not run.ran(f"dkms autoinstall -k {K1}")
    builds = [name for name in run.op_names() if "for every installed kernel" in name]
    assert builds == ["NVIDIA driver | Build the NVIDIA module for every installed kernel"], run.op_names()
