"""The toolkit stage: the NVIDIA container toolkit from NVIDIA's repository (or a mirror), pinned and held."""

from __future__ import annotations

from typing import Any

from pyinfra import host

from ..distros.families import Platform
from ..distros.package_managers import APT_REPOSITORY_FILE, PACKAGE_MANAGERS, install_packages
from ..distros.repositories import add_repository, key_pin, rpm_repository_text
from ..facts.read_ahead import FactCall, read
from ..foundations.pyinfra_api import deploy
from ..operations import download
from ..operations import packages as package_ops
from ..operations.failure import HostRefusal
from ..planning.findings import StepCheck
from ..settings import Settings

# Pinned together: the toolkit refuses mixed versions of its own parts.
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
REPOSITORY_NAME = "nvidia-container-toolkit"
APT_KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.asc"
APT_SOURCE = APT_REPOSITORY_FILE.format(name=REPOSITORY_NAME)
HEADER = "# Managed by gpu-node (deploy/tasks/toolkit.py)\n"


def repository_url(settings: Settings, platform: Platform) -> str:
    return f"{settings.nvidia_toolkit_repo_url.rstrip('/')}/{platform.family.toolkit_repo_path}"


def apt_source_text(settings: Settings, platform: Platform) -> str:
    # The key URL and its pin are part of the file so that changing either checks the key again.
    return (
        HEADER
        + f"# signing key: {settings.nvidia_toolkit_gpgkey_url} ({', '.join(settings.nvidia_toolkit_gpgkey_fingerprint)})\n"
        + f"deb [signed-by={APT_KEYRING}] {repository_url(settings, platform)} /\n"
    )


def rpm_repository(settings: Settings, platform: Platform) -> dict[str, str]:
    """The toolkit's RPM repository (name, baseurl, gpgkey) as distros.add_repository takes it."""
    return {
        "name": REPOSITORY_NAME,
        "baseurl": repository_url(settings, platform),
        "gpgkey": settings.nvidia_toolkit_gpgkey_url,
    }


def rpm_repo_text(settings: Settings, platform: Platform) -> str:
    """The toolkit's repository file as NVIDIA publishes it (metadata signature checked, packages not),
    its key the checked copy."""
    key_file = platform.family.package_manager.key_file
    if key_file is None:  # (every RPM manager has one)
        raise ValueError(f"{platform.family.package_manager.name} takes no repository key")
    return rpm_repository_text(
        HEADER,
        REPOSITORY_NAME,
        repository_url(settings, platform),
        key_file.format(name=REPOSITORY_NAME),
        settings.nvidia_toolkit_gpgkey_url,
        settings.nvidia_toolkit_gpgkey_fingerprint,
        package_check=False,
        metadata_check=True,
    )


def wanted_packages(settings: Settings) -> dict[str, str | None]:
    return {name: settings.nvidia_toolkit_version for name in TOOLKIT_PACKAGES}


def reads(settings: Settings) -> list[FactCall]:
    """The facts the repository and apt paths decide on, for preflight to read ahead: the same calls
    their operations make (harmless elsewhere: a missing file reads as absent, and without dpkg-query
    the package fact reads nothing)."""
    rpm_sources = [
        download.source_read(
            manager.repository_file.format(name=REPOSITORY_NAME), manager.key_file.format(name=REPOSITORY_NAME)
        )
        for manager in PACKAGE_MANAGERS
        if manager.repository_file and manager.key_file
    ]
    return [download.source_read(APT_SOURCE, APT_KEYRING), *rpm_sources, package_ops.deb_states_read(TOOLKIT_PACKAGES)]


def pin_findings(settings: Settings, platform: Platform) -> list[str]:
    """Why ``nvidia_toolkit_version`` cannot be honoured on ``platform`` (empty: it can), for
    preflight to refuse the host before any change."""
    manager = platform.family.package_manager
    if settings.nvidia_toolkit_version is None or platform.family.toolkit_repo_path is not None or manager.can_pin:
        return []
    return [
        f"nvidia_toolkit_version={settings.nvidia_toolkit_version!r} cannot be pinned on "
        f"{platform.distro_id}: {manager.name} installs only the current version; unset it (or hold it by hand)"
    ]


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """What preflight checks for this stage (deploy/stages.py): a pin the family cannot honour."""
    return StepCheck(errors=pin_findings(settings, platform))


@deploy("NVIDIA container toolkit")
def toolkit(settings: Settings, platform: Platform) -> None:
    manager = platform.family.package_manager
    pinned = settings.nvidia_toolkit_version is not None
    lock_timeout = settings.apt_lock_timeout

    if platform.family.toolkit_repo_path is None:
        # The distribution ships the toolkit (Arch's extra repository), one package at its version.
        for finding in pin_findings(settings, platform):  # preflight refused it already; never install unpinned
            raise HostRefusal(finding)
        install_packages(
            manager,
            "Install the NVIDIA container toolkit (the distribution's package)",
            [TOOLKIT_PACKAGES[0]],
            lock_timeout=lock_timeout,
        )
        return

    pin = key_pin(settings, "nvidia_toolkit")
    if manager.signed_by_keyring:
        # Operations only for what differs (their own facts, read ahead by preflight): a fleet's
        # no-op re-run pays pyinfra's per-operation cost for nothing otherwise.
        source_text = apt_source_text(settings, platform)
        digests = read(host, download.source_read(APT_SOURCE, APT_KEYRING))
        states = read(host, package_ops.deb_states_read(TOOLKIT_PACKAGES))
        source = download.source_state(digests, APT_SOURCE, source_text, APT_KEYRING)
        if source == download.IN_PLACE and not package_ops.apt_install_needed(
            states, wanted_packages(settings), pinned
        ):
            return
        download.signed_apt_source(
            name="Add the NVIDIA container toolkit repository (signed-by keyring)",
            path=APT_SOURCE,
            content=source_text,
            keyring=APT_KEYRING,
            key_url=settings.nvidia_toolkit_gpgkey_url,
            fingerprints=pin.fingerprints,
            fingerprint_setting=pin.setting,
            repository=repository_url(settings, platform),
            timeout=settings.download_timeout,
            lock_timeout=lock_timeout,
        )
    else:
        add_repository(
            manager,
            "Add the NVIDIA container toolkit repository",
            rpm_repository(settings, platform),
            pin,
            timeout=settings.download_timeout,
            lock_timeout=lock_timeout,
            header=HEADER,
            package_check=False,
            metadata_check=True,
        )
    install_packages(
        manager,
        "Install the NVIDIA container toolkit",
        wanted_packages(settings),
        hold=pinned,
        lock_timeout=lock_timeout,
    )
