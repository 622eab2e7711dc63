"""
What differs per distribution family lives in its table (deploy/distros/): no code outside that
folder compares a package manager's or a family's name, or looks a value up by a package manager's
name; it reads the family's capability instead (docs/contributing.md, "Adding a family"). The names
are the table's own, so a family added there is held to the rule too.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from deploy.distros import package_managers
from deploy.distros.families import FAMILIES
from deploy.distros.package_managers import PACKAGE_MANAGERS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TABLE = DEPLOY / "distros"
MANAGER_NAMES = {manager.name for manager in PACKAGE_MANAGERS}
FAMILY_NAMES = {family.name for family in FAMILIES} | {distro_id for family in FAMILIES for distro_id in family.ids}
# The table's package managers by their Python names (APT, DNF, ...): ``manager is APT`` is a name check too.
MANAGER_CONSTANTS = {name for name, value in vars(package_managers).items() if value in PACKAGE_MANAGERS}


def _named(node: ast.AST, names: set[str]) -> bool:
    """``node`` is one of ``names`` as a string, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_named(item, names) for item in node.elts)
    return False


def name_checks(source: str) -> list[tuple[int, str]]:
    """(line, text) of every place ``source`` tells families or package managers apart by name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_named(side, MANAGER_NAMES | FAMILY_NAMES) for side in sides) or any(
                isinstance(side, (ast.Name, ast.Attribute))
                and (side.id if isinstance(side, ast.Name) else side.attr) in MANAGER_CONSTANTS
                for side in sides
            ):
                found.append(node)
        elif isinstance(node, ast.match_case) and _named(
            getattr(node.pattern, "value", None), MANAGER_NAMES | FAMILY_NAMES
        ):
            found.append(node.pattern)
        elif (
            isinstance(node, ast.Dict)
            and any(key is not None and _named(key, MANAGER_NAMES) for key in node.keys)
            or isinstance(node, ast.Subscript)
            and _named(node.slice, MANAGER_NAMES)
        ):
            found.append(node)
    return sorted((node.lineno, ast.unparse(node)[:100]) for node in found)


def test_no_code_outside_the_family_table_tells_families_or_package_managers_apart_by_name():
    offenders = [
        f"{path.relative_to(DEPLOY.parent)}:{line}: {text}"
        for path in sorted(DEPLOY.rglob("*.py"))
        if TABLE not in path.parents
        for line, text in name_checks(path.read_text())
    ]
    assert not offenders, "ask the family table (deploy/distros/) for a capability instead:\n" + "\n".join(offenders)


def test_the_scan_finds_each_shape_of_a_name_check():
    """The rule's own reader, on the shapes code outside the table once had (its oracle: these lines)."""
    shapes = {
        'if manager.name == "apt":\n    pass\n': 1,
        'if manager.name in ("dnf", "zypper"):\n    pass\n': 1,
        'ok = manager is APT or manager.name != "pacman"\n': 2,
        'ok = platform.family.name == "suse" or distro_id == "rocky"\n': 2,
        'LISTS = {"apt": "dpkg-query -W", "dnf": "rpm -qa"}\n': 1,
        'command = REMOVE_COMMANDS["zypper"]\n': 1,
        'match manager.name:\n    case "apt":\n        pass\n': 1,
        # not name checks: a command word, the template value {arch}, a format's own word
        'command = StringCommand("dnf", "versionlock", "add")\nvalues = {"arch": "x86_64"}\nok = kind == "deb"\n': 0,
    }
    for source, count in shapes.items():
        assert len(name_checks(source)) == count, (source, name_checks(source))


def incomplete_capabilities(families) -> list[str]:
    """Capabilities a family names half of: the stages skip what they cannot do whole (a repository
    without its key, a module stream on a manager without module streams), so the table must not."""
    found = []
    for family in families:
        if family.containerd_repo and family.containerd_repo_key is None:
            found.append(f"{family.name}: containerd_repo without containerd_repo_key")
        streams = [family.driver.module, (family.driver.open_modules or {}).get("module")]
        if any(streams) and family.package_manager.module_operation is None:
            found.append(f"{family.name}: a driver module stream on {family.package_manager.name}, which has none")
    return found


def test_every_family_names_its_capabilities_whole():
    assert incomplete_capabilities(FAMILIES) == []


def test_a_family_naming_half_a_capability_is_found():
    """The check's own reader, on families made incomplete from the table's."""
    rhel = next(family for family in FAMILIES if family.containerd_repo)
    debian = next(
        family
        for family in FAMILIES
        if family.driver.module is None and family.package_manager.module_operation is None
    )
    half = [
        replace(rhel, containerd_repo_key=None),
        replace(debian, driver=replace(debian.driver, module=("nvidia-driver", "{branch}-dkms", "latest-dkms"))),
    ]
    assert len(incomplete_capabilities(half)) == 2
