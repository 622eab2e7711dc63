"""Package state in one command: installed version and hold, per package."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pyinfra.api import QuoteString, StringCommand

from .base import NodeFact

if TYPE_CHECKING:
    from packaging.version import Version


class DebPackageStates(NodeFact[dict[str, Any]]):
    """
    Installed version and hold state of the named Debian packages (absent ones are left out).

    .. code:: python

        {"nvidia-container-toolkit": {"version": "1.17.8-1", "held": True}}
    """

    def requires_command(self, packages: Iterable[str] = ()) -> str:
        return "dpkg-query"

    def command(self, packages: Iterable[str] = ()) -> StringCommand:
        names = [QuoteString(name) for name in packages]
        return StringCommand(
            "dpkg-query",
            "-W",
            "-f",
            QuoteString("${Package} ${Version} ${Status}\\n"),
            *names,
            "2>/dev/null",
            "|| true",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        states = {}
        for line in output:
            parts = line.split()
            # name version want flag status, e.g. "hold ok installed"
            if len(parts) >= 5 and parts[-1] == "installed":
                states[parts[0]] = {"version": parts[1], "held": parts[2] == "hold"}
        return states


# dnf's versionlock plugin: its configuration names its lock list
VERSIONLOCK_CONF = "/etc/dnf/plugins/versionlock.conf"
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
LOCKLIST_SETTING = "s/^[[:space:]]*locklist[[:space:]]*=[[:space:]]*//p"


class RpmPackageStates(NodeFact[dict[str, Any]]):
    """
    Installed version (``version-release``) of the named RPM packages and whether dnf's
    versionlock holds them (from its lock list, as ``dnf versionlock list`` prints it: that command
    loads the repositories and so waits for a busy dnf's metadata lock).

    .. code:: python

        {"nvidia-container-toolkit": {"version": "1.17.8-1", "held": False}}
    """

    def command(self, packages: Iterable[str] = ()) -> StringCommand:
        names = [QuoteString(name) for name in packages]
        return StringCommand(
            "rpm",
            "-q",
            "--qf",
            QuoteString("installed %{NAME} %{VERSION}-%{RELEASE}\\n"),
            *names,
            "2>/dev/null | grep '^installed';",
            f"list=$(sed -n '{LOCKLIST_SETTING}' {VERSIONLOCK_CONF} 2>/dev/null | tail -n 1);",
            f"grep -v '^#' \"${{list:-{VERSIONLOCK_LIST}}}\" 2>/dev/null | sed 's/^/lock /'; true",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        states = {}
        locks = []
        for line in output:
            kind, _, rest = line.partition(" ")
            if kind == "installed":
                name, _, version = rest.partition(" ")
                states[name] = {"version": version.strip(), "held": False}
            elif kind == "lock":
                locks.append(rest.strip())
        for name, state in states.items():
            # versionlock lists entries such as "nvidia-container-toolkit-0:1.17.8-1.*"
            state["held"] = any(
                lock.startswith(f"{name}-") and lock[len(name) + 1 : len(name) + 2].isdigit() for lock in locks
            )
        return states


class MultiversionPackages(NodeFact[dict[str, Any]]):
    """
    The installed packages zypper installs side by side, one per version, as it does kernels: those
    that provide ``multiversion(kernel)`` (zypp.conf's default), SUSE's kernel module packages
    among them; each with its installed versions (``version-release``).

    .. code:: python

        {"nvidia-driver-G06-kmp-default": ["550.54.15_k6.4.0_150600.21-lp156.1.1"]}
    """

    def command(self) -> str:
        return (
            "rpm -q --whatprovides 'multiversion(kernel)' --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' 2>/dev/null "
            "| grep -v '^no package provides'; true"
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        installed: dict[str, list[str]] = {}
        for line in output:
            name, _, edition = line.strip().partition(" ")
            if name and edition:
                installed.setdefault(name, []).append(edition)
        return installed


class ZypperLocks(NodeFact[list[Any]]):
    """
    Package names zypper holds, from its locks file (``zypper addlock`` writes it; ``zypper locks``
    would need libzypp's lock, which another zypper may hold).

    .. code:: python

        ["nvidia-container-toolkit", "libnvidia-container1"]
    """

    def command(self) -> str:
        return "cat /etc/zypp/locks 2>/dev/null || true"

    @staticmethod
    def default() -> list[Any]:
        return []

    def process(self, output: list[str]) -> list[Any]:
        # blank-line separated entries of "key: value" lines; a lock without a type is a package's
        names = []
        entry: dict[str, str] = {}
        for line in [*output, ""]:
            key, colon, value = line.partition(":")
            if colon and not line.startswith("#"):
                entry[key.strip()] = value.strip()
            elif not line.strip() and entry:
                if entry.get("type", "package") == "package" and entry.get("solvable_name"):
                    names.append(entry["solvable_name"])
                entry = {}
        return names


# What each manager offers of the named packages, in the lines offered_versions reads: the
# commands, by the parser of their output; the family table (deploy/distros/families.py) hands each fact its
# manager's as ``listing``, a function of the wait for a busy manager's lock (settings.apt_lock_timeout).
ZYPPER_SEARCH = ("zypper", "--quiet", "--non-interactive", "search", "--details", "--match-exact", "--type", "package")
DNF_LIST = ("dnf", "-q", "list", "--showduplicates")


def apt_listing(lock_timeout: int = 0) -> tuple[str, ...]:
    """apt-cache reads the lists without apt's lock: nothing to wait for."""
    return ("apt-cache", "madison")


def dnf_listing(lock_timeout: int = 0) -> tuple[str, ...]:
    """dnf has no bound of its own on the wait (WaitedPackageVersions waits, bounded, first)."""
    return DNF_LIST


def zypper_listing(lock_timeout: int = 0) -> tuple[str, ...]:
    """zypper without ZYPP_LOCK_TIMEOUT gives up at once on libzypp's lock and would read as offering nothing."""
    return (f"ZYPP_LOCK_TIMEOUT={int(lock_timeout)}", *ZYPPER_SEARCH)


class PackageVersions(NodeFact[dict[str, Any]]):
    """
    Every version of the named packages the package manager's lists offer (and the installed one),
    newest first as the manager lists them, read with ``listing``: the command words its family
    hands (deploy/distros/package_managers.py ``version_listing``: apt's ``apt-cache madison``, zypper's ``search
    --details``); preflight reads dnf's and zypper's with WaitedPackageVersions. No listing (pacman:
    it installs one version) reads nothing. Absent packages are left out.

    .. code:: python

        {"nvidia-driver": ["535.309.01-0+deb12u1", "535.261.03-1"]}
    """

    def command(self, listing: Iterable[str] = (), packages: Iterable[str] = ()) -> StringCommand | str:
        if not listing or not packages:
            return "true"
        names = [QuoteString(name) for name in packages]
        return StringCommand(*listing, *names, "2>/dev/null || true")

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        return offered_versions(output)


def offered_versions(output: Iterable[str]) -> dict[str, list[str]]:
    """{name: versions} from the lines of apt-cache madison, zypper search --details or dnf list."""
    versions: dict[str, list[str]] = {}
    for line in output:
        if "|" in line:
            cells = [cell.strip() for cell in line.split("|")]
            if len(cells) >= 6:  # zypper: "S | name | type | version | arch | repository"
                if cells[2] != "package":
                    continue
                name, version = cells[1], cells[3]
            else:  # apt: " name | version | source"
                name, version = cells[0], cells[1] if len(cells) > 1 else ""
        else:  # dnf: "name.arch  [epoch:]version-release  repository"
            words = line.split()
            if len(words) < 3 or "." not in words[0] or words[0].endswith(":"):
                continue
            name, version = words[0].rsplit(".", 1)[0], words[1]
        if name and version and version not in versions.setdefault(name, []):
            versions[name].append(version)
    return versions


class WaitedPackageVersions(NodeFact[dict[str, Any]]):
    """
    PackageVersions of dnf (``dnf -q list --showduplicates``) or zypper (``search --details``), the
    ``listing`` its family hands (deploy/distros/package_managers.py ``version_listing``), read after ``wait``: shell
    that waits, bounded, for another process holding the manager's lock and fails in one line when
    it gives up (deploy/operations/package_manager.py LockWait.script). dnf waits for that
    lock without end, even cache-only (-C takes its metadata lock too); zypper, with no
    ZYPP_LOCK_TIMEOUT (``zypper_listing``), gives up at once and would read as offering nothing.
    ``busy``: the wait's line when it gave up (the manager not run). ``unreadable``: the repositories
    the manager could not read (zypper skips one and lists the others; dnf lists nothing at all), each
    with its reason: what the versions miss, and where the install's own refresh would stop.

    .. code:: python

        {"versions": {"nvidia-driver": ["3:550.90.07-1.el9", "3:550.54.15-1.el9"]}, "busy": None,
         "unreadable": ["repository 'mirror' (Failed to connect to 10.0.0.5 port 80 after 3 ms: Couldn't connect to server)"]}
    """

    def command(
        self, packages: Iterable[str] = (), wait: str = "true", listing: Iterable[str] = ()
    ) -> StringCommand | str:
        if not packages or not listing:
            return "true"
        names = [QuoteString(name) for name in packages]
        # The manager's error lines, marked, beside its listing (fd 3: the listing's own output)
        return StringCommand(
            f"if busy=$( ({wait}) 2>&1 ); then {{",
            *listing,
            *names,
            f"2>&1 1>&3 3>&- | sed 's/^/{MANAGER_ERROR}/'; }} 3>&1;",
            "else printf 'busy %s\\n' \"$busy\"; fi",
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"versions": {}, "busy": None, "unreadable": []}

    def process(self, output: list[str]) -> dict[str, Any]:
        busy = [line.split(" ", 1)[1] for line in output if line.startswith("busy ")]
        errors = [line[len(MANAGER_ERROR) :] for line in output if line.startswith(MANAGER_ERROR)]
        listing = [line for line in output if not line.startswith(("busy ", MANAGER_ERROR))]
        return {
            "versions": offered_versions(listing),
            "busy": busy[-1].removeprefix("gpu-node: ").strip() if busy else None,
            "unreadable": unreadable_repositories(listing, errors),
        }


MANAGER_ERROR = "manager_error "
# zypper (on its output) and dnf (on its errors), as their real versions word it
ZYPPER_SKIPPED = re.compile(r"Skipping repository '(?P<name>.+)' because of the above error")
ZYPPER_INVALID = re.compile(r"Repository '(?P<name>.+)' is invalid")
DNF_METADATA = re.compile(r"Error: Failed to download metadata for repo '(?P<name>[^']+)': (?P<reason>.+)")
DNF_NOTHING_TO_LIST = "Error: No matching Packages to list"


def unreadable_repositories(listing: list[str], errors: list[str]) -> list[str]:
    """Each repository zypper skipped or dnf could not load, as "repository 'name' (reason)"."""
    found = []
    for line in listing:
        skipped = ZYPPER_SKIPPED.search(line)
        if skipped:
            # zypper's reason: the "Error message:" in that repository's block of errors, if it has one
            block, reason = False, None
            for error in errors:
                invalid = ZYPPER_INVALID.search(error)
                if invalid:
                    block = invalid["name"] == skipped["name"]
                elif block and error.startswith("Error message:"):
                    reason = error.removeprefix("Error message:").strip()
                    break
            found.append(f"repository '{skipped['name']}' ({reason or 'zypper skipped it'})")
    for error in errors:
        metadata = DNF_METADATA.match(error.strip())
        if metadata:
            found.append(f"repository '{metadata['name']}' ({metadata['reason'].strip()})")
        elif error.startswith("Error:") and error.strip() != DNF_NOTHING_TO_LIST:
            found.append(error.removeprefix("Error:").strip())
    return found


# Where dnf keeps each module's state (``dnf module enable`` writes it; ``dnf module list`` reads
# the repositories, so waits for a busy dnf's metadata lock)
DNF_MODULES_DIR = "/etc/dnf/modules.d"


class DnfModuleStreams(NodeFact[dict[str, Any]]):
    """
    The enabled stream of each dnf module enabled on the node, from dnf's module state files
    (what ``dnf module list --enabled`` marks [e]), read without dnf.

    .. code:: python

        {"nvidia-driver": "550-dkms"}
    """

    def command(self) -> str:
        return f"cat {DNF_MODULES_DIR}/*.module 2>/dev/null; true"

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        streams: dict[str, str] = {}
        section: dict[str, str] = {}
        for line in [*output, "[]"]:
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                if section.get("state") == "enabled" and section.get("name") and section.get("stream"):
                    streams[section["name"]] = section["stream"]
                section = {}
            elif "=" in line and not line.startswith(("#", ";")):
                key, _, value = line.partition("=")
                section[key.strip()] = value.strip()
        return streams


class RepositoryPackageVersions(NodeFact[dict[str, Any]]):
    """
    The versions a flat apt repository (``deb URL /``) offers of the named packages, read from its
    Packages index without adding it to the node (downloaded to a temporary folder, then removed):
    what the driver stage pins to before it adds the repository. Unverified: apt checks the
    signature when it installs.

    .. code:: python

        {"nvidia-fabricmanager-535": ["535.261.03-1", "535.274.02-1"]}
    """

    def command(self, url: str, packages: Iterable[str] = (), timeout: int = 30) -> StringCommand:
        wanted = shlex.quote(" " + " ".join(packages) + " ")
        base = shlex.quote(url.rstrip("/"))
        seconds = int(timeout)
        return StringCommand(
            "tmp=$(mktemp -d) && trap 'rm -rf \"$tmp\"' EXIT; for index in Packages.gz Packages; do"
            f" if [ -x /usr/lib/apt/apt-helper ]; then /usr/lib/apt/apt-helper -o Acquire::http::Timeout={seconds}"
            f' -o Acquire::https::Timeout={seconds} -o Acquire::Retries=0 download-file {base}/"$index" "$tmp/$index";'
            f' else curl -fsSL --max-time {seconds} -o "$tmp/$index" {base}/"$index"; fi >/dev/null 2>&1'
            f' && {{ zcat -f "$tmp/$index" | awk -v wanted={wanted}'
            """ '/^Package:/ {name=$2} /^Version:/ && index(wanted, " " name " ") {print name, $2}'; break; }; done; true"""
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        versions: dict[str, list[str]] = {}
        for line in output:
            words = line.split()
            if len(words) == 2:
                versions.setdefault(words[0], []).append(words[1])
        return {name: sorted(found, key=_version_key, reverse=True) for name, found in versions.items()}


def _version_key(version: str) -> tuple[int, Version | str, str]:
    from packaging.version import InvalidVersion, Version

    upstream = version.split(":", 1)[-1].split("-", 1)[0]
    try:
        return (1, Version(upstream), version)
    except InvalidVersion:
        return (0, upstream, version)
