"""
Plan tests: the whole entry file (stages kernel,driver) runs against pyinfra's @fake connector
for each distro family; the facts are stated (os-release, uname, the PCI bus, package state)
and the assertions are on the commands the run would execute.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from plan import DEFAULT, PCI_WITH_GPU, SITE_DRIVER_KEY, carrying, every, gpu_node, node_lines, run_deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.pacman import PacmanPackages
from pyinfra.facts.rpm import RpmPackages
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from test_boot_plan import BOOT_UNIT_IN_PLACE
from test_health_task import HEALTH_CHECK_IN_PLACE
from test_read_ahead import digest_lines

from deploy.distros.package_managers import DNF, ZYPPER
from deploy.facts.apt import AptSourceFiles
from deploy.facts.nvidia import IgnoredPackages, PackagesAvailable, RecommendedDriver
from deploy.facts.packages import (
    DebPackageStates,
    DnfModuleStreams,
    PackageVersions,
    RepositoryPackageVersions,
    RpmPackageStates,
    WaitedPackageVersions,
    ZypperLocks,
)
from deploy.operations.files import digest_read as files_digest
from deploy.operations.packages import PACMAN_HOLD_LIST
from deploy.planning.driver_plan import APT_PIN_PATH

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

DEBIAN_SOURCES = (
    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
    "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packages"
DEBIAN_FILES = [
    (AptSourceFiles, "/etc/apt/sources.list.d/debian.sources " + base64.b64encode(DEBIAN_SOURCES.encode()).decode()),
]


def node(distro: str, node_survey: list[str] | None = None, facts=(), arch: str = "x86_64"):
    """A node of ``distro``; what it does not state (the kernel stage's files, installed packages,
    repository files) reads as nothing there: the facts' defaults."""
    return gpu_node(distro, arch=arch, node_survey=node_survey, facts=facts, unstated=DEFAULT)


def dpkg(**installed: str):
    """DebPackageStates on a node where ``installed`` (name -> "version" or "version hold") are installed."""

    def output(packages=()):
        lines = []
        for name in packages:
            if name.replace("-", "_") in installed:
                version, *held = installed[name.replace("-", "_")].split()
                lines.append(f"{name} {version} {'hold' if held else 'install'} ok installed")
        return lines

    return output


def offering(**versions: str):
    """PackageVersions on a node whose apt lists offer ``versions`` (name -> "v1 v2", newest first)."""

    def output(listing=(), packages=()):
        return [
            f" {name} | {version} | http://deb.debian.org/debian bookworm/main amd64 Packages"
            for name in packages
            for version in versions.get(name.replace("-", "_"), "").split()
        ]

    return output


SERVICES_UP = [
    (every(SystemdEnabled), ["Id=nvidia-persistenced.service", "UnitFileState=enabled"]),
    (every(SystemdStatus), ["Id=nvidia-persistenced.service", "SubState=running"]),
]


def install_lines(run, tool: str) -> list[str]:
    return [c for c in run.commands if c.startswith(tool) or f" {tool} " in c if " install " in c]


def single(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    return lines[0]


def ok(run):
    assert run.error is None, repr(run.error)
    return run


# Debian


def test_debian_default_plan_enables_components_installs_driver_headers_firmware_and_holds():
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU),
                facts=[
                    *DEBIAN_FILES,
                    (every(PackagesAvailable), carrying("linux-headers-6.1.0-18-amd64")),
                ],
            )
        )
    )
    installs = install_lines(run, "apt-get")
    assert any(
        c.endswith(" --allow-change-held-packages --allow-downgrades nvidia-driver nvidia-smi nvidia-kernel-dkms")
        for c in installs
    ), installs
    assert any(c.endswith(" --allow-change-held-packages --allow-downgrades firmware-misc-nonfree") for c in installs)
    assert any(
        c.endswith(
            " install -o DPkg::Lock::Timeout=120 --allow-change-held-packages --allow-downgrades linux-headers-6.1.0-18-amd64"
        )
        for c in installs
    )
    assert "apt-mark hold nvidia-driver nvidia-kernel-dkms nvidia-smi" in run.commands
    assert not run.ran("apt-mark hold firmware")
    assert "NVIDIA driver | Enable contrib non-free non-free-firmware for bookworm" in run.op_names()
    # written beside the live source and renamed over it: an interrupted run leaves no half file
    assert run.ran(
        "mv -f /etc/apt/sources.list.d/debian.sources.gpu-node-candidate /etc/apt/sources.list.d/debian.sources"
    )
    # the driver changed and no module is loaded: the reboot marker, no reboot
    assert run.ran("> /run/reboot-required")
    assert not run.ran("reboot )")


def test_debian_headers_fall_back_to_the_kernel_variants_meta_package_when_the_running_kernels_are_missing():
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-cloud-amd64", pci=PCI_WITH_GPU),
                facts=[
                    *DEBIAN_FILES,
                    # the lists carry the kernel variant's meta package, not the running kernel's headers
                    (every(PackagesAvailable), carrying("linux-headers-cloud-amd64")),
                ],
            )
        )
    )
    assert any(
        c.endswith(
            " install -o DPkg::Lock::Timeout=120 --allow-change-held-packages --allow-downgrades linux-headers-cloud-amd64"
        )
        for c in install_lines(run, "apt-get")
    )


