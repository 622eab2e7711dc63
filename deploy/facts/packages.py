"""Package state in one command: installed version and hold, per package."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand


class DebPackageStates(FactBase):
    """
    Installed version and hold state of the named Debian packages (absent ones are left out).

    .. code:: python

        {"nvidia-container-toolkit": {"version": "1.17.8-1", "held": True}}
    """

    def requires_command(self, packages=()):
        return "dpkg-query"

    def command(self, packages=()):
        names = [QuoteString(name) for name in packages]
        return StringCommand(
            "dpkg-query", "-W", "-f", QuoteString("${Package} ${Version} ${Status}\\n"), *names,
            "2>/dev/null", "|| true",
        )

    @staticmethod
    def default():
        return {}

    def process(self, output):
        states = {}
        for line in output:
            parts = line.split()
            # name version want flag status, e.g. "hold ok installed"
            if len(parts) >= 5 and parts[-1] == "installed":
                states[parts[0]] = {"version": parts[1], "held": parts[2] == "hold"}
        return states


class RpmPackageStates(FactBase):
    """
    Installed version (``version-release``) of the named RPM packages and whether dnf's
    versionlock holds them.

    .. code:: python

        {"nvidia-container-toolkit": {"version": "1.17.8-1", "held": False}}
    """

    def command(self, packages=()):
        names = [QuoteString(name) for name in packages]
        return StringCommand(
            "rpm", "-q", "--qf", QuoteString("installed %{NAME} %{VERSION}-%{RELEASE}\\n"), *names,
            "2>/dev/null | grep '^installed';",
            "(dnf versionlock list 2>/dev/null || true) | sed 's/^/lock /'; true",
        )

    @staticmethod
    def default():
        return {}

    def process(self, output):
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
            state["held"] = any(lock.startswith(f"{name}-") and lock[len(name) + 1 : len(name) + 2].isdigit()
                                for lock in locks)
        return states


class ZypperLocks(FactBase):
    """
    Package names zypper holds (``zypper locks``).

    .. code:: python

        ["nvidia-container-toolkit", "libnvidia-container1"]
    """

    def requires_command(self):
        return "zypper"

    def command(self):
        return "zypper --quiet locks 2>/dev/null || true"

    @staticmethod
    def default():
        return []

    def process(self, output):
        # "# | Name                     | Type    | Repository" table rows
        names = []
        for line in output:
            cells = [cell.strip() for cell in line.split("|")]
            if len(cells) >= 3 and cells[0].isdigit():
                names.append(cells[1])
        return names
