"""
The node's shell scripts (deploy/shell/*.sh, read through deploy/foundations/shell_scripts.py):

- shellcheck (Debian's package; scripts/ensure-debian-package.sh installs it where it can, else the test
  skips with that script's line) finds nothing in any of them, read as POSIX sh, as the node's
  /bin/sh (dash) runs them;
- the wheel's package data carries every one of them;
- each fact whose read is a script runs it for real in a scratch root (tests/shell_sandbox.py) laid
  out as a fixture filesystem (tests/fixtures/shell/<fact>/*.json): its output must be the
  fixture's, and the fact's parse of it the fixture's fact, so the script and its parser cannot
  drift apart unseen.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pci_tree import load, write
from shell_sandbox import Sandbox, build_template

from deploy.facts.devices import NvidiaDeviceLinks
from deploy.facts.nvidia import NodeSurvey
from deploy.facts.records import NodeRecords
from deploy.facts.recovery import PendingRestarts
from deploy.foundations import shell_scripts

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "deploy").rglob("*.sh"))
FIXTURES = REPO / "tests" / "fixtures" / "shell"
FACTS = {
    "NodeSurvey": NodeSurvey,
    "NvidiaDeviceLinks": NvidiaDeviceLinks,
    "NodeRecords": NodeRecords,
    "PendingRestarts": PendingRestarts,
}


@pytest.fixture(scope="module")
def shellcheck() -> str:
    ensured = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure-debian-package.sh"), "shellcheck"], capture_output=True, text=True
    )
    if ensured.returncode != 0:
        pytest.skip(ensured.stderr.strip().splitlines()[-1] if ensured.stderr.strip() else "shellcheck unavailable")
    return "shellcheck"


def test_every_script_passes_shellcheck_as_posix_sh(shellcheck):
    assert len(SCRIPTS) >= 20, SCRIPTS
    result = subprocess.run(
        [shellcheck, "--shell=sh", "--format=gcc", *map(str, SCRIPTS)], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0 and not result.stdout, result.stdout + result.stderr


def test_shellcheck_here_does_find_what_it_checks_for(shellcheck, tmp_path):
    """The check above can fail: an unquoted variable and a bash-only test are findings here."""
    script = tmp_path / "bad.sh"
    script.write_text('#!/bin/sh\nrm -f $1\n[[ -n "$2" ]] && echo yes\n')
    result = subprocess.run([shellcheck, "--shell=sh", "--format=gcc", str(script)], capture_output=True, text=True)
    assert result.returncode != 0 and "SC2086" in result.stdout and "SC3010" in result.stdout, result.stdout


def test_the_wheel_carries_every_script():
    """pyproject.toml's package data covers each script at its place in the package (gpu_node/...)."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {package: Path(folder) for package, folder in setuptools["package-dir"].items()}
    carried = set()
    for package, patterns in setuptools["package-data"].items():
        assert package in setuptools["packages"], package
        # setuptools' rule: the longest package-dir entry the package is in
        owner = max((name for name in folders if package == name or package.startswith(name + ".")), key=len)
        folder = folders[owner] / package[len(owner) :].lstrip(".").replace(".", "/")
        carried |= {
            path
            for pattern in patterns
            for path in (REPO / folder).glob(pattern)
            if fnmatch.fnmatch(path.name, pattern)
        }
    assert set(SCRIPTS) <= carried, sorted(map(str, set(SCRIPTS) - carried))


def test_every_script_is_read_by_the_package():
    """No script left behind: each is named where deploy/ reads it (shell_scripts.script or body)."""
    sources = "\n".join(path.read_text() for path in (REPO / "deploy").rglob("*.py"))
    unread = [path.stem for path in SCRIPTS if f'"{path.stem}"' not in sources]
    assert not unread, unread


def test_values_are_assigned_quoted_never_written_into_the_text():
    value = 'it\'s $(touch pwned); `x` "y" #z\nw'
    given = shell_scripts.assignments(["a b", value], dest=value)
    out = subprocess.run(["sh", "-c", given + 'printf "%s|" "$dest" "$@"'], capture_output=True, text=True, cwd="/tmp")
    assert out.stdout == f"{value}|a b|{value}|" and not Path("/tmp/pwned").exists()
    with pytest.raises(ValueError):
        shell_scripts.assignments(**{"a;b": "x"})


# --- the fact scripts over fixture filesystems ------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory.mktemp("sandbox") / "template")


def lay_out(root: Path, tree: dict) -> None:
    """The fixture's filesystem under ``root``: folders, files (text, or base64 bytes), symbolic
    links, character devices, a PCI topology (tests/fixtures/fabric/) at a folder, and modes (octal)."""

    def inside(path: str) -> Path:
        return root / path.lstrip("/")

    for folder in tree.get("dirs", ()):
        inside(folder).mkdir(parents=True, exist_ok=True)
    for path, text in tree.get("files", {}).items():
        inside(path).parent.mkdir(parents=True, exist_ok=True)
        inside(path).write_text(text)
    for path, encoded in tree.get("bytes", {}).items():
        inside(path).parent.mkdir(parents=True, exist_ok=True)
        inside(path).write_bytes(base64.b64decode(encoded))
    for path, (major, minor) in tree.get("char_devices", {}).items():
        inside(path).parent.mkdir(parents=True, exist_ok=True)
        os.mknod(inside(path), 0o20660, os.makedev(major, minor))
    for path, target in tree.get("links", {}).items():
        inside(path).parent.mkdir(parents=True, exist_ok=True)
        inside(path).symlink_to(target)
    for folder, name in tree.get("pci", {}).items():
        inside(folder).parent.mkdir(parents=True, exist_ok=True)
        write(load(name), inside(folder))
    for path, mode in tree.get("modes", {}).items():
        inside(path).chmod(int(mode, 8))


CASES = sorted(FIXTURES.glob("*/*.json"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the scratch root is a chroot, and device nodes need root")
@pytest.mark.parametrize("path", CASES, ids=lambda path: f"{path.parent.name}-{path.stem}")
def test_a_fact_script_over_its_fixture_filesystem_prints_the_fixture_and_parses_to_its_fact(path, template, tmp_path):
    fixture = json.loads(path.read_text())
    fact = FACTS[path.parent.name]()
    box = Sandbox.clone(template, tmp_path / "root")
    lay_out(box.root, fixture["tree"])
    output = box.output(fact.command(**fixture.get("arguments", {}))).splitlines()
    assert output == fixture["output"]
    assert fact.process(output) == fixture["fact"]


def test_every_fact_read_from_a_script_has_a_fixture_filesystem():
    assert {path.parent.name for path in CASES} == set(FACTS)