def test_debian_branch_and_version_pin_the_tesla_packages_and_hold_them():
    version = "535.216.03-3~deb12u1"
    run = ok(
        run_deploy(
            node("debian-12", facts=DEBIAN_FILES),
            data={"nvidia_driver_branch": "535", "nvidia_driver_version": version},
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-tesla" in c])
    for name in ("nvidia-tesla-535-driver", "nvidia-tesla-535-smi", "nvidia-tesla-535-kernel-dkms"):
        assert f"{name}={version}" in driver
    assert "apt-mark hold nvidia-tesla-535-driver nvidia-tesla-535-kernel-dkms nvidia-tesla-535-smi" in run.commands


def test_debian_second_run_with_everything_installed_and_held_runs_no_package_command():
    version = "535.216.03-3~deb12u1"
    enabled = DEBIAN_SOURCES.replace("Components: main", "Components: main contrib non-free non-free-firmware")
    pin = (
        "# Managed by gpu-node (deploy/tasks/driver.py): the NVIDIA driver's packages at one version\n"
        "Package: src:nvidia-graphics-drivers src:nvidia-graphics-drivers-tesla-535 src:nvidia-open-gpu-kernel-modules\n"
        f"Pin: version {version}\nPin-Priority: 1001\n"
    )
    run = ok(
        run_deploy(
            node(
                "debian-12",
                facts=[
                    (
                        AptSourceFiles,
                        "/etc/apt/sources.list.d/debian.sources " + base64.b64encode(enabled.encode()).decode(),
                    ),
                    (
                        every(DebPackageStates),
                        dpkg(
                            nvidia_tesla_535_driver=f"{version} hold",
                            nvidia_tesla_535_smi=f"{version} hold",
                            nvidia_tesla_535_kernel_dkms=f"{version} hold",
                            firmware_misc_nonfree="20230210-5",
                            nvidia_persistenced="535.171.04-1~deb12u1",
                        ),
                    ),
                    (DebPackages, ["ii  linux-headers-6.1.0-18-amd64 6.1.76-1 amd64 Header files"]),
                    (files_digest(APT_PIN_PATH), digest_lines(pin)),
                    *SERVICES_UP,
                    *BOOT_UNIT_IN_PLACE,
                    *HEALTH_CHECK_IN_PLACE,
                ],
            ),
            data={"nvidia_driver_branch": "535", "nvidia_driver_version": version, "stages": "driver"},
        )
    )
    assert not run.ran("apt-get"), run.ran("apt-get")
    assert not run.ran("apt-mark hold")
    assert not run.ran("> /run/reboot-required")
    assert not [c for c in run.commands if c.startswith("systemctl")]
    # no more remote commands than before the kernel module type and persistenced came: preflight's combined read,
    # the driver's one read ahead, NodeSurvey for the reboot marker's check
    assert len(run.commands) <= 6, "\n".join(c[:4000].replace("\n", " ") for c in run.commands)


def test_debian_without_a_release_entry_fails_the_host_naming_the_problem(caplog):
    run = run_deploy(
        node(
            "debian-12",
            facts=[
                (
                    AptSourceFiles,
                    "/etc/apt/sources.list.d/other.sources "
                    + base64.b64encode(
                        b"Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: bookworm\nComponents: stable\n"
                    ).decode(),
                ),
            ],
        )
    )
    assert run.host in run.state.failed_hosts
    [line] = [record.getMessage() for record in caplog.records if "gpu-node:" in record.getMessage()]
    assert "gpu-node: no Debian archive entry for bookworm (with component main)" in line
    assert not run.ran("--allow-change-held-packages --allow-downgrades nvidia-driver")


# Ubuntu


def test_ubuntu_branch_and_version_install_headless_server_packages_pinned_and_held():
    version = "550.90.07-0ubuntu0.22.04.1"
    run = ok(
        run_deploy(
            node("ubuntu-22.04", node_survey=node_lines("5.15.0-91-generic", pci=PCI_WITH_GPU)),
            data={"nvidia_driver_branch": "550", "nvidia_driver_version": version},
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-headless" in c])
    for name in ("nvidia-headless-550-server", "nvidia-utils-550-server", "nvidia-dkms-550-server"):
        assert f"{name}={version}" in driver
    assert "apt-mark hold nvidia-dkms-550-server nvidia-headless-550-server nvidia-utils-550-server" in run.commands
    assert not run.ran("contrib")


def test_ubuntu_branch_detected_from_ubuntu_drivers_recommendation():
    run = ok(
        run_deploy(
            node(
                "ubuntu-22.04",
                node_survey=node_lines("5.15.0-91-generic", pci=PCI_WITH_GPU),
                facts=[
                    (
                        (RecommendedDriver, {"recommend_command": "ubuntu-drivers list --gpgpu"}),
                        ["nvidia-driver-535-server, (kernel modules provided by nvidia-dkms-535-server)"],
                    ),
                ],
            )
        )
    )
    assert any(
        c.endswith("nvidia-headless-535-server nvidia-utils-535-server nvidia-dkms-535-server")
        for c in install_lines(run, "apt-get")
    )


def test_ubuntu_branch_detected_from_the_installed_driver():
    run = ok(
        run_deploy(
            node(
                "ubuntu-22.04",
                node_survey=node_lines("5.15.0-91-generic"),
                facts=[
                    (DebPackages, ["ii  nvidia-headless-470-server 470.239.06-0ubuntu0.22.04.1 amd64 NVIDIA headless"]),
                    (every(DebPackageStates), dpkg(nvidia_headless_470_server="470.239.06-0ubuntu0.22.04.1")),
                ],
            )
        )
    )
    # the installed package stays, the rest of branch 470 joins it, all held
    assert any(
        c.endswith("--allow-change-held-packages --allow-downgrades nvidia-utils-470-server nvidia-dkms-470-server")
        for c in install_lines(run, "apt-get")
    ), run.commands
    assert "apt-mark hold nvidia-dkms-470-server nvidia-headless-470-server nvidia-utils-470-server" in run.commands


def test_ubuntu_without_branch_or_recommendation_stops_before_any_change():
    run = run_deploy(node("ubuntu-22.04", node_survey=node_lines("5.15.0-91-generic")))
    assert "nvidia_driver_branch is required on ubuntu" in run.refusal
    assert not run.ran("apt-get") and not run.ran("mkdir -p /etc/modprobe.d")


# RHEL family


def test_rocky_9_adds_cuda_repo_enables_module_stream_pins_and_versionlocks():
    run = ok(
        run_deploy(
            node(
                "rocky-9",
                node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=PCI_WITH_GPU),
                facts=[
                    (every(PackagesAvailable), carrying("kernel-devel-5.14.0-362.8.1.el9_3.x86_64")),
                ],
            ),
            data={"nvidia_driver_branch": "550", "nvidia_driver_version": "550.54.15"},
        )
    )
    assert "NVIDIA driver | Add NVIDIA's repository cuda-rhel9-x86_64" in run.op_names()
    assert "dnf module enable -y nvidia-driver:550-dkms" in run.commands
    assert "dnf install -y epel-release" in run.commands
    assert "dnf install -y kernel-devel-5.14.0-362.8.1.el9_3.x86_64" in run.commands
    assert (
        "dnf install -y nvidia-driver-550.54.15 nvidia-driver-cuda-550.54.15 kmod-nvidia-latest-dkms-550.54.15"
        in run.commands
    )
    # nvidia-persistenced comes from the driver's source in NVIDIA's repository: pinned and locked with it
    assert "dnf install -y nvidia-persistenced-550.54.15" in run.commands
    assert run.ran("dnf versionlock add") == [
        "dnf versionlock add kmod-nvidia-latest-dkms nvidia-driver nvidia-driver-cuda",
        "dnf versionlock add nvidia-persistenced",
    ]


# What the real dnf 4.14 of the Rocky node answered to WaitedPackageVersions with a repository on a
# closed port (tests/fixtures/packages): nothing listed, the repository named in its error
DNF_BROKEN_MIRROR = (FIXTURES / "dnf-list-broken-repository.txt").read_text().splitlines()
BROKEN_MIRROR = "repository 'mirror' (Cannot download repomd.xml"


def test_a_repository_dnf_cannot_read_is_named_in_a_preflight_warning_and_the_plan_goes_on(caplog):
    """dnf lists nothing when one repository cannot be read: preflight says which and why (the
    versions are unknown, and an install stops at it); the pinned plan itself goes on."""
    run = ok(
        run_deploy(
            node(
                "rocky-9",
                node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=PCI_WITH_GPU),
                facts=[
                    (every(WaitedPackageVersions), DNF_BROKEN_MIRROR),
                    (every(PackagesAvailable), carrying("kernel-devel-5.14.0-362.8.1.el9_3.x86_64")),
                ],
            ),
            data={"nvidia_driver_branch": "550", "nvidia_driver_version": "550.54.15"},
        )
    )
    warnings = [record.getMessage() for record in caplog.records if "cannot read" in record.getMessage()]
    assert len(warnings) == 1 and f"dnf cannot read {BROKEN_MIRROR}" in warnings[0], warnings
    assert (
        "dnf install -y nvidia-driver-550.54.15 nvidia-driver-cuda-550.54.15 kmod-nvidia-latest-dkms-550.54.15"
        in run.commands
    )


def test_fabric_managers_refusal_names_the_repository_dnf_could_not_read():
    """An NVSwitch node without a driver version pin: Fabric Manager needs the driver's version, and
    dnf named none. When dnf could not read a repository, the refusal says so (that is why), else not."""

    def refusal(listing):
        run = run_deploy(
            node(
                "rocky-9",
                node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=NVSWITCH),
                facts=[(every(WaitedPackageVersions), listing)],
            ),
            data={"nvidia_driver_branch": "550"},
        )
        assert not run.ran("dnf install") and not run.ran("dnf module"), run.commands
        return run.refusal

    unread, healthy = refusal(DNF_BROKEN_MIRROR), refusal([])
    assert "Fabric Manager must be pinned" in unread and "which dnf could not read all of: " + BROKEN_MIRROR in unread
    assert "Fabric Manager must be pinned" in healthy and "could not read" not in healthy


def test_through_the_driver_stage_a_package_manager_still_busy_refuses_the_host():
    """dnf waits without end for another dnf's lock: the driver stage's read waits for it, bounded, and
    when the lock is still held then, preflight refuses the host in the wait's one line, before any change."""
    busy = "the package manager is busy: after waiting 120 s (apt_lock_timeout), dnf (pid 4242) holds its lock"
    run = run_deploy(
        node(
            "rocky-9",
            node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=PCI_WITH_GPU),
            facts=[(every(WaitedPackageVersions), [f"busy gpu-node: {busy}"])],
        ),
        data={"nvidia_driver_branch": "550", "nvidia_driver_version": "550.54.15"},
    )
    assert run.refusal == busy
    assert not run.ran("dnf install") and not run.ran("dnf module") and not run.ran("mkdir -p /etc/modprobe.d")


