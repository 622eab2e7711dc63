"""
What gpu-node records on a node as it changes it, so that an undo run (deploy/undo.py) can take it
back off: for every file, what it held before gpu-node's first change and what gpu-node last wrote
there; the state of every unit before gpu-node first enabled or disabled it; the packages gpu-node
installed (those the node did not have before), the holds it placed, the keys it imported into
rpm's database. Everything lives under ``RECORDS_DIR``, root's alone (folders 0700, files 0600:
a runtime config's original can hold registry credentials).

The recording is shell, run as part of the command that makes the change (never a command of its
own, so a run that changes nothing costs nothing more), before the change: a run killed right after
it still leaves the record. A record is written once, the first time: a later change keeps the
first original. Pure: paths and the shell text of the records.
"""

from __future__ import annotations

import hashlib
import shlex

RECORDS_DIR = "/var/lib/gpu-node"
FILES_DIR = f"{RECORDS_DIR}/files"
UNITS_DIR = f"{RECORDS_DIR}/units"
INSTALLED_PACKAGES = f"{RECORDS_DIR}/installed-packages"
HELD_PACKAGES = f"{RECORDS_DIR}/held-packages"
IMPORTED_RPM_KEYS = f"{RECORDS_DIR}/imported-rpm-keys"
PACKAGES_BEFORE = f"{RECORDS_DIR}/packages-before-install"

# A file's record, FILES_DIR/<sha256 of its path>/: ``path``, ``unit`` (the service that reads it,
# restarted when the undo changes it), ``format`` (toml, json or empty: how its nvidia wiring can be
# taken back out of a changed file), ``original`` and ``original.stat`` (mode uid:gid) or ``absent``
# (gpu-node created it), ``written`` (what gpu-node last wrote).
# ``earlier``: gpu-node had changed the file before it kept records (its backups were there), so the
# original is not the file before gpu-node.
ORIGINAL, ORIGINAL_STAT, ABSENT, WRITTEN, EARLIER = "original", "original.stat", "absent", "written", "earlier"
TOML, JSON = "toml", "json"

# The installed packages, one name a line, sorted as comm and grep -x read them.
PACKAGE_LISTS = {
    "apt": "dpkg-query -W -f '${Status} ${Package}\\n' 2>/dev/null | awk '$3 == \"installed\" { print $4 }'",
    # rpm lists the keys it imported as packages named gpg-pubkey
    "dnf": "rpm -qa --qf '%{NAME}\\n' | grep -vx gpg-pubkey",
    "zypper": "rpm -qa --qf '%{NAME}\\n' | grep -vx gpg-pubkey",
    "pacman": "pacman -Qq",
}

# Shell functions a recording command defines first. POSIX sh (dash): the node's /bin/sh.
_LIBRARY = f"""gn_records=__RECORDS_DIR__
gn_folder() {{ mkdir -p "$gn_records/$1" && chmod 700 "$gn_records" "$gn_records/$1"; }}
gn_file_record() {{ gn_record="$gn_records/files/$(printf %s "$1" | sha256sum | cut -c1-64)"; }}
# PATH UNIT FORMAT: what PATH holds before gpu-node's first change (its bytes, mode and owner, or that
# there was none), once; gn_new=1 when this call made the record.
gn_record_file() {{
    gn_new=
    gn_file_record "$1"
    [ -d "$gn_record" ] && return 0
    gn_folder files && gn_temp=$(mktemp -d "$gn_record.XXXXXX") || return 1
    if (umask 077 && printf %s "$1" >"$gn_temp/path" && printf %s "$2" >"$gn_temp/unit" \\
            && printf %s "$3" >"$gn_temp/format" && if [ -e "$1" ]; then
                cp -- "$1" "$gn_temp/{ORIGINAL}" && stat -L -c '%a %u:%g' -- "$1" >"$gn_temp/{ORIGINAL_STAT}"
            else : >"$gn_temp/{ABSENT}"; fi \
            && for gn_backup in "$1".gpu-node-backup-*; do [ ! -e "$gn_backup" ] || : >"$gn_temp/{EARLIER}"; break; done) \
            && mv -- "$gn_temp" "$gn_record"; then
        gn_new=1
        return 0
    fi
    rm -rf -- "$gn_temp"
    return 1
}}
# PATH: what gpu-node has just written there.
gn_wrote_file() {{
    gn_file_record "$1"
    [ -d "$gn_record" ] || return 0
    (umask 077 && cp -- "$1" "$gn_record/{WRITTEN}.new") && mv -f -- "$gn_record/{WRITTEN}.new" "$gn_record/{WRITTEN}"
}}
# UNIT...: each unit's enablement and activity before gpu-node's first change of it, once.
gn_record_units() {{
    gn_folder units || return 1
    for gn_unit in "$@"; do
        [ -e "$gn_records/units/$gn_unit" ] && continue
        gn_enabled=$(systemctl is-enabled -- "$gn_unit" 2>/dev/null)
        gn_active=$(systemctl is-active -- "$gn_unit" 2>/dev/null)
        (umask 077 && printf '%s %s\\n' "${{gn_enabled:-not-found}}" "${{gn_active:-inactive}}" \\
            >"$gn_records/units/$gn_unit.new") && mv -f -- "$gn_records/units/$gn_unit.new" "$gn_records/units/$gn_unit" \\
            || return 1
    done
}}
# LIST NAME...: NAMEs added to the record file LIST, one a line.
gn_record_names() {{
    gn_list=$1; shift
    gn_folder . && (umask 077 && printf '%s\\n' "$@" >>"$gn_records/$gn_list")
}}
"""


