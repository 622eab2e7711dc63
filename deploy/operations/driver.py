"""
Operations of the driver stage: apt components, kernel headers, the reboot marker and the
end-of-run report. Package installs go through the family's package manager (deploy/distros/package_managers.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Container, Sequence
from typing import TYPE_CHECKING, Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation

from ..driver.apt_components import add_apt_components
from ..driver.install_failures import install_failure
from ..driver.versions import VersionRefusal, apt_pin_text, choose, matching, upstream_version
from ..facts.apt import AptSourceFiles
from ..facts.nvidia import NodeSurvey, PackagesAvailable
from ..facts.packages import PackageVersions, apt_listing
from ..facts.read_ahead import known_fact, read
from ..foundations import node_text, redact
from ..foundations.pyinfra_api import Commands
from ..foundations.run_state import per_run
from ..node import records as node_records
from ..reports.node_report import DriverNote, DriverNotes
from . import probes
from .failure import fail_host, failing_command
from .files import put_text
from .package_manager import PackageManager
from .packages import apt_holds, apt_lock_option, apt_sources_changed, recorded_install, refresh_apt_lists
from .progress import announcing

if TYPE_CHECKING:
    from pyinfra.api import Host, State

REBOOT_MARKER = "/run/reboot-required"
REBOOT_PACKAGES = "/run/reboot-required.pkgs"


@operation()
def enable_apt_components(codename: str, components: Sequence[str]) -> Commands:
    """Enable apt components for the release's Debian archive entries, without duplicating any."""
    sources = known_fact(host, AptSourceFiles)  # read ahead by the driver stage's preflight
    try:
        for path, text in sorted(sources.items()):
            node_text.checked(text, path)
    except node_text.UnreadableText as error:
        yield failing_command(f"{error}: apt's sources were left as they are")
        return
    changed, entries = add_apt_components(sources, codename, components)
    if not entries:
        yield failing_command(
            f"no Debian archive entry for {codename} (with component main) in /etc/apt/sources.list "
            f"or /etc/apt/sources.list.d/: add one, then {' '.join(components)} can be enabled"
        )
        return
    if not changed:
        host.noop(f"{' '.join(components)} are enabled for {codename}")
        return
    for path, text in changed.items():
        yield from put_text._inner(dest=path, content=text)
    apt_sources_changed()


@operation()
def install_first_available(
    manager: PackageManager, candidates: Sequence[str], lock_timeout: int, what: str = "package"
) -> Commands:
    """
    Install the first of ``candidates`` the package manager has (e.g. the running kernel's
    headers, else the kernel variant's meta package); nothing when one of them is installed already.
    The choice is made when the operation runs, after the lists are refreshed.
    """
    installed = known_fact(host, manager.installed_fact)
    have = [name for name in candidates if name in installed]
    if have:
        host.noop(f"{what} {have[0]} is installed")
        return
    if manager.refresh_lists:
        yield from manager.refresh_lists(lock_timeout)
    available = host.get_fact(PackagesAvailable, check=manager.available_check, packages=list(candidates))
    chosen = next((name for name in candidates if available.get(name)), None)
    if chosen is None:
        yield failing_command(
            f"no {what} to install: none of {', '.join(candidates)} is in the {manager.name} repositories"
        )
        return
    if chosen != candidates[0]:
        logger.warning(
            f"{host.print_prefix}{candidates[0]} is not in the {manager.name} repositories: installing {chosen}; "
            "the driver's module is built for that kernel and loads once the node boots it"
        )
    yield from manager.install._inner(packages={chosen: None}, lock_timeout=lock_timeout)


def module_current(node: dict[str, Any]) -> bool:
    """The loaded nvidia module is the one the installed driver built."""
    return bool(node["loaded_version"]) and node["loaded_version"] == node["built_version"]


@operation()
def mark_reboot_required(packages: Sequence[str]) -> Commands:
    """
    After a driver change: unless the loaded nvidia module is the new one, mark the node as
    needing a reboot (Debian's /run/reboot-required convention, cleared by the reboot itself).
    """
    node = host.get_fact(NodeSurvey)
    if module_current(node):
        host.noop(f"nvidia module {node['loaded_version']} is loaded")
        return
    redact.log_file_note(host, REBOOT_MARKER, f"the reboot marker, naming {', '.join(packages)} in {REBOOT_PACKAGES}")
    yield StringCommand(
        "echo",
        QuoteString("*** System restart required ***"),
        ">",
        REBOOT_MARKER,
        "&&",
        "printf",
        QuoteString("%s\\n"),
        *[QuoteString(name) for name in packages],
        ">>",
        REBOOT_PACKAGES,
    )