def test_rocky_9_without_branch_uses_the_latest_dkms_stream():
    run = ok(run_deploy(node("rocky-9", node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64"))))
    assert "dnf module enable -y nvidia-driver:latest-dkms" in run.commands


def test_fedora_has_no_modules_and_installs_cuda_drivers_of_the_branch():
    run = ok(
        run_deploy(
            node("fedora-40", node_survey=node_lines("6.8.5-301.fc40.x86_64")), data={"nvidia_driver_branch": "550"}
        )
    )
    assert "NVIDIA driver | Add NVIDIA's repository cuda-fedora40-x86_64" in run.op_names()
    assert not run.ran("dnf module")
    assert "dnf install -y cuda-drivers-550" in run.commands
    assert "dnf versionlock add cuda-drivers-550" in run.commands


def test_amazon_linux_2023_uses_the_amzn2023_repository_on_arm():
    run = ok(run_deploy(node("amzn-2023", arch="aarch64", node_survey=node_lines("6.1.84-99.169.amzn2023.aarch64"))))
    assert "NVIDIA driver | Add NVIDIA's repository cuda-amzn2023-sbsa" in run.op_names()
    assert "dnf install -y cuda-drivers" in run.commands


# SUSE


def test_opensuse_leap_adds_nvidias_repository_and_locks_g06_packages():
    run = ok(
        run_deploy(
            node("opensuse-leap-15.5", node_survey=node_lines("5.14.21-150500.55.39-default")),
            data={"nvidia_driver_version": "550.54.14", **SITE_DRIVER_KEY},
        )
    )
    assert "NVIDIA driver | Add NVIDIA's repository nvidia-opensuse-leap" in run.op_names()
    install = single(run.ran("zypper --non-interactive install -y"))
    assert "nvidia-compute-utils-G06=550.54.14" in install and "nvidia-compute-G06=550.54.14" in install
    # the KMP pinned with the userspace (its offered edition is read after the refresh: not stated here)
    assert install.rstrip().endswith("nvidia-driver-G06-kmp-default=550.54.14")
    assert single(run.ran("addlock")).endswith(
        "addlock nvidia-compute-G06 nvidia-compute-utils-G06 nvidia-driver-G06-kmp-default"
    )


def test_opensuse_rejects_a_branch():
    run = run_deploy(
        node("opensuse-leap-15.5", node_survey=node_lines("5.14.21-150500.55.39-default")),
        data={"nvidia_driver_branch": "550"},
    )
    assert "nvidia_driver_branch='550' is not supported on opensuse-leap" in run.refusal


# Arch


@pytest.mark.parametrize(
    "kernels, expected",
    [
        (["linux"], "nvidia-utils nvidia"),
        (["linux-lts"], "nvidia-utils nvidia-lts"),
        (["linux", "linux-lts"], "nvidia-utils nvidia nvidia-lts"),
        (["linux", "linux-zen"], "nvidia-utils nvidia-dkms linux-headers linux-zen-headers"),
    ],
)
def test_arch_picks_the_module_package_for_its_kernels_and_holds_with_ignorepkg(kernels, expected):
    run = ok(run_deploy(node("arch", node_survey=node_lines("6.9.7-arch1-1", pkgbases=kernels))))
    # pacman installs from refreshed lists, as Arch upgrades: -Syu (tests/e2e/test_family_pacman.py)
    assert single(run.ran("pacman --noconfirm -Syu --needed")).endswith(f"--needed {expected}")
    hold = single(run.ran("IgnorePkg = "))
    assert hold.startswith("sed -i '/^\\[options\\]/a IgnorePkg = ") and hold.endswith(f"{expected}' /etc/pacman.conf")


def test_arch_already_ignored_packages_are_not_added_twice():
    run = ok(
        run_deploy(
            node(
                "arch",
                node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"]),
                facts=[
                    ((IgnoredPackages, {"list_command": PACMAN_HOLD_LIST}), [" nvidia-utils nvidia"]),
                ],
            )
        )
    )
    assert not run.ran("/a IgnorePkg")


def test_arch_rejects_a_version_pin():
    run = run_deploy(
        node("arch", node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"])),
        data={"nvidia_driver_version": "550.78-1"},
    )
    assert "nvidia_driver_version='550.78-1' cannot be pinned on arch" in run.refusal


# Across families


@pytest.mark.parametrize(
    "data, message",
    [
        ({"nvidia_driver_branch": "340"}, "nvidia_driver_branch='340' is older than 384.81"),
        ({"nvidia_driver_version": "375.66-1"}, "nvidia_driver_version='375.66-1' is older than 384.81"),
        ({"nvidia_driver_branch": "535", "nvidia_driver_version": "550.54.15"}, "is not in nvidia_driver_branch='535'"),
    ],
)
def test_driver_below_the_device_plugins_floor_or_inconsistent_stops_before_any_change(data, message):
    run = run_deploy(node("debian-12", facts=DEBIAN_FILES), data=data)
    assert message in run.refusal
    assert not run.ran("mkdir -p /etc/modprobe.d")


def test_a_loaded_module_of_the_installed_version_needs_no_reboot():
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, loaded="535.216.03", built="535.216.03"),
                facts=DEBIAN_FILES,
            )
        )
    )
    assert run.ran("--allow-change-held-packages --allow-downgrades nvidia-driver")
    assert not run.ran("> /run/reboot-required")


