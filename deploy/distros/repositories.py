"""
Signed package repositories: what a repository's key must be (``KeyPin``, from the settings that pin
it), and an RPM repository added with its key checked first (dnf, zypper).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyinfra.api.exceptions import PyinfraError

from ..operations import download
from .package_managers import PackageManager, repository_check

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from ..settings import Settings


@dataclass(frozen=True)
class KeyPin:
    """What a repository's signing key must be before anything trusts it: one of ``fingerprints``
    (primary keys, as ``gpg --with-colons`` prints them), which ``setting`` sets (a refusal names it);
    ``url``: where the key is, when a setting says (None: beside the repository)."""

    fingerprints: tuple[str, ...]
    setting: str
    url: str | None = None


def key_pin(settings: Settings, repository: str) -> KeyPin:
    """What the key of ``repository`` ("nvidia_toolkit", "nvidia_cuda", "nvidia_driver") must be: the
    fingerprints and key URL its settings give."""
    return KeyPin(
        fingerprints=getattr(settings, f"{repository}_gpgkey_fingerprint"),
        setting=f"{repository}_gpgkey_fingerprint",
        url=getattr(settings, f"{repository}_gpgkey_url"),
    )


def rpm_repository_text(
    header: str,
    name: str,
    baseurl: str,
    key_path: str,
    key_url: str,
    fingerprints: tuple[str, ...],
    *,
    package_check: bool = True,
    metadata_check: bool = False,
) -> str:
    """A dnf/zypper repository file whose key is the checked copy at ``key_path`` of the key at
    ``key_url``; both and the pinned fingerprints are in it, so that changing either checks the key
    again. Packages' signatures checked with ``package_check``, the metadata's with ``metadata_check``."""
    return (
        header
        + f"# signing key: {key_url} ({', '.join(fingerprints)})\n"
        + "\n".join(
            [
                f"[{name}]",
                f"name={name}",
                f"baseurl={baseurl}",
                f"repo_gpgcheck={int(metadata_check)}",
                f"gpgcheck={int(package_check)}",
                "enabled=1",
                f"gpgkey=file://{key_path}",
                "sslverify=1",
                "",
            ]
        )
    )


RPM_REPOSITORY_HEADER = "# Managed by gpu-node\n"


def add_repository(
    manager: PackageManager,
    name: str,
    repository: Mapping[str, str],
    pin: KeyPin,
    *,
    timeout: int,
    lock_timeout: int,
    header: str = RPM_REPOSITORY_HEADER,
    package_check: bool = True,
    metadata_check: bool = False,
) -> OperationMeta:
    """
    Add an RPM repository (name, baseurl, gpgkey: its key's URL, which ``pin.url`` replaces when set)
    whose key is checked against ``pin`` and imported alone, with signature checks
    (deploy/operations/download.py ``signed_rpm_repository``).
    """
    check = repository_check(manager, lock_timeout)
    if manager.key_file is None or manager.repository_file is None or check is None:
        raise PyinfraError(f"{manager.name} takes no repository of this kind: {repository['name']}")
    key_path = manager.key_file.format(name=repository["name"])
    key_url = pin.url or repository["gpgkey"]
    return download.signed_rpm_repository(
        name=name,
        path=manager.repository_file.format(name=repository["name"]),
        content=rpm_repository_text(
            header,
            repository["name"],
            repository["baseurl"],
            key_path,
            key_url,
            pin.fingerprints,
            package_check=package_check,
            metadata_check=metadata_check,
        ),
        key_path=key_path,
        key_url=key_url,
        fingerprints=pin.fingerprints,
        fingerprint_setting=pin.setting,
        check=check,
        timeout=timeout,
    )