def reboot_required(node: dict[str, Any], driver_packages: Collection[str]) -> bool:
    """The system asks for a reboot because of one of our driver packages."""
    return bool(node["reboot_required"] and set(node["reboot_packages"]) & set(driver_packages))


def awaits_reboot(node: dict[str, Any], driver_packages: Collection[str]) -> bool:
    """A GPU node whose driver changed (``reboot_required``): its module loads at the next boot, and
    its GPUs are unusable until then. Without a GPU, a reboot loads no module."""
    return bool(node["gpus"]) and reboot_required(node, driver_packages)


def driver_state_lines(node: dict[str, Any], require_gpu: bool, driver_packages: Collection[str]) -> list[str]:
    """What the end-of-run report says about the driver on this node."""
    lines = []
    if not node["gpus"]:
        lines.append(
            "no NVIDIA GPU on the PCI bus: the driver has nothing to drive here"
            + (" (require_gpu=true)" if require_gpu else "")
        )
    ours = sorted(set(node["reboot_packages"]) & set(driver_packages))
    if reboot_required(node, driver_packages):
        lines.append(
            f"reboot required: the NVIDIA driver changed ({', '.join(ours)}) and its kernel module "
            "is not loaded; reboot the node (or rerun with reboot_allowed=true)"
        )
    elif node["loaded_version"]:
        lines.append(f"NVIDIA kernel module {node['loaded_version']} is loaded")
    return lines


@operation()
def report_driver_state(require_gpu: bool, driver_packages: Collection[str]) -> Commands:
    """Log the driver's state (no GPU, reboot required) as the last word of the run; changes nothing.
    Preflight's reading serves unless something changed on the host since."""
    node = known_fact(host, NodeSurvey)
    per_run(host.state, DriverNotes)[host.name] = DriverNote(
        no_gpu=not node["gpus"], reboot_required=reboot_required(node, driver_packages)
    )
    for line in driver_state_lines(node, require_gpu, driver_packages):
        logger.warning(f"{host.print_prefix}{line}")
    host.noop("; ".join(driver_state_lines(node, require_gpu, driver_packages)) or "driver state reported")
    return
    yield  # a generator that yields nothing


APT_INSTALL = (
    'DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" '
    '-o Dpkg::Options::="--force-confold" install'
)


def _install_naming_dkms_failures(
    state: State, host: Host, command: StringCommand, leftovers: tuple[str, ...] = ()
) -> bool:
    """Run the driver's apt-get install; when it fails, fail the host with one line (install_failure).
    ``leftovers``: the other kernel module type's packages not installed; one a failed install left half-configured
    (not in DebPackageStates) is removed in this transaction too."""
    if leftovers:
        _, found = host.run_shell_command(
            StringCommand(
                "dpkg-query",
                "-W",
                "-f",
                QuoteString("${db:Status-Status} ${Package}\\n"),
                *[QuoteString(name) for name in leftovers],
                "2>/dev/null",
                "|| true",
            ),
            **probes.connector_arguments(host),
        )
        partial = [
            words[1]
            for words in map(str.split, found.stdout_lines)
            if len(words) == 2 and words[0] not in ("not-installed", "config-files")
        ]
        command = StringCommand(command, *[QuoteString(f"{name}-") for name in partial])
    succeeded, output = host.run_shell_command(
        command, print_output=state.print_output, print_input=state.print_input, **probes.connector_arguments(host)
    )
    if succeeded:
        return True
    return fail_host(state, host, install_failure(output.output_lines))


def resolved_versions(resolve: dict[str, Any], states: dict[str, Any]) -> dict[str, str | None]:
    """The versions the install operation chooses from the refreshed lists (``install_driver``'s
    ``resolve``); with ``resolve["fabric"]`` (deploy/distros/families.py's DriverCompanion records:
    Fabric Manager, IMEX) their packages are named for the driver's branch and chosen at the driver's
    version, or VersionRefusal names what the lists offer."""
    names = list(resolve["names"])
    offered = host.get_fact(PackageVersions, listing=apt_listing(), packages=names)
    companions = resolve.get("fabric")
    if not companions:
        return choose(names, offered, states, None, resolve["what"])
    driver = names[0]
    what = " and ".join(record.what for record in companions)
    if not offered.get(driver):
        raise VersionRefusal(
            f"{what} must be at the driver's version, and the apt lists name no version "
            f"of {driver} (after enabling its components and refreshing them)"
        )
    branch = int(upstream_version(offered[driver][0]).split(".")[0])
    named = {
        record.what: [template.format(branch=branch) for template in record.names(branch)] for record in companions
    }
    every_name = [name for record_names in named.values() for name in record_names]
    companions_offered = host.get_fact(PackageVersions, listing=apt_listing(), packages=every_name)
    offered = {**offered, **companions_offered}
    pins = choose(names + every_name, offered, states, None, resolve["what"])
    upstream = upstream_version(pins[driver] or offered[driver][0])
    for record_what, record_names in named.items():
        pins.update(matching(record_names, offered, upstream, record_what))
    return pins