def test_reboot_allowed_reboots_after_the_driver_changed(monkeypatch):
    """The fake host cannot come back from the reboot; the reboot being issued is what is checked."""
    monkeypatch.setattr("deploy.tasks.driver.REBOOT_DELAY", 0)
    run = run_deploy(
        node("debian-12", node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU), facts=DEBIAN_FILES),
        data={"reboot_allowed": True},
    )
    assert run.ran("> /run/reboot-required")
    assert run.ran("( sleep 1 && reboot )")


def test_cuda_toolkit_installs_the_familys_package_and_puts_it_on_path():
    run = ok(run_deploy(node("debian-12", facts=DEBIAN_FILES), data={"cuda_toolkit_install": True}))
    assert any(c.endswith(" nvidia-cuda-toolkit") for c in install_lines(run, "apt-get"))
    assert "NVIDIA driver | Put the CUDA toolkit on PATH" in run.op_names()
    (swap,) = run.ran("mv -f /etc/profile.d/cuda.sh.gpu-node-candidate /etc/profile.d/cuda.sh")
    assert swap.index("chmod 644 /etc/profile.d/cuda.sh.gpu-node-candidate") < swap.index("mv -f")


def test_driver_install_false_runs_no_driver_operation():
    run = ok(run_deploy(node("debian-12", facts=DEBIAN_FILES), data={"nvidia_driver_install": False}))
    assert not run.ran("apt-get") and not run.ran("apt-mark")
    assert not [name for name in run.op_names() if name.startswith("NVIDIA driver")]


