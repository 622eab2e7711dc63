"""
The family table's templates (deploy/distros/families.py ``DriverPackages``) rendered for one host: the
values they may name ({kernel}, {kernel_variant}, {branch}, {dist} ...), the package names of each
kernel module type, its repositories and their keys. Pure: data in, names out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..distros.families import DriverCompanion, DriverPackages, Platform, by_distro_id, node_word
from ..distros.repositories import KeyPin, key_pin
from ..driver.fabric import fabric_of
from ..driver.module_type import OPEN, PROPRIETARY
from ..driver.signing import signing_wanted
from ..operations import download
from ..operations.failure import HostRefusal
from ..settings import Settings, key_url_allowed


class DriverPlanError(HostRefusal):
    """The driver settings do not fit this host: raised before any change."""


def kernel_variant(kernel: str, pattern: str | None, default: str) -> str:
    """The kernel's build its packages are named for (Debian's ``cloud-amd64`` in
    ``6.1.0-28-cloud-amd64``): group 1 of ``pattern`` over the release, else ``default``."""
    match = re.match(pattern, kernel) if pattern else None
    return match.group(1) if match else default


def render(templates: Iterable[str] | None, values: dict[str, Any]) -> tuple[str, ...]:
    """Render templates; those naming a value that is not set ({branch} without a branch) drop out."""
    rendered = []
    for template in templates or ():
        try:
            rendered.append(template.format(**values))
        except KeyError:
            continue
    return tuple(dict.fromkeys(rendered))


def render_repository(
    repository: Mapping[str, str] | None, values: dict[str, Any], settings: Settings
) -> dict[str, Any] | None:
    """A family table's repository for this host: its key's URL (a setting's, else the table's) and the
    pin that key must match (settings.KeyPin); a key that cannot be checked before use is refused."""
    if not repository:
        return None
    baseurl = repository["baseurl"].format(**values)
    pin = key_pin(settings, repository["key"])
    key_url = pin.url or repository["gpgkey"].format(**values, baseurl=baseurl)
    return {
        "name": repository["name"].format(**values),
        "baseurl": baseurl,
        "gpgkey": checked_key_url(key_url, pin),
        "pin": pin,
    }


def checked_key_url(key_url: str, pin: KeyPin) -> str:
    """``key_url``, unless its key cannot be checked before use (deploy/operations/download.py
    ``key_refusal``): refused before any change, naming the setting that fixes it."""
    refusal = download.key_refusal(key_url, pin.fingerprints, pin.setting)
    if refusal and not key_url_allowed(key_url):
        refusal += f"; set {pin.setting.replace('_fingerprint', '_url')} to one"
    if refusal:
        raise DriverPlanError(refusal)
    return key_url


def repository_urls(settings: Settings) -> dict[str, str]:
    """{cuda_repo_url} and {driver_repo_url} of the family table's repositories: NVIDIA's, or a mirror."""
    return {
        "cuda_repo_url": settings.nvidia_cuda_repo_url.rstrip("/"),
        "driver_repo_url": settings.nvidia_driver_repo_url.rstrip("/"),
    }


def template_values(platform: Platform, data: DriverPackages, kernel: str, branch: str | None) -> dict[str, Any]:
    """The values the family table's templates may name, on this host."""
    values = {
        "kernel": node_word(kernel, "the running kernel's release"),
        "deb_arch": platform.deb_arch,
        "arch": platform.cuda_arch,
        "distro_id": platform.distro_id,
        "version_id": platform.version_id,
        "version_nodot": platform.version_id.replace(".", ""),
        "major": platform.major if platform.major is not None else platform.version_id.split(".")[0],
        "minor": (platform.version_id.split(".") + ["0"])[1],
    }
    values["dist"] = (by_distro_id(data.repo_dist, platform.distro_id) or "").format(**values)
    values["kernel_variant"] = kernel_variant(
        kernel, data.kernel_variant_pattern, data.default_kernel_variant.format(**values)
    )
    if branch:
        values["branch"] = branch
    return values


def package_names(
    data: DriverPackages, values: dict[str, Any], platform: Platform, branch: str | None, node: dict[str, Any]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, str] | None, list[str]]:
    """(driver package names, module package names, dnf module stream, notes) of one kernel module
    type's record."""
    if data.module and platform.major in data.module_majors:
        module_name, stream, default_stream = data.module
        module = (module_name, stream.format(branch=branch) if branch else default_stream)
        return render(data.module_packages, values), (), module, []
    use_branch = bool(branch)
    names = render(data.branch_packages if use_branch and data.branch_packages is not None else data.packages, values)
    dependencies = render(
        data.branch_dependencies if use_branch and data.branch_dependencies is not None else data.dependencies, values
    )
    notes = []
    if data.kernel_modules is not None:
        # Arch: a prebuilt module package per stock kernel, DKMS as soon as any other is installed.
        kernels = node.get("kernel_pkgbases") or []
        modules = data.kernel_modules
        if kernels and all(name in modules for name in kernels):
            dependencies = tuple(modules[name] for name in kernels)
        else:
            dependencies = (data.dkms_package,) + tuple(
                data.dkms_headers.format(pkgbase=node_word(name, "a kernel's pkgbase"))
                for name in (kernels or ["linux"])
            )
            if not kernels:
                notes.append("no /usr/lib/modules/*/pkgbase found: assuming the linux kernel, with DKMS")
    return names, dependencies, None, notes


def candidate_names(
    settings: Settings, platform: Platform, node: dict[str, Any], branch: str | None
) -> dict[str, list[str]]:
    """Every package name either kernel module type's plan may name, for reading their state and
    versions ahead."""
    base = platform.family.driver
    values = template_values(platform, base, node.get("kernel") or "", branch)
    names: list[str] = []
    # the signed packages' too where the modules must be signed (deploy/planning/module_signing.py)
    signed = (
        platform.family.module_signing.packages
        if signing_wanted(settings.module_signing, node.get("secure_boot"))
        else {}
    )
    for module_type in (PROPRIETARY, OPEN):
        data = base.for_module_type(module_type)
        records = [data] + ([replace(data, **signed[module_type])] if module_type in signed else [])
        for record in records:
            driver, dependencies, module, _ = package_names(record, values, platform, branch, node)
            names += [*driver, *dependencies]
    fabric: list[str] = []
    if branch:
        for companion in companion_records(settings, base, node):
            fabric += render(companion.names(int(branch)), {**values, "branch": branch})
            fabric += list(getattr(companion, "nvlsm_packages", ()))
    return {"driver": list(dict.fromkeys(names)), "fabric": list(dict.fromkeys(fabric))}


def companion_records(settings: Settings, data: DriverPackages, node: dict[str, Any]) -> list[DriverCompanion]:
    """The family's companion records this host may be planned with (Fabric Manager on an NVSwitch node,
    IMEX with imex_domain), for reading their names ahead; the plan refuses a missing one."""
    records: list[DriverCompanion] = []
    if settings.fabric_manager_install and fabric_of(node).needs_fabric_manager and data.fabric_manager:
        records.append(data.fabric_manager)
    if settings.imex_domain and data.imex:
        records.append(data.imex)
    return records
