"""
One driver version for every package of the driver (and Fabric Manager's), from the versions the
package lists offer and the installed ones: pure, used by the driver stage's preflight and, for
what preflight could not know yet (a repository the run adds), by its install operation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from packaging.version import InvalidVersion, Version

# The NVIDIA device plugin refuses older drivers.
MIN_DRIVER_VERSION = "384.81"


class VersionRefusal(ValueError):
    """No version fits: one line naming the versions found."""


def upstream_version(version: str) -> str:
    """535.216.03-3~deb12u1 / 3:550.54.15-1.el9 -> the driver's own version."""
    return re.split(r"[-_~+]", version.split(":", 1)[-1], maxsplit=1)[0]


def _key(upstream: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(upstream))
    except InvalidVersion:
        return (0, upstream)


def _by_upstream(versions: Iterable[str]) -> dict[str, str]:
    """upstream -> the first (newest listed) full version of it"""
    found: dict[str, str] = {}
    for version in versions:
        found.setdefault(upstream_version(version), version)
    return found


def _found(names: Iterable[str], offered: dict[str, Any]) -> str:
    return "; ".join(
        f"{name} {', '.join(sorted(_by_upstream(offered.get(name, ())), key=_key, reverse=True)) or 'none'}"
        for name in names
    )


def matching(names: Iterable[str], offered: dict[str, Any], upstream: str, what: str) -> dict[str, str]:
    """Each of ``names`` at its offered version of ``upstream``; refuses when one has none."""
    pins = {}
    for name in names:
        version = _by_upstream(offered.get(name, ())).get(upstream)
        if version is None:
            raise VersionRefusal(
                f"{what} needs {name} at the driver's version {upstream}, and the package lists "
                f"offer {_found([name], offered)}"
            )
        pins[name] = version
    return pins


def choose(
    names: Iterable[str], offered: dict[str, Any] | None, installed: dict[str, Any], wanted: str | None, what: str
) -> dict[str, str | None]:
    """
    The version of each of ``names`` (None: leave it to the package manager, whose candidates agree):
    ``wanted`` (nvidia_driver_version) when set; the installed one while every package is installed
    at one version; else the installed driver's version when every package has it, else the newest
    version every package has, refused when there is none, or when it is older than the installed
    driver (never a silent downgrade). ``offered``: {name: versions} from the lists (None: unknown);
    ``installed``: {name: {"version": ...}}.
    """
    names = list(names)
    if wanted:
        return {name: wanted for name in names}
    have = {upstream_version(installed[name]["version"]) for name in names if name in installed}
    if len(have) == 1 and all(name in installed for name in names):
        return {name: None for name in names}
    if not offered or not all(offered.get(name) for name in names):
        return {name: None for name in names}
    per_name = {name: _by_upstream(offered[name]) for name in names}
    newest = {max(found, key=_key) for found in per_name.values()}
    common = set.intersection(*(set(found) for found in per_name.values()))
    running = max(have, key=_key) if have else None
    if running in common:
        return {name: per_name[name][running] for name in names}
    if not have and len(newest) == 1:
        return {name: None for name in names}
    if not common:
        raise VersionRefusal(f"no driver version has every package {what} needs: {_found(names, offered)}")
    chosen = max(common, key=_key)
    if running is not None and _key(running) > _key(chosen):
        example = per_name[names[0]][chosen]
        raise VersionRefusal(
            f"the installed driver {running} is newer than {chosen}, the only version with every package {what} "
            f"needs ({_found(names, offered)}): set nvidia_driver_version={example} to downgrade to it"
        )
    return {name: per_name[name][chosen] for name in names}


def apt_pin_text(sources: Iterable[str], pins: dict[str, Any]) -> str | None:
    """apt preferences holding the driver's source packages at the pinned versions (None: none pinned)."""
    versions = sorted({version for version in pins.values() if version})
    if not sources or not versions:
        return None
    stanzas = [f"Package: {' '.join(sources)}\nPin: version {version}\nPin-Priority: 1001\n" for version in versions]
    return "# Managed by gpu-node (deploy/tasks/driver.py): the NVIDIA driver's packages at one version\n" + "\n".join(
        stanzas
    )