# Kernel module type, one version, nvidia-persistenced, Fabric Manager (docs/datacenter.md)

H100 = ["pci 0000:3b:00.0 0x2330 0x030200"]
B200 = ["pci 0000:3b:00.0 0x2901 0x030200"]
NVSWITCH = [*H100, "pci 0000:05:00.0 0x22a3 0x068000"]
BOOKWORM_OFFERS = offering(
    nvidia_driver="535.309.01-0+deb12u1 535.261.03-1",
    nvidia_smi="535.309.01-0+deb12u1 535.261.03-1",
    nvidia_kernel_dkms="535.309.01-0+deb12u1 535.261.03-1",
    nvidia_open_kernel_dkms="535.261.03-1",
    nvidia_fabricmanager_535="535.309.01-1 535.261.03-1",
    libnvidia_nscq_535="535.309.01-1 535.261.03-1",
)


def test_debian_open_module_type_pins_driver_and_open_module_to_the_version_both_have_with_an_apt_pin():
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=H100),
                facts=[*DEBIAN_FILES, (every(PackageVersions), BOOKWORM_OFFERS)],
            ),
            data={"nvidia_kernel_modules": "open"},
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-driver" in c])
    assert driver.endswith("nvidia-driver=535.261.03-1 nvidia-smi=535.261.03-1 nvidia-open-kernel-dkms=535.261.03-1")
    assert "apt-mark hold nvidia-driver nvidia-open-kernel-dkms nvidia-smi" in run.commands
    assert run.ran("/etc/apt/preferences.d/gpu-node-nvidia-driver")
    assert "NVIDIA driver | Pin the NVIDIA driver's packages at one version" in run.op_names()


def test_switching_the_module_type_replaces_the_module_package_in_the_same_transaction():
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=H100),
                facts=[
                    *DEBIAN_FILES,
                    (every(PackageVersions), BOOKWORM_OFFERS),
                    (
                        every(DebPackageStates),
                        dpkg(
                            nvidia_driver="535.261.03-1 hold",
                            nvidia_smi="535.261.03-1 hold",
                            nvidia_open_kernel_dkms="535.261.03-1 hold",
                        ),
                    ),
                ],
            ),
            data={"nvidia_kernel_modules": "proprietary"},
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-kernel-dkms" in c])
    assert driver.endswith("nvidia-kernel-dkms=535.261.03-1 nvidia-open-kernel-dkms-")
    assert "apt-mark hold nvidia-kernel-dkms" in run.commands


@pytest.mark.parametrize(
    "distro, kernel, branch, module, facts, release",
    [
        (
            "rocky-9",
            "5.14.0-362.8.1.el9_3.x86_64",
            {"nvidia_driver_branch": "550"},
            "kmod-nvidia-open-dkms",
            [
                (
                    every(RpmPackageStates),
                    [
                        "installed kmod-nvidia-open-dkms 550.90.07-1.el9",
                        "lock kmod-nvidia-open-dkms-3:550.90.07-1.el9.*",
                    ],
                )
            ],
            "dnf versionlock delete kmod-nvidia-open-dkms",
        ),
        (
            "opensuse-leap-15.5",
            "5.14.21-150500.55.39-default",
            SITE_DRIVER_KEY,
            "nvidia-open-driver-G06-signed-kmp-default",
            [
                (
                    every(ZypperLocks),
                    [
                        "type: package",
                        "match_type: glob",
                        "case_sensitive: on",
                        "solvable_name: nvidia-open-driver-G06-signed-kmp-default",
                    ],
                )
            ],
            "zypper --non-interactive removelock nvidia-open-driver-G06-signed-kmp-default",
        ),
    ],
)
def test_switching_an_rpm_family_from_open_removes_its_module_after_the_bounded_wait_and_releases_its_hold(
    distro, kernel, branch, module, facts, release
):
    """rpm -e waits without end for the rpm database a busy dnf or zypper holds: the removal of the
    other module type's module follows the same bounded wait as the managers' installs; its hold (read
    before the removal) is released after it, so no hold is left on a package that is gone."""
    manager = DNF if distro.startswith("rocky") else ZYPPER
    installed = [(every(RpmPackages), [f"{module} 550.90.07-1"])]
    run = ok(
        run_deploy(
            node(distro, node_survey=node_lines(kernel, pci=H100), facts=installed + facts),
            data={**branch, "nvidia_kernel_modules": "proprietary", "apt_lock_timeout": "13"},
        )
    )
    at = run.commands.index(f"rpm -e --nodeps {module}")
    assert run.commands[at - 1] == manager.lock.script(13), run.commands[at - 2 : at + 1]
    assert release in run.commands[at + 1 : at + 3], run.commands[at : at + 3]


def test_a_rocky_node_on_the_other_module_types_stream_resets_the_module_before_enabling_this_one():
    """dnf refuses to switch a module's enabled stream (module_stream_switch): the switch to the open
    module type resets nvidia-driver first (tests/e2e/test_family_dnf.py shows it on the real dnf)."""
    streams = [(every(DnfModuleStreams), ["[nvidia-driver]", "name=nvidia-driver", "stream=570-dkms", "state=enabled"])]
    run = ok(
        run_deploy(
            node("rocky-9", node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=B200), facts=streams),
            data={"nvidia_driver_branch": "570"},
        )
    )
    at = run.commands.index("dnf module enable -y nvidia-driver:570-open")
    assert run.commands[at - 1] == "dnf module reset -y nvidia-driver", run.commands[at - 2 : at + 1]
    same = ok(
        run_deploy(
            node("rocky-9", node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=B200)),
            data={"nvidia_driver_branch": "570"},
        )
    )
    assert not same.ran("dnf module reset")


