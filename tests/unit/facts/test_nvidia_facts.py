"""The nvidia facts' commands run here, and their answers (NodeSurvey's fixtures: tests/facts/nvidia.NodeSurvey/)."""

from __future__ import annotations

import subprocess

from deploy.distros.package_managers import APT, DNF
from deploy.facts.apt import AptSourceFiles
from deploy.facts.nvidia import IgnoredPackages, NodeSurvey, PackagesAvailable, RecommendedDriver
from deploy.operations.packages import PACMAN_HOLD_LIST, pacman_hold_command


def test_nvidia_node_command_runs_here_exits_zero_and_parses_to_this_machines_state():
    """This machine has no GPU and no nvidia module: the real command says so."""
    result = subprocess.run(["sh", "-c", NodeSurvey().command()], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    node = NodeSurvey().process(result.stdout.splitlines())
    assert node["gpus"] == [] and "nvidia" not in node["modules"]
    assert node["kernel"] == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    assert set(node["free_mb"]) == {"/", "/var"} and node["free_mb"]["/"] > 0


def test_kernel_package_bases_are_read_with_or_without_a_final_newline(tmp_path):
    """Arch's /usr/lib/modules/<release>/pkgbase, read by NodeSurvey's own command with the shell's read:
    a file without a final newline (read then fails, having read the name) still counts."""
    modules = tmp_path / "modules"
    (modules / "6.1.1-arch1-1").mkdir(parents=True)
    (modules / "6.1.1-arch1-1" / "pkgbase").write_text("linux")
    (modules / "6.6.1-1-lts").mkdir()
    (modules / "6.6.1-1-lts" / "pkgbase").write_text("linux-lts\n")
    command = NodeSurvey().command()
    assert command.count("/usr/lib/modules") == 3 and "/proc/sys/kernel/osrelease" in command
    command = command.replace("/usr/lib/modules", str(modules)).replace(
        "read -r kernel < /proc/sys/kernel/osrelease", "kernel=6.1.1-arch1-1"
    )
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    node = NodeSurvey().process(result.stdout.splitlines())
    assert (node["kernel_pkgbases"], node["running_pkgbase"], node["kernel"]) == (
        ["linux", "linux-lts"],
        "linux",
        "6.1.1-arch1-1",
    )


def test_packages_available_command_quotes_names_and_parses_answers():
    command = PackagesAvailable().command(APT.available_check, ["linux-headers-6.1.0-18-amd64", "a b"])
    assert "apt-cache show --no-all-versions linux-headers-6.1.0-18-amd64 " in command
    assert "'a b'" in command
    assert PackagesAvailable().process(
        ["package-availability", "no linux-headers-6.1.0-18-amd64", "yes linux-headers-amd64"]
    ) == {"linux-headers-6.1.0-18-amd64": False, "linux-headers-amd64": True}


def test_packages_available_really_checks_with_the_shell():
    # dnf's check against a machine without dnf answers "no", and the command still exits 0
    result = subprocess.run(
        ["sh", "-c", PackagesAvailable().command(DNF.available_check, ["kernel-devel"])], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert PackagesAvailable().process(result.stdout.splitlines()) == {"kernel-devel": False}


def test_ignored_packages_reads_every_ignorepkg_line(tmp_path):
    conf = tmp_path / "pacman.conf"
    conf.write_text("[options]\nIgnorePkg = linux\n#IgnorePkg = old\nIgnorePkg   =  nvidia nvidia-utils\n[core]\n")
    list_command = f"sed -n 's/^[[:space:]]*IgnorePkg[[:space:]]*=//p' {conf}"
    output = subprocess.run(["sh", "-c", IgnoredPackages().command(list_command)], capture_output=True, text=True)
    assert IgnoredPackages().process(output.stdout.splitlines()) == ["linux", "nvidia", "nvidia-utils"]


def test_arch_hold_command_adds_one_ignorepkg_line_under_options(tmp_path):
    conf = tmp_path / "pacman.conf"
    conf.write_text("[options]\nHoldPkg = pacman glibc\n\n[core]\nInclude = /etc/pacman.d/mirrorlist\n")
    command = str(pacman_hold_command(["nvidia", "nvidia-utils"], str(conf)))
    subprocess.run(["sh", "-c", command], check=True)
    assert conf.read_text() == (
        "[options]\nIgnorePkg = nvidia nvidia-utils\nHoldPkg = pacman glibc\n\n[core]\nInclude = /etc/pacman.d/mirrorlist\n"
    )
    listed = subprocess.run(
        ["sh", "-c", PACMAN_HOLD_LIST.replace("/etc/pacman.conf", str(conf))], capture_output=True, text=True
    ).stdout
    assert IgnoredPackages().process(listed.splitlines()) == ["nvidia", "nvidia-utils"]


def test_recommended_driver_keeps_non_empty_lines():
    assert RecommendedDriver().process(
        ["", "nvidia-driver-535-server, (kernel modules provided by nvidia-dkms-535-server)"]
    ) == ["nvidia-driver-535-server, (kernel modules provided by nvidia-dkms-535-server)"]


def test_apt_source_files_round_trip_bytes(tmp_path):
    original = "# a comment\ndeb http://deb.debian.org/debian bookworm main\n\n\ttrailing\tspace \n"
    encoded = subprocess.run(["base64", "-w0"], input=original, capture_output=True, text=True).stdout
    assert AptSourceFiles().process([f"/etc/apt/sources.list {encoded}"]) == {"/etc/apt/sources.list": original}
