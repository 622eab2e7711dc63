"""
The driver plan as a pure function (deploy/planning/driver_plan.py, deploy/planning/driver_names.py): settings, a
family's table, what the node showed and what preflight read in; the packages, versions, pins and
refusals out. No pyinfra host: the plan tests through the @deploy are tests/unit/test_driver_plans.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from plan import settings_for
from test_distros import platform_of

from deploy.distros.families import DEBIAN_KERNEL_VARIANT, SUSE_KERNEL_VARIANT
from deploy.planning.driver_names import kernel_variant, template_values
from deploy.planning.driver_plan import DriverPlanError, Readings, driver_plan, plan_branch

B200, A100 = "0x2901", "0x20b0"  # Blackwell: open modules only; Ampere: either
CLOUD_KERNEL = "6.1.0-28-cloud-amd64"


def gpu(device: str) -> dict:
    return {"slot": "0000:3b:00.0", "device": device, "class": "0x030200"}


def debian_node(*devices: str, **more) -> dict:
    return {"kernel": CLOUD_KERNEL, "gpus": [gpu(device) for device in devices], **more}


# Debian's open module exists only at 535.261.03 while the driver has a newer version too
OFFERED = {
    "nvidia-driver": ["550.163.01-2", "535.261.03-1"],
    "nvidia-smi": ["550.163.01-2", "535.261.03-1"],
    "nvidia-open-kernel-dkms": ["535.261.03-1"],
    "nvidia-kernel-dkms": ["550.163.01-2", "535.261.03-1"],
}


@pytest.mark.parametrize(
    ("kernel", "pattern", "default", "variant"),
    [
        ("6.1.0-28-cloud-amd64", DEBIAN_KERNEL_VARIANT, "amd64", "cloud-amd64"),
        ("6.8.0-45-generic", DEBIAN_KERNEL_VARIANT, "generic", "generic"),
        ("6.1.0-custom", DEBIAN_KERNEL_VARIANT, "amd64", "amd64"),  # not Debian's shape: the table's default
        ("6.4.0-150600.23.7-azure", SUSE_KERNEL_VARIANT, "default", "azure"),
        ("5.14.21-150500.55.39-default", SUSE_KERNEL_VARIANT, "default", "default"),
        ("5.14.21-150500.55.39", SUSE_KERNEL_VARIANT, "default", "default"),
        ("6.11.8-1-rt", SUSE_KERNEL_VARIANT, "default", "rt"),
        ("6.18.44-fc-v782", SUSE_KERNEL_VARIANT, "default", "default"),  # not SUSE's shape (a CI machine's kernel)
    ],
)
def test_the_kernel_variant_is_the_builds_name_in_the_kernels_release(kernel, pattern, default, variant):
    assert kernel_variant(kernel, pattern, default) == variant


def test_debians_headers_name_the_running_kernel_then_its_variants_meta_package():
    plan = driver_plan(settings_for(), platform_of("debian-12"), debian_node(A100))
    assert plan.headers == (f"linux-headers-{CLOUD_KERNEL}", "linux-headers-cloud-amd64")


def test_ubuntus_template_values_name_the_kernel_variant_and_the_branch():
    platform = platform_of("ubuntu-24.04")
    values = template_values(platform, platform.family.driver, "6.8.0-45-lowlatency", "550")
    assert (values["kernel_variant"], values["branch"], values["dist"]) == ("lowlatency", "550", "ubuntu2404")


def test_a_blackwell_node_takes_the_open_modules_at_the_one_version_every_package_has():
    plan = driver_plan(settings_for(), platform_of("debian-12"), debian_node(B200), readings=Readings(offered=OFFERED))
    assert plan.kernel_module_type == "open"
    assert plan.packages == {
        "nvidia-driver": "535.261.03-1",
        "nvidia-smi": "535.261.03-1",
        "nvidia-open-kernel-dkms": "535.261.03-1",
    }
    assert plan.remove == ("nvidia-kernel-dkms",)  # the proprietary module, in the same transaction
    assert "Pin: version 535.261.03-1" in plan.apt_pin and plan.resolve is None


def test_the_setting_proprietary_on_an_ampere_node_keeps_the_proprietary_module():
    plan = driver_plan(
        settings_for(nvidia_kernel_modules="proprietary"),
        platform_of("debian-12"),
        debian_node(A100),
        readings=Readings(offered=OFFERED),
    )
    assert plan.kernel_module_type == "proprietary"
    assert "nvidia-kernel-dkms" in plan.packages and plan.remove == ("nvidia-open-kernel-dkms",)


def test_open_modules_with_a_debian_branch_are_refused_in_one_line():
    with pytest.raises(DriverPlanError, match="packages no open kernel modules for nvidia_driver_branch='535'"):
        driver_plan(settings_for(nvidia_driver_branch="535"), platform_of("debian-12"), debian_node(B200))


def test_versions_the_lists_do_not_name_yet_are_left_to_the_install():
    plan = driver_plan(settings_for(), platform_of("debian-12"), debian_node(A100))
    assert plan.resolve["names"] == ["nvidia-driver", "nvidia-smi", "nvidia-kernel-dkms"]
    assert plan.resolve["fabric"] is None and plan.apt_pin is None
    pinned = driver_plan(
        settings_for(nvidia_driver_version="535.261.03-1"), platform_of("debian-12"), debian_node(A100)
    )
    assert pinned.resolve is None and set(pinned.packages.values()) == {"535.261.03-1"}


def test_ubuntus_branch_comes_from_the_installed_driver_else_it_is_refused():
    platform = platform_of("ubuntu-24.04")
    manager = platform.family.package_manager
    installed = Readings(installed={"nvidia-headless-no-dkms-550-server": ["550.127.05"]})
    assert plan_branch(settings_for(), platform, manager, installed) == "550"
    with pytest.raises(DriverPlanError, match="nvidia_driver_branch is required on ubuntu"):
        plan_branch(settings_for(), platform, manager, Readings())


def test_an_nvswitch_node_pins_fabric_manager_at_the_drivers_version():
    platform = platform_of("rocky-9")
    node = {
        "kernel": "5.14.0-427.el9.x86_64",
        "gpus": [gpu(A100)],
        "switches": [{"slot": "0000:05:00.0", "device": "0x1af1"}],
    }
    plan = driver_plan(
        settings_for(nvidia_cuda_gpgkey_fingerprint="610C7B14E068A878070D4F45C5D5ED2A2C8A0E71"),
        platform,
        node,
        readings=Readings(states={"kmod-nvidia-latest-dkms": {"version": "3:550.163.01-1.el9"}}),
    )
    assert plan.fabric_service == "nvidia-fabricmanager"
    assert {name: plan.packages[name] for name in plan.fabric_packages} == {
        "nvidia-fabric-manager": "550.163.01",
        "libnvidia-nscq": "550.163.01",
    }


RHEL_NODE = {"kernel": "5.14.0-427.el9.x86_64", "gpus": [gpu(B200)]}
NVIDIA_CUDA_KEY = {"nvidia_cuda_gpgkey_fingerprint": "610C7B14E068A878070D4F45C5D5ED2A2C8A0E71"}


def rhel_driver_at(version: str) -> Readings:
    return Readings(states={"kmod-nvidia-open-dkms": {"version": f"3:{version}-1.el9"}})


@pytest.mark.parametrize(("driver", "package"), [("570.172.08", "nvidia-imex-570"), ("580.95.05", "nvidia-imex")])
def test_an_imex_domains_host_pins_imex_at_the_drivers_version_under_the_branchs_name(driver, package):
    """NVIDIA names IMEX's package after the branch up to 575 and drops the branch from 580 on, as Fabric
    Manager's; the plan pins it at the driver's own version, beside no Fabric Manager (no NVSwitch)."""
    plan = driver_plan(
        settings_for(imex_domain="rack-a", **NVIDIA_CUDA_KEY),
        platform_of("rocky-9"),
        RHEL_NODE,
        readings=rhel_driver_at(driver),
    )
    assert plan.imex_packages == (package,)
    assert plan.packages[package] == driver
    assert plan.fabric_packages == () and plan.fabric_service is None
    assert plan.fabric_repository["url"].endswith("/rhel9/x86_64")  # NVIDIA's CUDA repository, as Fabric Manager's


def test_a_host_without_imex_domain_gets_no_imex():
    plan = driver_plan(
        settings_for(**NVIDIA_CUDA_KEY), platform_of("rocky-9"), RHEL_NODE, readings=rhel_driver_at("570.172.08")
    )
    assert plan.imex_packages == () and not [name for name in plan.packages if "imex" in name]
    assert plan.fabric_repository is None


def test_imex_with_a_driver_older_than_its_first_branch_is_refused_in_one_line():
    with pytest.raises(
        DriverPlanError, match="IMEX is packaged from driver branch 550 on, and the driver is 535.261.03"
    ):
        driver_plan(
            settings_for(imex_domain="rack-a", **NVIDIA_CUDA_KEY),
            platform_of("rocky-9"),
            RHEL_NODE,
            readings=rhel_driver_at("535.261.03"),
        )


def test_imex_on_a_family_that_packages_none_is_refused_naming_the_setting():
    node = {"kernel": "6.9.7-arch1-1", "gpus": [gpu(B200)], "kernel_pkgbases": ["linux"]}
    with pytest.raises(DriverPlanError, match="IMEX is not packaged for arch: unset imex_domain"):
        driver_plan(settings_for(imex_domain="rack-a"), platform_of("arch"), node)


def test_ubuntu_imex_comes_at_the_version_the_driver_and_imex_both_have():
    """apt: the lists offer a newer driver than the CUDA repository has IMEX for; driver and IMEX both take the
    newest version they share, in one choice."""
    offered = {
        "nvidia-headless-570-server-open": ["570.195.03-0ubuntu1", "570.172.08-0ubuntu1"],
        "nvidia-utils-570-server": ["570.195.03-0ubuntu1", "570.172.08-0ubuntu1"],
        "nvidia-dkms-570-server-open": ["570.195.03-0ubuntu1", "570.172.08-0ubuntu1"],
    }
    imex = {"nvidia-imex-570": ["570.172.08-1", "570.148.08-1"]}
    node = {"kernel": "6.8.0-45-generic", "gpus": [gpu(B200)]}
    plan = driver_plan(
        settings_for(imex_domain="rack-a", nvidia_driver_branch="570", **NVIDIA_CUDA_KEY),
        platform_of("ubuntu-24.04"),
        node,
        readings=Readings(offered=offered, fabric_offered=imex),
    )
    assert plan.packages["nvidia-imex-570"] == "570.172.08-1"
    assert plan.packages["nvidia-headless-570-server-open"] == "570.172.08-0ubuntu1"


def test_a_family_requiring_a_branch_it_cannot_detect_refuses_an_unset_branch():
    # (the branch detection typed in 9af4a9e runs only where the family names its pattern; the
    # branch stays required without one)
    ubuntu = platform_of("ubuntu-24.04")
    undetected = replace(
        ubuntu, family=replace(ubuntu.family, driver=replace(ubuntu.family.driver, branch_detect=None))
    )
    installed = Readings(installed={"nvidia-headless-no-dkms-550-server": ["550.127.05"]})
    with pytest.raises(DriverPlanError, match="required on ubuntu: gpu-node cannot detect one there; set it"):
        plan_branch(settings_for(), undetected, undetected.family.package_manager, installed)
    assert (
        plan_branch(settings_for(nvidia_driver_branch="550"), undetected, undetected.family.package_manager, installed)
        == "550"
    )