def test_switching_ubuntu_from_open_removes_every_open_package_in_the_same_transaction():
    # The held -open headless package depends on its module package: left behind, it would block
    # the module's removal (apt: "generated breaks").
    version = "550.90.07-0ubuntu0.22.04.1"
    run = ok(
        run_deploy(
            node(
                "ubuntu-22.04",
                node_survey=node_lines("5.15.0-91-generic", pci=PCI_WITH_GPU),
                facts=[
                    (
                        every(DebPackageStates),
                        dpkg(
                            **{
                                name.replace("-", "_"): f"{version} hold"
                                for name in (
                                    "nvidia-headless-550-server-open",
                                    "nvidia-utils-550-server",
                                    "nvidia-dkms-550-server-open",
                                )
                            }
                        ),
                    ),
                ],
            ),
            data={
                "nvidia_driver_branch": "550",
                "nvidia_driver_version": version,
                "nvidia_kernel_modules": "proprietary",
            },
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-dkms-550-server=" in c])
    assert driver.endswith(
        f"nvidia-headless-550-server={version} nvidia-dkms-550-server={version} "
        "nvidia-dkms-550-server-open- nvidia-headless-550-server-open-"
    ), driver


def test_a_running_newer_driver_is_not_downgraded_for_the_open_module_type():
    run = run_deploy(
        node(
            "debian-12",
            node_survey=node_lines("6.1.0-18-amd64", pci=H100),
            facts=[
                *DEBIAN_FILES,
                (every(PackageVersions), BOOKWORM_OFFERS),
                (
                    every(DebPackageStates),
                    dpkg(
                        nvidia_driver="535.309.01-0+deb12u1 hold",
                        nvidia_smi="535.309.01-0+deb12u1 hold",
                        nvidia_kernel_dkms="535.309.01-0+deb12u1 hold",
                    ),
                ),
            ],
        ),
        data={"nvidia_kernel_modules": "open"},
    )
    assert "the installed driver 535.309.01 is newer than 535.261.03" in run.refusal
    assert not run.ran("apt-get") and not run.ran("mkdir -p /etc/modprobe.d")


def test_blackwell_with_proprietary_is_refused_in_preflight_naming_the_gpu():
    run = run_deploy(
        node("debian-12", node_survey=node_lines("6.1.0-18-amd64", pci=B200), facts=DEBIAN_FILES),
        data={"nvidia_kernel_modules": "proprietary"},
    )
    assert "GPU 0x2901 (Blackwell) at 0000:3b:00.0" in run.refusal
    assert not run.ran("apt-get") and not run.ran("mkdir -p /etc/modprobe.d")


def test_debian_tesla_branch_has_no_open_modules_and_says_so():
    run = run_deploy(
        node("debian-12", node_survey=node_lines("6.1.0-18-amd64", pci=H100), facts=DEBIAN_FILES),
        data={"nvidia_kernel_modules": "open", "nvidia_driver_branch": "535"},
    )
    assert "packages no open kernel modules for nvidia_driver_branch='535'" in run.refusal


@pytest.mark.parametrize(
    "distro, kernel, data, expected",
    [
        (
            "ubuntu-22.04",
            "5.15.0-91-generic",
            {"nvidia_driver_branch": "550"},
            "nvidia-headless-550-server-open nvidia-utils-550-server nvidia-dkms-550-server-open",
        ),
        (
            "rocky-9",
            "5.14.0-362.8.1.el9_3.x86_64",
            {"nvidia_driver_branch": "550"},
            "nvidia-driver nvidia-driver-cuda kmod-nvidia-open-dkms",
        ),
        (
            "opensuse-leap-15.5",
            "5.14.21-150500.55.39-default",
            SITE_DRIVER_KEY,
            "nvidia-open-driver-G06-signed-kmp-default",
        ),
    ],
)
def test_each_family_installs_its_open_module_packages(distro, kernel, data, expected):
    run = ok(run_deploy(node(distro, node_survey=node_lines(kernel, pci=B200)), data=data))
    assert any(c.endswith(expected) for c in run.commands), [c for c in run.commands if "install" in c]


def test_rocky_open_module_type_enables_the_branchs_open_stream():
    run = ok(
        run_deploy(
            node("rocky-9", node_survey=node_lines("5.14.0-362.8.1.el9_3.x86_64", pci=B200)),
            data={"nvidia_driver_branch": "570"},
        )
    )
    assert "dnf module enable -y nvidia-driver:570-open" in run.commands


def test_arch_open_module_type_takes_nvidia_open():
    run = ok(run_deploy(node("arch", node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"], pci=B200))))
    assert single(run.ran("pacman --noconfirm -Syu --needed")).endswith("--needed nvidia-utils nvidia-open")


def test_persistenced_is_installed_and_enabled_and_started_only_with_a_gpu():
    """NodeSurvey shows a GPU: nvidia-persistenced installed, enabled and started; no GPU: only
    enabled (started, it would only fail); nvidia_persistenced=false: neither."""
    with_gpu = ok(run_deploy(node("debian-12", node_survey=node_lines("6.1.0-18-amd64", pci=H100), facts=DEBIAN_FILES)))
    assert any(c.endswith(" nvidia-persistenced") for c in install_lines(with_gpu, "apt-get"))
    assert "systemctl enable nvidia-persistenced.service" in with_gpu.commands
    assert "systemctl start nvidia-persistenced.service" in with_gpu.commands
    without = ok(run_deploy(node("debian-12", facts=DEBIAN_FILES)))
    assert "systemctl enable nvidia-persistenced.service" in without.commands
    assert "systemctl start nvidia-persistenced.service" not in without.commands
    off = ok(run_deploy(node("debian-12", facts=DEBIAN_FILES), data={"nvidia_persistenced": False}))
    assert not [c for c in install_lines(off, "apt-get") if "nvidia-persistenced" in c]
    assert not [c for c in off.starting("systemctl") if "nvidia-persistenced" in c]
    assert any(c.endswith(" nvidia-driver nvidia-smi nvidia-kernel-dkms") for c in install_lines(off, "apt-get"))


def test_nvswitch_node_gets_fabric_manager_at_the_drivers_version_in_the_drivers_transaction():
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=NVSWITCH),
                facts=[
                    *DEBIAN_FILES,
                    (every(PackageVersions), BOOKWORM_OFFERS),
                    (every(RepositoryPackageVersions), []),
                ],
            ),
            data=NVSWITCH_DATA,
        )
    )
    assert "NVIDIA driver | Add NVIDIA's CUDA repository cuda-debian12-x86_64 (signed-by keyring)" in run.op_names()
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-driver" in c])
    assert "nvidia-fabricmanager-535=535.309.01-1" in driver and "libnvidia-nscq-535=535.309.01-1" in driver
    assert (
        "apt-mark hold libnvidia-nscq-535 nvidia-driver nvidia-fabricmanager-535 nvidia-kernel-dkms nvidia-smi"
        in run.commands
    )
    assert "systemctl enable nvidia-fabricmanager.service" in run.commands


def test_fabric_manager_without_the_drivers_version_is_refused_before_any_change():
    run = run_deploy(
        node(
            "debian-12",
            node_survey=node_lines("6.1.0-18-amd64", pci=NVSWITCH),
            facts=[
                *DEBIAN_FILES,
                (
                    every(PackageVersions),
                    offering(
                        nvidia_driver="535.309.01-0+deb12u1",
                        nvidia_smi="535.309.01-0+deb12u1",
                        nvidia_kernel_dkms="535.309.01-0+deb12u1",
                    ),
                ),
                (
                    every(RepositoryPackageVersions),
                    ["nvidia-fabricmanager-535 535.274.02-1", "libnvidia-nscq-535 535.274.02-1"],
                ),
            ],
        ),
        data=NVSWITCH_DATA,
    )
    assert (
        "Fabric Manager" in run.refusal
        and "nvidia-fabricmanager-535 535.274.02" in run.refusal
        and "535.309.01" in run.refusal
    )
    assert not run.ran("apt-get") and not run.starting("mkdir -p")


def test_a_node_without_nvswitch_gets_no_fabric_manager():
    run = ok(run_deploy(node("debian-12", node_survey=node_lines("6.1.0-18-amd64", pci=H100), facts=DEBIAN_FILES)))
    assert not [c for c in install_lines(run, "apt-get") if "fabricmanager" in c or "nscq" in c]
    assert not [n for n in run.op_names() if "CUDA repository" in n or "fabricmanager" in n]


def test_fabric_manager_moves_the_driver_to_the_newest_version_both_have():
    """The CUDA repository has no Fabric Manager for the security archive's 535.309.01: both take 535.261.03."""
    offers = offering(
        nvidia_driver="535.309.01-0+deb12u1 535.261.03-1",
        nvidia_smi="535.309.01-0+deb12u1 535.261.03-1",
        nvidia_kernel_dkms="535.309.01-0+deb12u1 535.261.03-1",
    )
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=NVSWITCH),
                facts=[
                    *DEBIAN_FILES,
                    (every(PackageVersions), offers),
                    (
                        every(RepositoryPackageVersions),
                        [
                            "nvidia-fabricmanager-535 535.274.02-1",
                            "nvidia-fabricmanager-535 535.261.03-1",
                            "libnvidia-nscq-535 535.274.02-1",
                            "libnvidia-nscq-535 535.261.03-1",
                        ],
                    ),
                ],
            ),
            data=NVSWITCH_DATA,
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-driver" in c])
    for name in ("nvidia-driver", "nvidia-smi", "nvidia-kernel-dkms", "nvidia-fabricmanager-535", "libnvidia-nscq-535"):
        assert f"{name}=535.261.03-1" in driver, driver