def driver_install_message(manager: str, packages: dict[str, Any]) -> str:
    """What the driver's install says as it starts (it can take minutes)."""
    return (
        f"installing the NVIDIA driver with {manager} ({', '.join(sorted(packages))}): its kernel module is "
        "built for the running kernel (DKMS or the distribution's module package), typically 2 to 10 minutes; "
        "a failed build is named with its log (/var/lib/dkms/.../make.log)"
    )


@operation()
def install_driver(
    manager: PackageManager,
    packages: dict[str, Any],
    remove: Sequence[str],
    state_names: Sequence[str],
    lock_timeout: int,
    resolve: dict[str, Any] | None = None,
) -> Commands:
    """
    Install the driver's ``packages`` ({name: version or None}) and hold them, removing the other
    kernel module type's packages (``remove``) in the same apt transaction (``name-``), so the
    node never has a mix of both. ``state_names``: the DebPackageStates read preflight made ahead.
    ``resolve`` (apt): the versions preflight could not know (lists it had not yet: components or a
    repository this run adds) are chosen here, after the refresh: {"names", "what", "pin_sources", "pin_path",
    "fabric"} (``resolved_versions``); a refusal fails the host before anything is installed.
    """
    if manager.forced_removal is not None:
        installed: Container[str] = host.get_fact(manager.installed_fact)
        gone = sorted(name for name in remove if name in installed)
        if gone:
            releases = manager.released_holds(gone, lock_timeout)
            # rpm waits without end for a busy dnf's or zypper's transaction, pacman fails at once: the
            # bounded wait first, as before their installs
            yield StringCommand(manager.lock.script(lock_timeout))
            yield StringCommand(*manager.forced_removal, *[QuoteString(name) for name in gone])
            yield from releases
        commands = list(manager.install._inner(packages=packages, hold=True, lock_timeout=lock_timeout))
        if commands:
            yield announcing(driver_install_message(manager.name, packages))
        yield from commands
        return
    # apt: the other type's packages go in the install's own transaction (``name-``)
    if manager.states_read is None:  # every manager without a forced removal reads its states ahead (apt)
        raise TypeError(f"{manager.name}: no forced removal and no read of its packages' states")
    states = read(host, manager.states_read(state_names))
    needed = [
        name
        for name, version in packages.items()
        if name not in states or (version and states[name]["version"] != version)
    ]
    gone = sorted(name for name in remove if name in states)
    if needed or gone:
        yield from refresh_apt_lists(lock_timeout)
        if resolve:
            try:
                pins = resolved_versions(resolve, states)
            except VersionRefusal as refusal:
                yield failing_command(str(refusal))
                return
            packages = {**packages, **{name: version for name, version in pins.items() if version}}
            needed = [
                name
                for name, version in packages.items()
                if name not in states or (version and states[name]["version"] != version)
            ]
            text = apt_pin_text(resolve["pin_sources"], {name: pins[name] for name in resolve["names"]})
            if text:
                yield StringCommand(node_records.record_file(shlex.quote(resolve["pin_path"])))
                yield StringCommand("printf", "%s", QuoteString(text), ">", QuoteString(resolve["pin_path"]))
                yield StringCommand(node_records.LIBRARY + "gn_wrote_file", QuoteString(resolve["pin_path"]))
        words = [f"{name}={packages[name]}" if packages[name] else name for name in needed]
        command = StringCommand(
            APT_INSTALL,
            apt_lock_option(lock_timeout),
            "--allow-change-held-packages",
            "--allow-downgrades",
            *[QuoteString(word) for word in words + [f"{name}-" for name in gone]],
        )
        leftovers = tuple(name for name in remove if name not in gone)
        yield announcing(driver_install_message(manager.name, packages))
        yield from recorded_install(
            manager.installed_listing, [FunctionCommand(_install_naming_dkms_failures, (command, leftovers), {})]
        )
    else:
        host.noop(
            "driver packages are installed: " + ", ".join(f"{n} {states[n]['version']}" for n in sorted(packages))
        )
    to_hold = sorted(name for name in packages if name in needed or not states[name]["held"])
    if to_hold:
        yield from apt_holds(to_hold, states)
