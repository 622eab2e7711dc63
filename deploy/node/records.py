"""
What gpu-node records on a node as it changes it, so that an undo run (deploy/undo.py) can take it
back off: for every file, what it held before gpu-node's first change and what gpu-node last wrote
there; the state of every unit before gpu-node first enabled or disabled it; the packages gpu-node
installed (those the node did not have before), the holds it placed, the keys it imported into
rpm's database, the folders it made. Everything lives under ``RECORDS_DIR``, root's alone (folders 0700, files 0600:
a runtime config's original can hold registry credentials). A records folder that is already there
and that another user owns or may write is refused, not taken over: it may hold records they
planted, which the undo would act on as root.

The recording is shell, run as part of the command that makes the change (never a command of its
own, so a run that changes nothing costs nothing more), before the change: a run killed right after
it still leaves the record. A record is written once, the first time: a later change keeps the
first original. Pure: paths and the shell text of the records.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable

from ..driver.signing import GENERATED_FOLDER
from ..foundations import shell_scripts

# a file record's ``format``, named as the runtimes' engines name their configs' (read from here too)
from ..runtimes.engine import JSON as JSON
from ..runtimes.engine import TOML as TOML

RECORDS_DIR = "/var/lib/gpu-node"
# The records folder's owner and mode (``stat -c '%u %a'``) as gpu-node keeps it: root's alone. The
# undo reads records only from such a folder; the recording refuses one another user owns or may write.
ROOT_ALONE = "0 700"
FILES_DIR = f"{RECORDS_DIR}/files"
UNITS_DIR = f"{RECORDS_DIR}/units"
INSTALLED_PACKAGES = f"{RECORDS_DIR}/installed-packages"
HELD_PACKAGES = f"{RECORDS_DIR}/held-packages"
IMPORTED_RPM_KEYS = f"{RECORDS_DIR}/imported-rpm-keys"
PACKAGES_BEFORE = f"{RECORDS_DIR}/packages-before-install"
CREATED_FOLDERS = f"{RECORDS_DIR}/created-folders"  # one folder gpu-node made a line (make_folder)
# The module signing key gpu-node generates lives in the records folder too (deploy/driver/signing.py)
# but is no record: the undo keeps it (the firmware may trust its certificate; docs/undo.md).
SIGNING_KEYS = GENERATED_FOLDER.removeprefix(f"{RECORDS_DIR}/")

# A file's record, FILES_DIR/<sha256 of its path>/: ``path``, ``unit`` (the service that reads it,
# restarted when the undo changes it), ``format`` (toml, json or empty: how its nvidia wiring can be
# taken back out of a changed file), ``original`` and ``original.stat`` (mode uid:gid) or ``absent``
# (gpu-node created it), ``written`` (what gpu-node last wrote).
# ``earlier``: gpu-node had changed the file before it kept records (its backups were there), so the
# original is not the file before gpu-node.
ORIGINAL, ORIGINAL_STAT, ABSENT, WRITTEN, EARLIER = "original", "original.stat", "absent", "written", "earlier"


def library(records_dir: str = RECORDS_DIR) -> str:
    """The shell functions recording under ``records_dir`` (tests: a folder of their own;
    deploy/shell/records_library.sh)."""
    return shell_scripts.script("records_library", gn_records=records_dir)


LIBRARY = library()


def file_record(path: str) -> str:
    """The record folder of ``path`` (FILES_DIR/<sha256 of the path>)."""
    return f"{FILES_DIR}/{hashlib.sha256(path.encode('utf-8', 'surrogateescape')).hexdigest()}"


def record_file(path_word: str, unit: str | None = None, file_format: str = "", records_dir: str = RECORDS_DIR) -> str:
    """Shell: the library, then the record of the file ``path_word`` names (a shell word: quoted, or a
    variable in double quotes) before its change; fails (status 1) when it cannot be written."""
    return f"{library(records_dir)}gn_record_file {path_word} {shlex.quote(unit or '')} {shlex.quote(file_format)}"


def wrote_file(path_word: str) -> str:
    """Shell (after the library): what gpu-node has just written at ``path_word``."""
    return f"gn_wrote_file {path_word}"


def record_units(units: Iterable[str]) -> str:
    """Shell: each of ``units``' state before the change that follows."""
    return f"{LIBRARY}gn_record_units {' '.join(shlex.quote(unit) for unit in units)}"


def make_folder(path: str) -> str:
    """Shell: the folder ``path`` made where absent (0755), with each absent folder above it, each
    named in the record file created-folders once made (deploy/shell/records_library.sh)."""
    return f"{LIBRARY}gn_make_folder {shlex.quote(path)}"


def record_holds(names: Iterable[str]) -> str:
    """Shell: the packages gpu-node is about to hold (those not held before)."""
    return f"{LIBRARY}gn_record_names held-packages {' '.join(shlex.quote(name) for name in names)}"


def packages_before(installed_listing: str) -> str:
    """Shell, before an install: the installed packages' names (``installed_listing``, the package
    manager's shell listing them one a line), unless an install this left unfinished (a failed or
    killed one) kept its list already. Sorted as comm and grep -x read them."""
    before = shlex.quote(PACKAGES_BEFORE)
    return (
        f"{LIBRARY}[ -e {before} ] || {{ gn_folder . && ({installed_listing}) | LC_ALL=C sort -u "
        f"| (umask 077 && cat >{before}.new) && mv -f {before}.new {before}; }}"
    )


def packages_installed(installed_listing: str) -> str:
    """Shell, after the install: the packages it added (not in the list ``packages_before`` kept)."""
    before = shlex.quote(PACKAGES_BEFORE)
    return (
        f"{LIBRARY}if [ -e {before} ]; then ({installed_listing}) | LC_ALL=C sort -u | grep -vxFf {before} "
        f"| (umask 077 && cat >>{shlex.quote(INSTALLED_PACKAGES)}); rm -f {before}; fi"
    )


def record_imported_rpm_keys(keys_before_word: str) -> str:
    """Shell: rpm's keys that were not in the list ``keys_before_word`` names (gpg-pubkey-KEYID-DATE)."""
    return (
        f'{LIBRARY}rpm -q gpg-pubkey --qf "%{{NVR}}\\n" 2>/dev/null | grep "^gpg-pubkey-" | grep -vxFf '
        f"{keys_before_word} | (gn_folder . && umask 077 && cat >>{shlex.quote(IMPORTED_RPM_KEYS)})"
    )
