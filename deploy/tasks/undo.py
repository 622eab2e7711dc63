"""
Take gpu-node back off a node (deploy/undo.py): from the records gpu-node kept as it changed the node
(deploy/node/records.py), every file put back (deploy/operations/undo.py), the units it enabled put
back to their state before (those it created itself disabled, their files gone), the holds it placed released, the keys it imported taken out, with
``undo_remove_packages`` the packages it installed removed; then its records. One line per file
says what happened to it and why. A node gpu-node never changed has no records: nothing happens.
The module signing key gpu-node generated stays, and DKMS's drop-in naming it stays with the driver
(``kept_for_dkms``). The folders gpu-node made go where nothing else is left in them
(``folders_gpu_node_made``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import PurePosixPath
from typing import Any

from pyinfra import host, logger
from pyinfra.facts.server import Arch, LinuxDistribution
from pyinfra.operations import systemd

from ..distros.families import Platform, detect_platform
from ..distros.signing import ModuleSigning
from ..driver.fabric import NVLINK5_MODULES_LOAD_PATH
from ..driver.signing import GENERATED_CERT, GENERATED_FOLDER, GENERATED_KEY
from ..facts.access import HostAccess
from ..facts.read_ahead import FactCall, read, read_facts
from ..facts.records import NodeRecords
from ..foundations.pyinfra_api import deploy
from ..node import records as node_records
from ..operations import devices, kernel, units
from ..operations import undo as undo_ops
from ..operations.cdi import REFRESH_ENV
from ..operations.failure import HostRefusal
from ..operations.undo import FileUndo
from ..planning.driver_plan import APT_PIN_PATH, CUDA_PROFILE_PATH
from ..settings import Settings
from . import kernel as kernel_stage
from . import toolkit as toolkit_stage
from .preflight import access_refusal

# gpu-node's own files by path, known by their first line where no record names them (a run of
# gpu-node before it kept records): the kernel stage's, the device links', the driver's apt pin and
# CUDA profile, the CDI refresh's environment, the toolkit's apt source.
OWN_FILES = (
    kernel_stage.MODULES_LOAD_PATH,
    kernel_stage.SYSCTL_PATH,
    kernel_stage.BLACKLIST_PATH,
    NVLINK5_MODULES_LOAD_PATH,
    devices.LINKS_SCRIPT,
    devices.UDEV_RULE,
    APT_PIN_PATH,
    CUDA_PROFILE_PATH,
    REFRESH_ENV,
    toolkit_stage.APT_SOURCE,
)
OWN_HEADERS = ("# Managed by gpu-node", "#!/bin/sh\n# Managed by gpu-node")


def records_read() -> FactCall:
    return (NodeRecords, {"own_files": list(OWN_FILES)})


@dataclass(frozen=True)
class UndoFindings:
    platform: Platform
    records: dict[str, Any]  # NodeRecords
    files: list[FileUndo] = field(default_factory=list)  # per recorded file
    signing_key: str | None = None  # the line saying the module signing key stays, where no file's line does
    folders: list[FolderUndo] = field(default_factory=list)  # per folder gpu-node made, deepest first


@dataclass(frozen=True)
class FolderUndo:
    """What the undo run does to a folder gpu-node made, and its one line saying so and why."""

    path: str
    remove: bool
    line: str


def read_node(settings: Settings) -> UndoFindings:
    """The node and gpu-node's records on it, in one remote command; HostRefusal (one line) for a
    node gpu-node cannot work on (not Linux, not root, no systemd, an unsupported distribution)."""
    facts = read_facts(host, HostAccess, LinuxDistribution, Arch, read_ahead=[records_read()])
    refusal = access_refusal(facts["HostAccess"])
    if refusal:
        raise HostRefusal(refusal)
    platform = detect_platform(facts["LinuxDistribution"], facts["Arch"])
    records = read(host, records_read())
    refusal = records_refusal(records)
    if refusal:
        raise HostRefusal(refusal)
    signing = platform.family.module_signing
    files = [kept_for_dkms(undo_ops.decide(record), settings, signing, records) for record in records["files"]]
    covered = any(undo.path == signing.dkms_config and undo.action == undo_ops.KEEP for undo in files)
    return UndoFindings(
        platform,
        records,
        files,
        KEY_STAYS if records["signing_keys"] and not covered else None,
        folders_gpu_node_made(records, files),
    )


KEY_STAYS = (
    f"the module signing key {GENERATED_KEY} and its certificate {GENERATED_CERT} stay: the firmware's MOK "
    "list may hold the certificate, and removing the files would not take it out; to: "
    f"mokutil --delete {GENERATED_CERT} (confirmed at the console at the next boot), then rm -r {GENERATED_FOLDER}"
)


def kept_for_dkms(undo: FileUndo, settings: Settings, signing: ModuleSigning, records: dict[str, Any]) -> FileUndo:
    """DKMS's module signing drop-in (deploy/tasks/module_signing.py) kept as it is while the driver's
    DKMS packages stay: DKMS builds the NVIDIA module for every new kernel, unsigned without it, and a
    Secure Boot kernel refuses an unsigned module. They go only where gpu-node installed them (its
    package records) and undo_remove_packages removes them."""
    if undo.path != signing.dkms_config or not undo.changes:
        return undo
    installed = [name for name in records["installed"] if re.fullmatch(signing.dkms_driver_packages, name)]
    if settings.undo_remove_packages and installed:
        return undo
    stays = (
        "the NVIDIA driver stays (undo_remove_packages=false)"
        if not settings.undo_remove_packages
        # a DKMS driver the node had before gpu-node is no package gpu-node installed: the undo keeps it
        else "the NVIDIA driver's DKMS packages stay (gpu-node did not install them: the node had them before)"
    )
    why = (
        stays + ", and DKMS signs the module it builds for each new kernel with {key}, which Secure Boot would "
        "refuse unsigned; to remove {them} by hand: rm {paths}"
    )
    if records["signing_keys"]:
        line = f"{undo.path}: left as it is, with the module signing key {GENERATED_KEY} and its certificate: " + (
            why.format(key="them", them="them", paths=f"{undo.path} {GENERATED_KEY} {GENERATED_CERT}")
        )
    else:
        line = f"{undo.path}: left as it is: " + why.format(key="the key it names", them="it", paths=undo.path)
    return FileUndo(undo.record, undo_ops.KEEP, line)


def folders_gpu_node_made(records: dict[str, Any], files: list[FileUndo]) -> list[FolderUndo]:
    """Each folder gpu-node made (its records; one that was there before has none), deepest first:
    removed where nothing is left in it once the undo's files (and the folders in it it removes) go,
    left as it is where anything else is."""
    going = {undo.path for undo in files if undo.action == undo_ops.REMOVE} | set(own_files_without_records(records))
    decided: list[FolderUndo] = []
    for path, found in sorted(records["created_folders"].items(), reverse=True):
        staying = sorted(name for name in found["entries"] if f"{path}/{name}" not in going)
        if found["more"] or staying:
            held = ", ".join(staying) + (", ..." if found["more"] else "")
            decided.append(FolderUndo(path, False, f"{path}: left as it is: gpu-node made it, but it holds {held}"))
        else:
            going.add(path)
            decided.append(FolderUndo(path, True, f"{path}: removed: gpu-node made it, and nothing else is in it"))
    return decided


def records_refusal(records: dict[str, Any]) -> str | None:
    """One line when the records folder is not root's alone (node_records.ROOT_ALONE): another user
    could have written records there, which the undo would act on as root."""
    folder = records["folder"]
    if not records["records"] or folder == node_records.ROOT_ALONE:
        return None
    uid, _, mode = (folder or "").partition(" ")
    what = "a symbolic link" if folder == "link" else f"owned by uid {uid} with mode {mode}"
    return (
        f"{node_records.RECORDS_DIR} is {what}: the undo acts only on records in a folder root owns with "
        "mode 0700 (another user could have written these); nothing changed"
    )


# Where gpu-node writes units of its own (the first-boot unit, pull mode's timer and service).
UNIT_FOLDERS = ("/etc/systemd/system",)


def units_gpu_node_created(records: dict[str, Any], files: list[FileUndo]) -> dict[str, FileUndo]:
    """unit -> the FileUndo of its file, for each recorded unit whose file gpu-node created (nothing was
    there before) and whose file the undo does not keep: the unit goes, whatever systemctl said of it
    when it was recorded."""
    created = {}
    for undo in files:
        path = PurePosixPath(undo.path)
        if (
            undo.record["absent"]
            and undo.action != undo_ops.KEEP
            and str(path.parent) in UNIT_FOLDERS
            and path.name in records["units"]
        ):
            created[path.name] = undo
    return created


def own_files_without_records(records: dict[str, Any]) -> list[str]:
    recorded = {record["path"] for record in records["files"]}
    return sorted(
        path for path, head in records["own"].items() if path not in recorded and head.startswith(OWN_HEADERS)
    )


def say(line: str, kept: bool = False) -> None:
    # Once, as the run prepares (default mode prepares once too: the same operations, not these lines).
    (logger.warning if kept else logger.info)(f"{host.print_prefix}undo: {line}")


@deploy("Take gpu-node back off")
def take_it_back_off(settings: Settings, found: UndoFindings) -> None:
    records, manager = found.records, found.platform.family.package_manager
    own = own_files_without_records(records)
    if found.signing_key:
        say(found.signing_key, kept=True)
    if not (records["records"] or own):
        logger.info(f"{host.print_prefix}undo: no records of gpu-node on this node: nothing to take back off")
        return
    for undo in found.files:
        say(undo.line, kept=undo.action == undo_ops.KEEP)
    for made in found.folders:
        say(made.line, kept=not made.remove)

    # Units gpu-node created are disabled while their files are still there for systemctl to read.
    created = units_gpu_node_created(records, found.files)
    for unit in sorted(created):
        state = records["units"][unit]
        units.put_unit_back(
            name=f"Disable {unit} (gpu-node created it)",
            unit=unit,
            recorded=state.get("recorded", ""),
            now=state,
            created=True,
        )

    # The files, a unit's together, that unit restarted once, after its last changed file.
    changes = [undo for undo in found.files if undo.action != undo_ops.KEEP]
    blacklist = None

    def by_unit(undo: FileUndo) -> str:
        return undo.record["unit"] or ""

    for unit, grouped in groupby(sorted(changes, key=by_unit), key=by_unit):
        group = list(grouped)
        changing = [undo for undo in group if undo.changes]
        for undo in group:
            put_back = undo_ops.put_back_file(
                name=f"Put back {undo.path}" if undo.changes else f"Forget gpu-node's record of {undo.path}",
                undo=undo,
                restart=bool(unit) and undo is (changing[-1] if changing else None),
                restart_timeout=settings.service_restart_timeout,
            )
            if undo.path == kernel_stage.BLACKLIST_PATH and undo.changes:
                blacklist = put_back
    if own:
        for path in own:
            say(
                f"{path}: removed: gpu-node's own file (its first line says so), from a run before gpu-node kept records"
            )
        removed = undo_ops.remove_own_files(name="Remove gpu-node's own files", paths=own)
        if kernel_stage.BLACKLIST_PATH in own:
            blacklist = removed
    if blacklist is not None:
        kernel.rebuild_initramfs(
            name="Rebuild the initramfs after the nouveau blacklist went",
            command=found.platform.family.initramfs_command,
            _if=blacklist.did_change,
        )

    if any(undo.changes for undo in created.values()):
        systemd.daemon_reload(name="Reload systemd's units (gpu-node's own unit files went)")
    for unit, state in sorted(records["units"].items()):
        if "recorded" in state and unit not in created:
            units.put_unit_back(
                name=f"Put {unit} back as it was before gpu-node ({state['recorded']})",
                unit=unit,
                recorded=state["recorded"],
                now=state,
            )

    if records["held"]:
        undo_ops.release_holds(
            name="Release the holds gpu-node placed",
            manager=manager,
            names=records["held"],
            lock_timeout=settings.apt_lock_timeout,
        )
    if records["unfinished_install"]:
        say("an install of gpu-node's did not finish: packages it added are not all known, and stay", kept=True)
    if records["installed"]:
        if settings.undo_remove_packages:
            undo_ops.remove_packages(
                name="Remove the packages gpu-node installed",
                manager=manager,
                names=records["installed"],
                lock_timeout=settings.apt_lock_timeout,
            )
        else:
            say(f"the packages gpu-node installed stay (undo_remove_packages=false): {', '.join(records['installed'])}")
    # after the packages: a package that ships the folder too takes it with it
    emptied = [made.path for made in found.folders if made.remove]
    if emptied:
        undo_ops.remove_folders(name="Remove the folders gpu-node made", paths=emptied)
    if records["rpm_keys"]:
        undo_ops.remove_rpm_keys(name="Take the keys gpu-node imported out of rpm's database", keys=records["rpm_keys"])
    if records["records"]:
        kept = [undo.record["id"] for undo in found.files if undo.action == undo_ops.KEEP]
        undo_ops.forget_records(
            name="Remove gpu-node's records" + (" (but those of the files left as they are)" if kept else ""), kept=kept
        )