def library(records_dir: str = RECORDS_DIR) -> str:
    """The shell functions recording under ``records_dir`` (tests: a folder of their own)."""
    return _LIBRARY.replace("__RECORDS_DIR__", shlex.quote(records_dir))


LIBRARY = library()


def file_record(path: str) -> str:
    """The record folder of ``path`` (FILES_DIR/<sha256 of the path>)."""
    return f"{FILES_DIR}/{hashlib.sha256(path.encode('utf-8', 'surrogateescape')).hexdigest()}"


def record_file(path_word: str, unit: str | None = None, file_format: str = "", records_dir: str = RECORDS_DIR) -> str:
    """Shell: the library, then the record of the file ``path_word`` names (a shell word: quoted, or a
    variable in double quotes) before its change; fails (status 1) when it cannot be written."""
    return f'{library(records_dir)}gn_record_file {path_word} {shlex.quote(unit or "")} {shlex.quote(file_format)}'


def wrote_file(path_word: str) -> str:
    """Shell (after the library): what gpu-node has just written at ``path_word``."""
    return f"gn_wrote_file {path_word}"


def record_units(units) -> str:
    """Shell: each of ``units``' state before the change that follows."""
    return f"{LIBRARY}gn_record_units {' '.join(shlex.quote(unit) for unit in units)}"


def record_holds(names) -> str:
    """Shell: the packages gpu-node is about to hold (those not held before)."""
    return f"{LIBRARY}gn_record_names held-packages {' '.join(shlex.quote(name) for name in names)}"


def packages_before(manager: str) -> str:
    """Shell, before an install: the installed packages' names, unless an install this left
    unfinished (a failed or killed one) kept its list already."""
    before = shlex.quote(PACKAGES_BEFORE)
    return (f"{LIBRARY}[ -e {before} ] || {{ gn_folder . && ({PACKAGE_LISTS[manager]}) | LC_ALL=C sort -u "
            f"| (umask 077 && cat >{before}.new) && mv -f {before}.new {before}; }}")


def packages_installed(manager: str) -> str:
    """Shell, after the install: the packages it added (not in the list ``packages_before`` kept)."""
    before = shlex.quote(PACKAGES_BEFORE)
    return (f"{LIBRARY}if [ -e {before} ]; then ({PACKAGE_LISTS[manager]}) | LC_ALL=C sort -u | grep -vxFf {before} "
            f"| (umask 077 && cat >>{shlex.quote(INSTALLED_PACKAGES)}); rm -f {before}; fi")


def record_imported_rpm_keys(keys_before_word: str) -> str:
    """Shell: rpm's keys that were not in the list ``keys_before_word`` names (gpg-pubkey-KEYID-DATE)."""
    return (f'{LIBRARY}rpm -q gpg-pubkey --qf "%{{NVR}}\\n" 2>/dev/null | grep "^gpg-pubkey-" | grep -vxFf '
            f"{keys_before_word} | (gn_folder . && umask 077 && cat >>{shlex.quote(IMPORTED_RPM_KEYS)})")