def offering_after_refresh(offers):
    """PackageVersions of a fresh bookworm node: its lists name no driver (contrib and non-free are not
    enabled yet, NVIDIA's repository not added) until the run's ``apt-get update``; then ``offers``.
    Returns (the fact's answer, the commands answering the refresh)."""
    refreshed = []

    def answer(listing=(), packages=()):
        return offers(listing, packages) if refreshed else []

    def update(command):
        refreshed.append(command)
        return []

    return answer, {" update": update}


# A CUDA mirror over http: its key over https (a key is never fetched over http)
NVSWITCH_DATA = {
    "nvidia_cuda_repo_url": "http://127.0.0.1:8080/repos",
    "nvidia_cuda_gpgkey_url": "https://127.0.0.1:8443/keys/cuda.asc",
    "allow_insecure_repositories": True,
}
FABRIC_OFFERS = offering(
    nvidia_driver="535.309.01-0+deb12u1 535.261.03-1",
    nvidia_smi="535.309.01-0+deb12u1 535.261.03-1",
    nvidia_kernel_dkms="535.309.01-0+deb12u1 535.261.03-1",
    nvidia_fabricmanager_535="535.274.02-1 535.261.03-1 535.247.01-1",
    libnvidia_nscq_535="535.274.02-1 535.261.03-1 535.247.01-1",
)


