"""verify names a driver part out of step with the others: the loaded module against the user-space
driver's NVML library, Fabric Manager against the driver (InstalledKernels' reading, stated)."""

from __future__ import annotations

from deploy.facts.installed_kernels import InstalledKernels
from deploy.reports.node_report import FAIL, PASS, SKIP
from deploy.verification.version_set import version_set_step

LIBRARY = "library /usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03"


def kernels(*lines: str) -> dict:
    return InstalledKernels().process(list(lines))


def test_a_module_older_than_the_library_is_the_mismatch_nvml_reports_with_cause_and_fix():
    step = version_set_step("535.216.03", kernels(LIBRARY))
    assert step.status == FAIL
    assert step.reason == (
        "the loaded nvidia module is 535.216.03 but the user-space driver is 535.261.03: the driver "
        "changed and the old module still runs (NVML: Driver/library version mismatch); reboot, or "
        "rerun with kernel_modules_load=true to reload it where nothing holds the GPU"
    )


def test_fabric_manager_of_another_version_than_the_driver_fails_naming_both():
    step = version_set_step("535.261.03", kernels(LIBRARY, "fabricmanager nvidia-fabricmanager-535 535.247.01-1"))
    assert step.status == FAIL and step.reason.startswith(
        "Fabric Manager is nvidia-fabricmanager-535 535.247.01 but the driver is 535.261.03: it does not start"
    )


def test_one_version_passes_and_no_driver_skips():
    step = version_set_step(None, kernels(LIBRARY, "fabricmanager nvidia-fabricmanager-535 535.261.03-1"))
    assert step.status == PASS
    assert step.reason == (
        "one version: user-space driver 535.261.03, no module loaded, nvidia-fabricmanager-535 535.261.03"
    )
    assert version_set_step("535.261.03", kernels(LIBRARY)).status == PASS
    assert version_set_step(None, kernels()).status == SKIP
    assert version_set_step(None, None).status == SKIP
