"""Stage 4: the NVIDIA container toolkit from NVIDIA's repository (or a mirror), pinned and held."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import pacman, zypper

from deploy.distros import Platform
from deploy.facts.combined import known_fact
from deploy.facts.files import FileDigests
from deploy.facts.packages import DebPackageStates
from deploy.operations import download, files
from deploy.operations import packages as package_ops
from deploy.settings import Settings

# Pinned together: the toolkit refuses mixed versions of its own parts.
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
APT_KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.asc"
APT_SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
RPM_REPO_FILE = {
    "dnf": "/etc/yum.repos.d/nvidia-container-toolkit.repo",
    "zypper": "/etc/zypp/repos.d/nvidia-container-toolkit.repo",
}
HEADER = "# Managed by gpu-node (deploy/tasks/toolkit.py)\n"


def repository_url(settings: Settings, platform: Platform) -> str:
    return f"{settings.nvidia_toolkit_repo_url.rstrip('/')}/{platform.family.toolkit_repo_path}"


def apt_source_text(settings: Settings, platform: Platform) -> str:
    # The key URL is part of the file so that changing it re-downloads the key.
    return (
        HEADER
        + f"# signing key: {settings.nvidia_toolkit_gpgkey_url}\n"
        + f"deb [signed-by={APT_KEYRING}] {repository_url(settings, platform)} /\n"
    )


def rpm_repo_text(settings: Settings, platform: Platform) -> str:
    return HEADER + "\n".join(
        [
            "[nvidia-container-toolkit]",
            "name=nvidia-container-toolkit",
            f"baseurl={repository_url(settings, platform)}",
            "repo_gpgcheck=1",
            "gpgcheck=0",
            "enabled=1",
            f"gpgkey={settings.nvidia_toolkit_gpgkey_url}",
            "sslverify=1",
            "",
        ]
    )


def wanted_packages(settings: Settings) -> dict[str, str | None]:
    return {name: settings.nvidia_toolkit_version for name in TOOLKIT_PACKAGES}


def reads(settings: Settings) -> list[tuple[type, dict]]:
    """The facts the apt path decides on, for preflight to read ahead (harmless elsewhere: a
    missing file reads as absent, and without dpkg-query the package fact reads nothing)."""
    return [
        (FileDigests, {"paths": [APT_SOURCE, APT_KEYRING]}),
        (DebPackageStates, {"packages": sorted(TOOLKIT_PACKAGES)}),
    ]


@deploy("NVIDIA container toolkit")
def toolkit(settings: Settings, platform: Platform):
    manager = platform.family.package_manager
    pinned = settings.nvidia_toolkit_version is not None

    if manager == "apt":
        # Operations only for what differs (their own facts, read ahead by preflight): a fleet's
        # no-op re-run pays pyinfra's per-operation cost for nothing otherwise.
        source_text = apt_source_text(settings, platform)
        digests = known_fact(host, FileDigests, paths=[APT_SOURCE, APT_KEYRING])
        states = known_fact(host, DebPackageStates, packages=sorted(TOOLKIT_PACKAGES))
        source = download.source_state(digests, APT_SOURCE, source_text, APT_KEYRING)
        if source == download.IN_PLACE and not package_ops.apt_install_needed(states, wanted_packages(settings), pinned):
            return
        download.signed_apt_source(
            name="Add the NVIDIA container toolkit repository (signed-by keyring)",
            path=APT_SOURCE,
            content=source_text,
            keyring=APT_KEYRING,
            key_url=settings.nvidia_toolkit_gpgkey_url,
            repository=repository_url(settings, platform),
            timeout=settings.download_timeout,
        )
        package_ops.apt_install(
            name="Install the NVIDIA container toolkit",
            packages=wanted_packages(settings),
            hold=pinned,
        )
    elif manager in ("dnf", "zypper"):
        files.put_text(
            name="Add the NVIDIA container toolkit repository",
            dest=RPM_REPO_FILE[manager],
            content=rpm_repo_text(settings, platform),
        )
        if manager == "dnf":
            package_ops.dnf_install(
                name="Install the NVIDIA container toolkit",
                packages=wanted_packages(settings),
                hold=pinned,
            )
        else:
            version = settings.nvidia_toolkit_version
            zypper.packages(
                name="Install the NVIDIA container toolkit",
                packages=[f"{name}={version}" if version else name for name in TOOLKIT_PACKAGES],
                extra_global_install_args="--gpg-auto-import-keys",
            )
            if pinned:
                package_ops.zypper_add_locks(
                    name="Hold the NVIDIA container toolkit (zypper locks)",
                    packages=list(TOOLKIT_PACKAGES),
                )
    elif manager == "pacman":
        if pinned:
            raise PyinfraError(
                f"nvidia_toolkit_version={settings.nvidia_toolkit_version!r} cannot be pinned on "
                f"{platform.distro_id}: Arch is rolling; unset it (or use IgnorePkg in pacman.conf)"
            )
        pacman.packages(
            name="Install the NVIDIA container toolkit (Arch's extra repository)",
            packages=["nvidia-container-toolkit"],
        )