def test_fabric_manager_on_a_fresh_node_is_chosen_with_the_driver_after_the_refresh_in_one_transaction():
    """Preflight's lists name no driver: the install operation picks, after the refresh, the newest
    version the driver and Fabric Manager both have (not the security archive's 535.309.01)."""
    answer, refresh = offering_after_refresh(FABRIC_OFFERS)
    run = ok(
        run_deploy(
            gpu_node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=NVSWITCH),
                unstated=DEFAULT,
                facts=[*DEBIAN_FILES, (every(PackageVersions), answer)],
                commands=refresh,
            ),
            data=NVSWITCH_DATA,
        )
    )
    driver = single([c for c in install_lines(run, "apt-get") if "nvidia-driver" in c])
    for name in ("nvidia-driver", "nvidia-smi", "nvidia-kernel-dkms", "nvidia-fabricmanager-535", "libnvidia-nscq-535"):
        assert f"{name}=535.261.03-1" in driver, driver
    assert (
        "apt-mark hold libnvidia-nscq-535 nvidia-driver nvidia-fabricmanager-535 nvidia-kernel-dkms nvidia-smi"
        in run.commands
    )
    pin = single(run.starting("printf %s"))
    assert "Pin: version 535.261.03-1" in pin and "535.274.02" not in pin
    assert "systemctl enable nvidia-fabricmanager.service" in run.commands


def test_fabric_manager_on_a_fresh_node_without_the_drivers_version_fails_before_installing():
    offers = offering(
        nvidia_driver="535.309.01-0+deb12u1 535.261.03-1",
        nvidia_smi="535.309.01-0+deb12u1 535.261.03-1",
        nvidia_kernel_dkms="535.309.01-0+deb12u1 535.261.03-1",
        nvidia_fabricmanager_535="535.274.02-1",
        libnvidia_nscq_535="535.274.02-1",
    )
    answer, refresh = offering_after_refresh(offers)
    run = run_deploy(
        gpu_node(
            "debian-12",
            node_survey=node_lines("6.1.0-18-amd64", pci=NVSWITCH),
            unstated=DEFAULT,
            facts=[*DEBIAN_FILES, (every(PackageVersions), answer)],
            commands=refresh,
        ),
        data=NVSWITCH_DATA,
    )
    failed = single(run.failed_with("Fabric Manager"))
    assert "no driver version has every package" in failed and "nvidia-fabricmanager-535 535.274.02" in failed, failed
    assert not [c for c in install_lines(run, "apt-get") if "nvidia-driver" in c or "fabricmanager" in c]


# What apt-get printed when Debian's nvidia-open-kernel-dkms 535.261.03 did not build on bookworm's
# kernel 6.1.0-56 (tests/e2e/test_open_kernel_modules_debian.py runs it)
DKMS_FAILED_OUTPUT = """\
Building for 6.1.0-56-amd64
Building initial module for 6.1.0-56-amd64
Error! Bad return status for module build on kernel: 6.1.0-56-amd64 (x86_64)
Consult /var/lib/dkms/nvidia-current-open/535.261.03/build/make.log for more information.
dpkg: error processing package nvidia-open-kernel-dkms (--configure):
 installed nvidia-open-kernel-dkms package post-installation script subprocess returned error exit status 10
dpkg: dependency problems prevent configuration of nvidia-driver:
dpkg: error processing package nvidia-driver (--configure):
Errors were encountered while processing:
E: Sub-process /usr/bin/dpkg returned an error code (1)""".splitlines()


def test_a_dkms_build_failure_is_one_line_naming_the_kernel_the_log_and_the_unconfigured_packages():
    from deploy.driver.install_failures import install_failure

    assert install_failure(DKMS_FAILED_OUTPUT) == (
        "DKMS could not build the NVIDIA kernel module for kernel 6.1.0-56-amd64: see "
        "/var/lib/dkms/nvidia-current-open/535.261.03/build/make.log on the node; "
        "dpkg left nvidia-driver, nvidia-open-kernel-dkms unconfigured"
    )
    other = ["Reading package lists...", "E: Unable to locate package nvidia-driver"]
    assert (
        install_failure(other)
        == "apt-get install of the NVIDIA driver failed: E: Unable to locate package nvidia-driver"
    )


def test_the_long_steps_say_what_they_do_when_the_run_reaches_them(caplog):
    """The driver's install (a DKMS build: minutes) announces itself at its turn, not while planning."""
    import logging

    caplog.set_level(logging.INFO, logger="pyinfra")
    run = ok(
        run_deploy(
            node(
                "debian-12",
                node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU),
                facts=[
                    *DEBIAN_FILES,
                    (every(PackagesAvailable), carrying("linux-headers-6.1.0-18-amd64")),
                ],
            )
        )
    )
    said = [record.getMessage() for record in caplog.records]
    (line,) = [text for text in said if "installing the NVIDIA driver with apt" in text]
    assert "typically 2 to 10 minutes" in line and "/var/lib/dkms/.../make.log" in line
    # said once the run was executing, right before the install's own output
    assert said.index(line) > next(index for index, text in enumerate(said) if "Starting operation" in text)
    assert run.ran("apt-get")


def test_an_installed_and_held_driver_says_nothing_and_changes_nothing_with_y(caplog):
    """Red before: the install's announcement was a command of its own, so an rpm or pacman node whose driver
    was already in place reported the install as a change on every -y run (no change detection there)."""
    import logging

    caplog.set_level(logging.INFO, logger="pyinfra")
    run = ok(
        run_deploy(
            node(
                "arch",
                node_survey=node_lines("6.9.7-arch1-1", pkgbases=["linux"]),
                facts=[
                    (every(PacmanPackages), ["nvidia 550.90.07-1", "nvidia-utils 550.90.07-1"]),
                    ((IgnoredPackages, {"list_command": PACMAN_HOLD_LIST}), [" nvidia-utils nvidia"]),
                ],
            )
        )
    )
    said = [record.getMessage() for record in caplog.records]
    assert not [text for text in said if "installing the NVIDIA driver" in text], said
    assert not run.ran("pacman --noconfirm") and not run.ran("/a IgnorePkg")
    start = next(
        index for index, text in enumerate(said) if "Starting operation" in text and "Install the NVIDIA driver" in text
    )
    status = next(text for text in said[start + 1 :] if "Success" in text or "No changes" in text)
    assert "No changes" in status, said[start:]
