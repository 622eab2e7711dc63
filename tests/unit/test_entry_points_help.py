"""
Every way a user runs gpu-node's package from a shell, found by itself: each module of deploy/ (the
package gpu_node) with a ``if __name__ == "__main__":`` block, run as ``python -m``, and each console
script pyproject.toml's [project.scripts] names. Each one's ``--help`` prints its help and exits 0,
and an unknown option is one line and exit 2; neither writes nor runs anything.

Each runs in a sandbox: a subprocess whose HOME, working folder and TMPDIR are folders of the test,
whose PATH holds only recorders named as the programs gpu-node runs (sh, systemctl, modprobe, ...):
a recorder notes its call and fails, so a program started by name is seen and changes nothing. After
the run the test's folders hold what they held, no recorder was called, and the folders gpu-node
writes on a node (/etc/systemd/system, /etc/gpu-node, /var/lib/gpu-node, /usr/lib/gpu-node) are as
they were (the tests run as root: a module that ignored ``--help`` could write there).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.foundations.toml_layout import tomllib

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "deploy"
MAIN_BLOCK = re.compile(r"""^if __name__ == ["']__main__["']:""", re.M)
# The programs gpu-node's code starts by name, and the shells and tools any code would reach for.
RECORDED = (
    "sh",
    "bash",
    "dash",
    "env",
    "systemctl",
    "journalctl",
    "modprobe",
    "rmmod",
    "nvidia-smi",
    "nvidia-ctk",
    "pyinfra",
    "python3",
    "pip",
    "apt-get",
    "dpkg",
    "dnf",
    "rpm",
    "zypper",
    "pacman",
    "cp",
    "mv",
    "rm",
    "mkdir",
    "chmod",
    "chown",
    "install",
    "tee",
    "ln",
    "curl",
    "wget",
    "docker",
    "kubectl",
    "ssh",
    "sudo",
)
NODE_FOLDERS = ("/etc/systemd/system", "/etc/gpu-node", "/var/lib/gpu-node", "/usr/lib/gpu-node")


def modules_with_main() -> list[str]:
    return sorted(
        ".".join(("deploy", *path.relative_to(PACKAGE).with_suffix("").parts))
        for path in PACKAGE.rglob("*.py")
        if MAIN_BLOCK.search(path.read_text(encoding="utf-8"))
    )


def console_scripts() -> dict[str, str]:
    """name -> ``gpu_node.module:function``, as pyproject.toml declares them (the wheel's package
    gpu_node is this checkout's deploy/)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project.get("scripts", {}))


def commands() -> dict[str, list[str]]:
    """id -> the command running it, its arguments to follow."""
    found = {f"python -m {module}": [sys.executable, "-m", module] for module in modules_with_main()}
    for name, target in console_scripts().items():
        module, _, function = target.partition(":")
        assert module.split(".")[0] == "gpu_node", target
        module = "deploy" + module[len("gpu_node") :]
        found[name] = [
            sys.executable,
            "-c",
            f"import sys; sys.argv[0] = {name!r}; from {module} import {function}; sys.exit({function}())",
        ]
    return found


COMMANDS = commands()


def test_discovery_finds_the_modules_known_to_run_from_a_shell():
    """The discovery can fail: these three have a __main__ block today, and it finds them."""
    assert {"deploy.node.pull_install", "deploy.node.first_boot", "deploy.fleet.from_reports"} <= set(
        modules_with_main()
    )


def tree(folder: Path) -> dict[str, tuple]:
    """Every path under ``folder``, with its kind, size and modification time."""
    found = {}
    for path in [folder, *folder.rglob("*")]:
        info = path.lstat()
        found[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


def node_folders() -> dict[str, dict | None]:
    return {folder: tree(Path(folder)) if os.path.lexists(folder) else None for folder in NODE_FOLDERS}


def sandboxed(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``command`` run in the sandbox (see the module); asserts that it wrote and ran nothing."""
    root, log = tmp_path / "root", tmp_path / "recorded.log"
    recorders = root / "bin"
    for folder in ("home", "work", "tmp", "bin"):
        (root / folder).mkdir(parents=True)
    for name in RECORDED:
        recorder = recorders / name
        recorder.write_text(f'#!/bin/sh\necho "$0 $*" >> {log}\nexit 97\n')
        recorder.chmod(0o755)
    before, nodes_before = tree(root), node_folders()
    env = {
        "HOME": str(root / "home"),
        "TMPDIR": str(root / "tmp"),
        "PATH": str(recorders),
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LC_ALL": "C.UTF-8",
    }
    result = subprocess.run(command, cwd=root / "work", env=env, capture_output=True, text=True, timeout=300)
    assert not log.exists(), f"ran: {log.read_text()}"
    assert tree(root) == before
    assert node_folders() == nodes_before
    return result


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_prints_the_help_and_changes_nothing(name, tmp_path):
    result = sandboxed([*COMMANDS[name], "--help"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("usage: ") and "--help" in result.stdout, result.stdout
    assert result.stderr == ""


# The drift check's 2 means drift, so a cron job can tell it from a check that could not run (1).
BAD_ARGUMENT_STATUS = {"gpu-node-drift": 1, "python -m deploy.fleet.drift": 1}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_an_unknown_option_is_one_line_and_exit_2_changing_nothing(name, tmp_path):
    """One line (the first problem argparse meets: the unknown option, or an argument it lacks)."""
    result = sandboxed([*COMMANDS[name], "--no-such-option"], tmp_path)
    assert result.returncode == BAD_ARGUMENT_STATUS.get(name, 2), result.stdout + result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
